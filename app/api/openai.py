"""The OpenAI-compatible routes under ``/openai/v1``: Chat Completions, Responses, files and
vector stores.

Thin as the others: parse OpenAI's shapes into the question ``/v1/answers`` takes
(``app.compat.openai``), ask it through the same pipeline, render the stored Answer back in
OpenAI's shapes (errors too: ``app.compat.openai.errors``). Not in /openapi.json: these routes
are OpenAI's own, described by its API reference and spoken by its SDKs.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

import orjson
from fastapi import APIRouter, Request, Response
from starlette.background import BackgroundTask

from app.answers import service as answers
from app.answers.answer import AnswerOut
from app.answers.context import AnswerContext
from app.answers.relay import RelayedAnswer, open_relay
from app.answers.request import prepare
from app.api.deps import AnthropicPrincipalDep, RequestSession
from app.api.event_stream import EventStream
from app.compat.openai.chat import (
    DONE,
    ChatChunks,
    chat_completion,
    chunk_lines,
    parse_chat_request,
)
from app.compat.openai.errors import openai_error

router = APIRouter(prefix="/openai/v1", tags=["openai"], include_in_schema=False)
ANSWER_HEADER = "citegate-answer-id"
# The compatible APIs' caller: a key as Authorization: Bearer (what the OpenAI SDKs send);
# while no key exists the service is open and an SDK, which cannot send no key, is let in.
PrincipalDep = AnthropicPrincipalDep


@router.post("/chat/completions", operation_id="openaiCreateChatCompletion")
async def create_chat_completion(request: Request, principal: PrincipalDep) -> Response:
    # The session and the context are not dependencies, as for /v1/answers (RequestSession).
    context: AnswerContext = request.app.state.answer_context
    chat = parse_chat_request(await request.body())
    async with RequestSession(request) as session:
        prepared = await prepare(
            session, principal.tenant_id, chat.body, context, earlier=chat.earlier
        )
    base_url = str(request.base_url)
    if chat.stream:
        relayed = await open_relay(context, principal, prepared)
        chunks = ChatChunks(prepared.id, prepared.request["model"], base_url, chat.include_usage)
        return EventStream(
            _chat_chunks(relayed, chunks),
            ping=context.settings.sse_keepalive_seconds,
            send_timeout=context.settings.stream_send_timeout_seconds or None,
            headers={ANSWER_HEADER: prepared.id},
            finish=BackgroundTask(relayed.close),
        )
    answer, _ = await answers.answer_prepared(context, principal, prepared)
    return Response(
        orjson.dumps(chat_completion(answer.shown(), base_url)),
        media_type="application/json",
        headers={ANSWER_HEADER: answer.id},
    )


async def _chat_chunks(relayed: RelayedAnswer, chunks: ChatChunks) -> AsyncGenerator[bytes, None]:
    """The relay's events as chunks, those of each upstream event as one write; ``[DONE]``
    after the last, or an ``error`` object when the answer failed."""
    async with aclosing(relayed.events()) as events:
        async for made in events:
            out: list[dict[str, Any]] = []
            for name, data in made:
                if isinstance(data, AnswerOut):
                    out.extend(chunks.end(data.shown()))
                elif name == "error":
                    failure = relayed.failure
                    assert failure is not None
                    out.append(openai_error(failure).body())
                else:
                    out.extend(chunks.of_event(name, data))
            if out:
                yield chunk_lines(out)
    if relayed.failure is None:
        yield DONE
