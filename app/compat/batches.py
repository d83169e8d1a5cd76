"""Message Batches over stored documents: the answer batches of ``/v1/answer-batches``, asked
and shown in the Messages API's shapes.

A batch request's ``params`` is a Messages request, its files swapped for the stored documents
as ``/anthropic/v1/messages`` does (``service.prepare``); it is stored and polled as an answer
batch, so its answer is stored with every citation resolved. Its result is the upstream's own
line, the message's citations gaining ``citegate``; a request refused before it went upstream is
``errored`` with its error in the Messages API's shape.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.answers.context import AnswerContext
from app.batches.service import (
    BatchQuestion,
    batch_payload,
    invalid_problem,
    time_text,
)
from app.compat import service
from app.compat.errors import problem_error
from app.compat.messages import enrich_message, messages_request
from app.db.models import Answer, AnswerBatch, AnswerBatchRequest
from app.errors import CitegateError, problem_of
from app.upstream.wire import CUSTOM_ID_PATTERN, MAX_BATCH_REQUESTS, BatchResult

_LINES_PER_READ = 200


class MessageBatchItem(BaseModel):
    custom_id: str = Field(pattern=CUSTOM_ID_PATTERN)
    params: dict[str, Any]


class MessageBatchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    requests: list[MessageBatchItem] = Field(min_length=1, max_length=MAX_BATCH_REQUESTS)


async def prepare_question(
    session: AsyncSession, tenant_id: str, item: MessageBatchItem, context: AnswerContext
) -> BatchQuestion:
    """The request built as ``/anthropic/v1/messages`` builds it, or the problem that keeps it
    from being asked (an ``errored`` result)."""
    try:
        request = messages_request(item.params, create=True)
    except ValidationError as exc:
        errors: list[dict[str, Any]] = [
            {"loc": ["params", *error["loc"]], "msg": error["msg"], "type": error["type"]}
            for error in exc.errors(include_url=False, include_input=False)
        ]
        return BatchQuestion(item.custom_id, None, invalid_problem(errors))
    if request.stream:
        errors = [{"loc": ["params", "stream"], "msg": "Not in a batch request", "type": "stream"}]
        return BatchQuestion(item.custom_id, None, invalid_problem(errors))
    try:
        prepared = await service.prepare(session, tenant_id, request, context)
    except CitegateError as exc:
        await session.rollback()
        return BatchQuestion(item.custom_id, None, problem_of(exc))
    return BatchQuestion(item.custom_id, prepared)


def message_batch(batch: AnswerBatch, counts: dict[str, int], results_url: str) -> dict[str, Any]:
    """The batch as the Messages API shows a Message Batch."""
    shown = batch_payload(batch, counts)
    ended = batch.status == "ended"
    return {
        "id": batch.id,
        "type": "message_batch",
        "processing_status": "in_progress" if batch.status == "validating" else batch.status,
        "request_counts": counts,
        "created_at": shown["created_at"],
        "ended_at": shown["ended_at"],
        "expires_at": shown["expires_at"],
        "cancel_initiated_at": time_text(batch.cancel_requested_at),
        "archived_at": None,
        "results_url": results_url if ended else None,
    }


async def open_results(
    context: AnswerContext, batch: AnswerBatch
) -> tuple[AsyncIterator[bytes], AsyncExitStack]:
    """The results of an ended batch as JSON lines, and what closes them. The upstream's
    results file is opened now, so that its refusal is an error response, not a cut stream."""
    stack = AsyncExitStack()
    upstream = None
    if batch.upstream_batch_id is not None:
        upstream = await stack.enter_async_context(
            context.upstream.batch_results(batch.upstream_batch_id)
        )
    return _result_lines(context, batch, upstream, stack), stack


async def _result_lines(
    context: AnswerContext,
    batch: AnswerBatch,
    upstream: AsyncIterator[BatchResult] | None,
    stack: AsyncExitStack,
) -> AsyncIterator[bytes]:
    """The upstream's lines, read as they arrive, each succeeded message enriched from its
    stored answer; then those the upstream has none of (refused before they went upstream, or
    left out of its results)."""
    seen: set[str] = set()
    async with stack:
        if upstream is not None:
            chunk: list[BatchResult] = []
            async for result in upstream:
                chunk.append(result)
                if len(chunk) == _LINES_PER_READ:
                    yield await _upstream_lines(context, batch.id, chunk, seen)
                    chunk = []
            if chunk:
                yield await _upstream_lines(context, batch.id, chunk, seen)
    query = (
        select(AnswerBatchRequest.custom_id, AnswerBatchRequest.status, AnswerBatchRequest.error)
        .where(AnswerBatchRequest.batch_id == batch.id)
        .order_by(AnswerBatchRequest.position)
    )
    async with context.sessions() as session:
        rows = (await session.execute(query)).all()
    lines = [
        _line(custom_id, _own_result(status, error))
        for custom_id, status, error in rows
        if custom_id not in seen
    ]
    if lines:
        yield b"".join(lines)


async def _upstream_lines(
    context: AnswerContext, batch_id: str, chunk: Sequence[BatchResult], seen: set[str]
) -> bytes:
    query = (
        select(AnswerBatchRequest.custom_id, Answer.segments)
        .join(Answer, Answer.id == AnswerBatchRequest.answer_id)
        .where(
            AnswerBatchRequest.batch_id == batch_id,
            AnswerBatchRequest.custom_id.in_([result.custom_id for result in chunk]),
        )
    )
    async with context.sessions() as session:
        segments = {custom_id: stored for custom_id, stored in (await session.execute(query)).all()}
    lines = []
    for result in chunk:
        seen.add(result.custom_id)
        shown = dict(result.result)
        stored = segments.get(result.custom_id)
        if shown.get("type") == "succeeded" and stored is not None:
            message = shown.get("message")
            if isinstance(message, dict):
                enrich_message(message, stored)
        lines.append(_line(result.custom_id, shown))
    return b"".join(lines)


def _own_result(status: str, error: dict[str, Any] | None) -> dict[str, Any]:
    if status == "errored":
        return {"type": "errored", "error": problem_error(error or {})}
    return {"type": status}


def _line(custom_id: str, result: dict[str, Any]) -> bytes:
    return orjson.dumps({"custom_id": custom_id, "result": result}) + b"\n"
