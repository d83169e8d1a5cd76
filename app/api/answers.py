"""The answers routes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

import orjson
from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse, ServerSentEvent

from app.answers import service
from app.answers.schemas import AnswerOut, AnswerRequest, TokenCount
from app.answers.streaming import Event
from app.api.deps import PrincipalDep, SessionDep, TenantDep
from app.api.problems import problems


def _context(request: Request) -> service.AnswerContext:
    context: service.AnswerContext = request.app.state.answer_context
    return context


ContextDep = Annotated[service.AnswerContext, Depends(_context)]
router = APIRouter(prefix="/v1/answers", tags=["answers"])
_UPSTREAM_PROBLEMS = problems(404, 413, 422, 429, 502, 503, 504)


@router.post(
    "",
    operation_id="createAnswer",
    summary="Ask a question about documents; every citation resolved to a stored span",
    response_model=AnswerOut,
    responses=_UPSTREAM_PROBLEMS,
)
async def create_answer(
    body: AnswerRequest, session: SessionDep, principal: PrincipalDep, context: ContextDep
) -> Response:
    if body.stream:
        events = await service.open_stream(session, principal, body, context)
        return EventSourceResponse(
            _server_sent(events),
            ping=context.settings.sse_keepalive_seconds,
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )
    answer = await service.create_answer(session, principal, body, context)
    return JSONResponse(service.answer_payload(answer))


async def _server_sent(events: AsyncIterator[Event]) -> AsyncIterator[ServerSentEvent]:
    async for name, data in events:
        yield ServerSentEvent(data=orjson.dumps(data).decode(), event=name)


@router.post(
    "/count-tokens",
    operation_id="countAnswerTokens",
    summary="Count the input tokens a question would use",
    response_model=TokenCount,
    responses=_UPSTREAM_PROBLEMS,
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
    responses=problems(404),
)
async def get_answer(answer_id: str, session: SessionDep, tenant_id: TenantDep) -> JSONResponse:
    return JSONResponse(
        service.answer_payload(await service.get_answer(session, tenant_id, answer_id))
    )
