"""The answers routes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Annotated, Any

import anyio
import orjson
from fastapi import APIRouter, Depends, Path, Request, Response
from sse_starlette import EventSourceResponse, ServerSentEvent
from sse_starlette.sse import SendTimeoutError
from starlette.background import BackgroundTask
from starlette.types import Message, Receive, Scope, Send

from app.answers import service
from app.answers.schemas import STREAM_EVENT_DATA, AnswerOut, AnswerRequest, TokenCount
from app.answers.streaming import Event
from app.api.deps import PdfPagesDep, PrincipalDep, SessionDep, TenantDep
from app.api.problems import (
    AUTH_PROBLEMS,
    BODY_PROBLEMS,
    PROBLEM_REF,
    UPSTREAM_PROBLEMS,
    links,
    problems,
)
from app.api.responses import OrjsonResponse
from app.documents.schemas import NO_NUL

log = logging.getLogger(__name__)


async def _context(request: Request) -> service.AnswerContext:  # async: no worker thread
    context: service.AnswerContext = request.app.state.answer_context
    return context


ContextDep = Annotated[service.AnswerContext, Depends(_context)]
AnswerId = Annotated[str, Path(pattern=NO_NUL, description="The answer's id, `ans_…`.")]
router = APIRouter(prefix="/v1/answers", tags=["answers"], responses=problems(*AUTH_PROBLEMS))

_COMPONENTS = "#/components/schemas/"
_EVENTS = {
    "answer.started": "the answer's id, conversation, model and documents",
    "segment.started": "a segment (an upstream text block) begins",
    "text.delta": "text to append to the segment",
    "citation": "a citation of the segment, resolved to a stored span",
    "segment.done": "the segment is complete",
    "answer.done": "the whole Answer, stored, as getAnswer returns it",
    "error": "a problem document; the stream ends after it, and the answer is stored as failed",
}


def _data_schema(event: str) -> dict[str, Any]:
    """The schema of an event's JSON data, referring to components for the models in it."""
    if event == "error":
        return {"$ref": PROBLEM_REF}
    model = STREAM_EVENT_DATA[event]
    if model is AnswerOut:
        return {"$ref": _COMPONENTS + "AnswerOut"}
    schema = model.model_json_schema(ref_template=_COMPONENTS + "{model}", mode="serialization")
    # The models it refers to are parts of the Answer, so components already.
    answer_models = AnswerOut.model_json_schema(mode="serialization")["$defs"]
    if unknown := set(schema.pop("$defs", {})) - set(answer_models):
        raise RuntimeError(f"{event} data refers to {sorted(unknown)}, not parts of AnswerOut")
    return schema


def _event_stream_schema() -> dict[str, Any]:
    """One server-sent event: its name and its JSON data (``contentSchema``)."""
    return {
        "oneOf": [
            {
                "type": "object",
                "title": f"{event} event",
                "description": description,
                "properties": {
                    "event": {"const": event},
                    "data": {
                        "type": "string",
                        "contentMediaType": "application/json",
                        "contentSchema": _data_schema(event),
                    },
                },
                "required": ["event", "data"],
            }
            for event, description in _EVENTS.items()
        ]
    }


_STREAM_DESCRIPTION = (
    'The Answer, stored. With `"stream": true`, server-sent events instead '
    "(`text/event-stream`; the schema describes one event, its `data` is JSON): "
    + "; ".join(f"`{event}`: {description}" for event, description in _EVENTS.items())
    + ". `segment.started`, `text.delta`, `citation` and `segment.done` repeat for each "
    "segment, in order. Comment lines keep the connection alive."
)


@router.post(
    "",
    operation_id="createAnswer",
    summary="Ask a question about documents; every citation resolved to a stored span",
    response_model=AnswerOut,
    response_description=_STREAM_DESCRIPTION,
    responses={
        200: {
            "content": {"text/event-stream": {"schema": _event_stream_schema()}},
            "links": links("answer_id", "getAnswer"),
        },
        **problems(*BODY_PROBLEMS, 404, 409, *UPSTREAM_PROBLEMS),
    },
)
async def create_answer(
    body: AnswerRequest, session: SessionDep, principal: PrincipalDep, context: ContextDep
) -> Response:
    if body.stream:
        relayed = await service.open_stream(session, principal, body, context)
        return EventStream(
            _server_sent(relayed.events()),
            ping=context.settings.sse_keepalive_seconds,
            send_timeout=context.settings.stream_send_timeout_seconds or None,
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
            # Stores and frees what a stream that was never read (or cut short) still holds.
            background=BackgroundTask(relayed.close),
        )
    answer = await service.create_answer(session, principal, body, context)
    return OrjsonResponse(service.answer_payload(answer))


class EventStream(EventSourceResponse):
    """sse-starlette's response, with its send timeout kept by one timer per response instead
    of a cancel scope around each send: entering and leaving an anyio scope, with a deadline
    or without, is a sizeable share of what relaying an event costs.

    ``send_timeout`` is still sse-starlette's own, so that should it stop calling
    ``_send_with_timeout`` its timeout still applies (tests/unit/test_event_stream.py fails
    then). A timed-out send cancels the response: the relay is closed as for a client that
    went away, and ``background`` stores what arrived.
    """

    async def _send_with_timeout(self, send: Send, message: Message) -> None:
        await send(message)  # no scope: with a timeout, __call__'s _SendWatch bounds it

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._respond(scope, receive, send)
        finally:
            # sse-starlette's cancelled tasks leave reference cycles that hold this response
            # until a full collection, which is rare (GC_THRESHOLDS): once it has ended, let it
            # hold nothing of its answer (the relay, its request, the upstream response).
            self.body_iterator = _ENDED
            self.background = None

    async def _respond(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.send_timeout is None:
            await super().__call__(scope, receive, send)
            return
        with anyio.CancelScope() as cancel_scope:
            watch = _SendWatch(send, self.send_timeout, cancel_scope)
            try:
                await super().__call__(scope, receive, watch.send)
            except SendTimeoutError:  # sse-starlette's own timeout, as a fallback
                watch.stalled = True
            finally:
                watch.stop()
        if watch.stalled:
            log.warning(
                "a stream's client read nothing for %s s; the stream is ended", watch.timeout
            )
            if self.background is not None:  # cancelled before super() could run it
                with anyio.CancelScope(shield=True):
                    await self.background()


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield  # an async generator that yields nothing


_ENDED: AsyncIterator[bytes] = _nothing()


class _SendWatch:
    """The sends of one response, and a timer that cancels the response once a send has been
    waiting ``timeout`` seconds with none completing: a client that stopped reading. Each send
    only counts; the timer looks a few times per ``timeout``."""

    CHECKS_PER_TIMEOUT = 4

    def __init__(self, send: Send, timeout: float, cancel_scope: anyio.CancelScope) -> None:
        self._send = send
        self.timeout = timeout
        self._cancel_scope = cancel_scope
        self._begun = self._done = self._done_at_check = 0
        self._idle_checks = 0
        self.stalled = False
        self._interval = timeout / self.CHECKS_PER_TIMEOUT
        self._loop = asyncio.get_running_loop()
        self._timer = self._loop.call_later(self._interval, self._check)

    async def send(self, message: Message) -> None:
        self._begun += 1
        try:
            await self._send(message)
        finally:
            self._done += 1

    def stop(self) -> None:
        self._timer.cancel()

    def _check(self) -> None:
        if self._begun > self._done and self._done == self._done_at_check:
            self._idle_checks += 1
        else:
            self._idle_checks = 0
        self._done_at_check = self._done
        # The first idle check may come just after the send began: one more makes a full timeout.
        if self._idle_checks > self.CHECKS_PER_TIMEOUT:
            self.stalled = True
            self._cancel_scope.cancel()
        else:
            self._timer = self._loop.call_later(self._interval, self._check)


async def _server_sent(batches: AsyncIterator[list[Event]]) -> AsyncIterator[bytes]:
    # aclosing: when this generator is closed, the relay is closed now, not at GC time.
    async with aclosing(batches):  # type: ignore[type-var]
        async for events in batches:  # one write for each read of the upstream
            yield b"".join(
                ServerSentEvent(data=orjson.dumps(data).decode(), event=name).encode()
                for name, data in events
            )


@router.post(
    "/count-tokens",
    operation_id="countAnswerTokens",
    summary="Count the input tokens a question would use",
    response_model=TokenCount,
    responses=problems(*BODY_PROBLEMS, 404, *UPSTREAM_PROBLEMS),
)
async def count_answer_tokens(
    body: AnswerRequest, session: SessionDep, principal: PrincipalDep, context: ContextDep
) -> TokenCount:
    return TokenCount(input_tokens=await service.count_tokens(session, principal, body, context))


@router.get(
    "/{answer_id}",
    operation_id="getAnswer",
    summary="Get a stored answer",
    response_model=AnswerOut,
    responses=problems(404, 422),
)
async def get_answer(
    answer_id: AnswerId, session: SessionDep, tenant_id: TenantDep, pages: PdfPagesDep
) -> OrjsonResponse:
    answer = await service.get_answer(session, tenant_id, answer_id)
    return OrjsonResponse(await service.answer_out(session, pages, answer))
