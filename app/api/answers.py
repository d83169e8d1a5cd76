"""The answers routes."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from typing import Any

import orjson
from fastapi import APIRouter, Request, Response, status
from starlette.background import BackgroundTask

from app.answers import service, store
from app.answers.answer import AnswerOut
from app.answers.context import AnswerContext
from app.answers.relay import Relayed, RelayedAnswer
from app.answers.schemas import STREAM_EVENT_DATA, AnswerRequest, TokenCount
from app.api.deps import (
    AnswerId,
    ContextDep,
    PdfPagesDep,
    PrincipalDep,
    RequestSession,
    SessionDep,
    TenantDep,
)
from app.api.event_stream import EventStream, server_sent
from app.api.problems import (
    AUTH_PROBLEMS,
    BODY_PROBLEMS,
    PROBLEM_REF,
    UPSTREAM_PROBLEMS,
    ProblemResponse,
    links,
    problems,
)

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
    response_model_exclude_unset=True,  # as AnswerOut.shown
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
    body: AnswerRequest, request: Request, principal: PrincipalDep
) -> AnswerOut | Response:
    # The session is opened here rather than as a dependency (RequestSession says why).
    context: AnswerContext = request.app.state.answer_context
    if body.stream:
        async with RequestSession(request) as session:
            relayed = await service.open_stream(session, principal, body, context)
        return EventStream(
            _written(relayed),
            ping=context.settings.sse_keepalive_seconds,
            send_timeout=context.settings.stream_send_timeout_seconds or None,
            # Stores and frees what a stream that was never read (or cut short) still holds.
            finish=BackgroundTask(relayed.close),
        )
    async with RequestSession(request) as session:
        return await service.create_answer(session, principal, body, context)


async def _written(relayed: RelayedAnswer) -> AsyncGenerator[bytes, None]:
    """The relay's events, those of each upstream event as one write."""
    async with aclosing(relayed.events()) as events:
        async for made in events:
            yield server_sent(_encoded(made))


def _encoded(events: Sequence[Relayed]) -> list[tuple[str, str]]:
    return [(name, _json(data)) for name, data in events]


def _json(data: dict[str, Any] | AnswerOut) -> str:
    return data.shown_json() if isinstance(data, AnswerOut) else orjson.dumps(data).decode()


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
    response_model_exclude_unset=True,  # as AnswerOut.shown
    responses=problems(404, 422),
)
async def get_answer(
    answer_id: AnswerId, session: SessionDep, tenant_id: TenantDep, pages: PdfPagesDep
) -> AnswerOut:
    answer = await store.get_answer(session, tenant_id, answer_id)
    return await store.answer_out(session, pages, answer)


@router.delete(
    "/{answer_id}",
    operation_id="deleteAnswer",
    summary="Delete an answer; its share links stop working",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=ProblemResponse,  # every body it sends is a problem: see app.api.problems
    response_description="Deleted.",
    responses=problems(404, 422, model=True),
)
async def delete_answer(answer_id: AnswerId, session: SessionDep, tenant_id: TenantDep) -> Response:
    await store.delete_answer(session, tenant_id, answer_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
