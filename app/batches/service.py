"""Answer batches: many questions sent upstream as one Message Batch, answered within a day.

Each question is checked and built exactly as createAnswer builds it (``answers.service.
prepare``); one that cannot be asked is an ``errored`` result at once. The batch and every
request are rows, written in one transaction before the upstream is asked (``store_batch``);
the poller (``app.batches.poller``) settles a batch whose upstream batch is not known, and
stores the results. A request's answer id is fixed at creation,
so its Answer is stored once however often its result is read.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

import anyio
import orjson
from pydantic import ValidationError
from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.answers import spending
from app.answers.context import AnswerContext
from app.answers.request import Prepared, prepare
from app.answers.schemas import AnswerRequest
from app.answers.store import system_text
from app.auth import budgets
from app.auth.budgets import NO_RESERVATION
from app.auth.keys import Principal
from app.batches.schemas import NOT_IN_BATCHES, AnswerBatchItem
from app.db.models import Answer, AnswerBatch, AnswerBatchRequest, utcnow
from app.db.tenancy import get_owned, list_newest
from app.errors import (
    CitegateError,
    ErrorCode,
    InvalidRequest,
    PayloadTooLarge,
    problem_body,
    problem_of,
)
from app.ids import new_id
from app.pagination import Page, decode_index_cursor, paginate
from app.upstream.errors import UpstreamError
from app.upstream.wire import MAX_BATCH_BYTES, MessageBatch

log = logging.getLogger(__name__)

BATCH_LIFETIME = timedelta(hours=24)  # the upstream's; a batch with nothing to send ends at once
PENDING = "pending"
# A request's status in the database, as request_counts names it.
_COUNTED = {
    PENDING: "processing",
    "succeeded": "succeeded",
    "errored": "errored",
    "canceled": "canceled",
    "expired": "expired",
}


@dataclass(frozen=True, slots=True)
class BatchQuestion:
    """A request of a batch: what createAnswer would send for it, or the problem that keeps it
    from being asked."""

    custom_id: str
    prepared: Prepared | None
    error: dict[str, Any] | None = None


class _Item(Protocol):
    @property
    def custom_id(self) -> str: ...


Item = TypeVar("Item", bound=_Item)


async def prepare_questions(
    session: AsyncSession,
    tenant_id: str,
    items: Sequence[Item],
    context: AnswerContext,
    prepare_one: Callable[[AsyncSession, str, Item, AnswerContext], Awaitable[BatchQuestion]],
) -> list[BatchQuestion]:
    """Check and build every request with ``prepare_one`` (as createAnswer would, or as the
    Messages API would); a request that cannot be asked gets its problem. The session's
    connection is given back at the end."""
    check_unique([item.custom_id for item in items])
    questions = []
    try:
        for item in items:
            questions.append(await prepare_one(session, tenant_id, item, context))
    finally:
        await session.rollback()  # only reads; a refusal may have left a transaction open
    return questions


async def prepare_question(
    session: AsyncSession, tenant_id: str, item: AnswerBatchItem, context: AnswerContext
) -> BatchQuestion:
    fields = dict(item.model_extra or {})
    refused = [name for name in NOT_IN_BATCHES if name in fields]
    if refused:
        errors: list[dict[str, Any]] = [
            {"loc": [name], "msg": "Not in a batch request", "type": "extra_forbidden"}
            for name in refused
        ]
        return BatchQuestion(item.custom_id, None, invalid_problem(errors))
    try:
        body = AnswerRequest.model_validate(fields)
    except ValidationError as exc:
        errors = [
            {"loc": [*error["loc"]], "msg": error["msg"], "type": error["type"]}
            for error in exc.errors(include_url=False, include_input=False)
        ]
        return BatchQuestion(item.custom_id, None, invalid_problem(errors))
    try:
        prepared = await prepare(session, tenant_id, body, context)
    except CitegateError as exc:
        return BatchQuestion(item.custom_id, None, problem_of(exc))
    return BatchQuestion(item.custom_id, prepared)


def invalid_problem(errors: list[dict[str, Any]]) -> dict[str, Any]:
    return problem_body(
        ErrorCode.VALIDATION_ERROR, "The request is not valid; see errors.", errors=errors
    )


def check_unique(custom_ids: Sequence[str]) -> None:
    seen: set[str] = set()
    for custom_id in custom_ids:
        if custom_id in seen:
            raise InvalidRequest(
                f"custom_id {custom_id!r} names more than one request.",
                code=ErrorCode.DUPLICATE_CUSTOM_IDS,
            )
        seen.add(custom_id)


def batch_body(questions: Sequence[BatchQuestion]) -> bytes:
    """The Message Batch of the questions that can be asked, as JSON. Blocking (it can be
    hundreds of megabytes); 413 ``batch_too_large`` above the upstream's limit."""
    requests = [
        {"custom_id": question.custom_id, "params": question.prepared.request}
        for question in questions
        if question.prepared is not None
    ]
    content = orjson.dumps({"requests": requests})
    if len(content) > MAX_BATCH_BYTES:
        raise PayloadTooLarge(
            f"The batch's requests make {len(content)} bytes upstream; the limit is "
            f"{MAX_BATCH_BYTES}.",
            code=ErrorCode.BATCH_TOO_LARGE,
        )
    return content


async def create_batch(
    session: AsyncSession,
    principal: Principal,
    items: Sequence[AnswerBatchItem],
    context: AnswerContext,
) -> AnswerBatch:
    """Check every request, send those that can be asked upstream as one Message Batch, and
    store the batch with every request (the refused ones already ``errored``)."""
    questions = await prepare_questions(
        session, principal.tenant_id, items, context, prepare_question
    )
    return await store_batch(principal, questions, context)


async def store_batch(
    principal: Principal, questions: Sequence[BatchQuestion], context: AnswerContext
) -> AnswerBatch:
    """Store the batch and all its requests, then send the questions that can be asked
    upstream as one Message Batch.

    The rows come first (status ``validating``, the body kept), so that no upstream batch can
    exist that no row names. The upstream's answer settles the batch: accepted, it is
    ``in_progress`` with its upstream id; refused (a status that says no batch was made),
    the rows are deleted and the refusal raised, nothing stored; anything else (a 5xx, a
    timeout, a lost connection, a crash) may have made the batch, so it stays ``validating``
    and the poller reconciles it (``app.batches.poller``): it adopts the upstream batch made
    for it, or sends the body again once none was.
    """
    now = utcnow()
    content = None
    costs: list[int] = []
    reservation = NO_RESERVATION
    if any(question.prepared is not None for question in questions):
        await context.limits.check_tokens(principal)
        content = await anyio.to_thread.run_sync(batch_body, questions)
        if principal.budgets:
            # Every request's maximum cost, at the batch price, reserved now as one amount;
            # each request's share is settled as its result is stored (app.batches.poller),
            # what is left released when the batch ends without it.
            costs = await anyio.to_thread.run_sync(_max_costs, context, questions)
            reservation = await budgets.reserve(context.engine, principal.budgets, sum(costs))
    creator = secrets.token_hex(8)
    lease = timedelta(seconds=context.settings.batch_lease_seconds)
    batch_id = new_id("batch")
    batch: dict[str, Any] = {
        "id": batch_id,
        "tenant_id": principal.tenant_id,
        "key_id": principal.key_id,
        "status": "validating" if content is not None else "ended",
        "upstream_batch_id": None,
        "upstream_body": content,
        "upstream_sent_at": now if content is not None else None,
        "request_count": len(questions),
        "created_at": now,
        "expires_at": now + BATCH_LIFETIME,
        "ended_at": None if content is not None else now,
        "cancel_requested_at": None,
        "next_poll_at": now + timedelta(seconds=context.settings.batch_poll_seconds),
        "polls_unchanged": 0,
        "lease_owner": creator if content is not None else None,
        "lease_until": now + lease if content is not None else None,
        "budget_owners": [list(row) for row in reservation.owners] or None,
    }
    rows = [
        _request_row(batch_id, principal.tenant_id, position, question)
        | {"reserved_nano_usd": costs[position] if costs else 0}
        for position, question in enumerate(questions)
    ]
    try:
        async with context.engine.begin() as connection:
            await connection.execute(insert(AnswerBatch), [batch])
            await connection.execute(insert(AnswerBatchRequest), rows)
    except BaseException:
        await spending.release(context, reservation)
        raise
    for row in rows:
        if row["status"] != PENDING:
            context.metrics.batch_results.labels(row["status"]).inc()
    del batch["upstream_body"]
    if content is None:
        return AnswerBatch(**batch)
    try:
        retry_at = now + timedelta(seconds=context.settings.batch_poll_seconds)
        upstream = await send_batch(context, batch_id, creator, content, retry_at)
    except UpstreamError as exc:
        if not made_nothing(exc):
            log.warning("answer batch %s: the upstream's answer is unknown (%s)", batch_id, exc)
            return AnswerBatch(**batch)
        async with context.engine.begin() as connection:
            await connection.execute(delete(AnswerBatch).where(AnswerBatch.id == batch_id))
        await spending.release(context, reservation)  # nothing was made: nothing is spent
        raise
    if upstream is not None:
        batch |= {"status": "in_progress", "upstream_batch_id": upstream.id}
        batch |= {"expires_at": upstream.expires_at, "upstream_sent_at": now}
    return AnswerBatch(**batch)


def _max_costs(context: AnswerContext, questions: Sequence[BatchQuestion]) -> list[int]:
    """Each request's maximum cost at the batch price (0 for one refused already)."""
    return [
        0
        if question.prepared is None
        else spending.max_cost(
            context, question.prepared.request, question.prepared.sources, batch=True
        )
        for question in questions
    ]


def made_nothing(exc: UpstreamError) -> bool:
    """Whether the upstream's error says it made no batch: a 4xx, or overloaded (529)."""
    answered = exc.answered
    return answered is not None and (answered.status < 500 or answered.status == 529)


async def send_batch(
    context: AnswerContext, batch_id: str, holder: str, content: bytes, retry_at: datetime
) -> MessageBatch | None:
    """Create the upstream batch of a ``validating`` batch that ``holder`` leases, the lease
    renewed while the upstream is asked; record it (and drop the body). None when the batch
    was settled meanwhile by another process (this upstream batch then cancelled: a second).
    An error is raised with the batch left as it was, its lease given up until ``retry_at``
    (when the poller reconciles it)."""
    lease = context.settings.batch_lease_seconds
    ours = (AnswerBatch.id == batch_id, AnswerBatch.lease_owner == holder)

    async def renew() -> None:
        while True:
            await anyio.sleep(lease / 3)
            async with context.engine.begin() as connection:
                until = utcnow() + timedelta(seconds=lease)
                await connection.execute(update(AnswerBatch).where(*ours).values(lease_until=until))

    async def release(**values: Any) -> int:
        with anyio.CancelScope(shield=True):
            async with context.engine.begin() as connection:
                done = await connection.execute(
                    update(AnswerBatch)
                    .where(*ours, AnswerBatch.status == "validating")
                    .values(lease_owner=None, lease_until=None, **values)
                )
        return int(done.rowcount)

    renewing = asyncio.get_running_loop().create_task(renew())
    try:
        upstream = await context.upstream.create_batch(content)
    except UpstreamError:
        await release(upstream_sent_at=utcnow(), next_poll_at=retry_at)
        raise
    finally:
        renewing.cancel()
    recorded = await release(
        status="in_progress",
        upstream_batch_id=upstream.id,
        upstream_body=None,
        expires_at=upstream.expires_at,
        next_poll_at=utcnow() + timedelta(seconds=context.settings.batch_poll_seconds),
        polls_unchanged=0,
    )
    if recorded != 1:
        async with context.engine.connect() as connection:
            named = await connection.scalar(
                select(AnswerBatch.upstream_batch_id).where(AnswerBatch.id == batch_id)
            )
        if named != upstream.id:  # another process made or found another: this one is extra
            log.warning("answer batch %s: upstream batch %s is a second", batch_id, upstream.id)
            with anyio.CancelScope(shield=True):
                await _cancel_quietly(context, upstream.id)
        return None
    return upstream


async def _cancel_quietly(context: AnswerContext, upstream_id: str) -> None:
    """An upstream batch that no row will name is cancelled, so that it is not paid for."""
    try:
        await context.upstream.cancel_batch(upstream_id)
    except CitegateError:
        log.warning("upstream batch %s is not Citegate's and could not be cancelled", upstream_id)


def _request_row(
    batch_id: str, tenant_id: str, position: int, question: BatchQuestion
) -> dict[str, Any]:
    prepared = question.prepared
    if prepared is None:
        return {
            "batch_id": batch_id,
            "tenant_id": tenant_id,
            "position": position,
            "custom_id": question.custom_id,
            "status": "errored",
            "answer_id": new_id("ans"),
            "question": "",
            "system": None,
            "model": None,
            "max_tokens": None,
            "document_ids": [],
            "documents": [],
            "retrieval": None,
            "error": question.error,
            "support": None,
        }
    return {
        "batch_id": batch_id,
        "tenant_id": tenant_id,
        "position": position,
        "custom_id": question.custom_id,
        "status": PENDING,
        "answer_id": prepared.id,
        "question": prepared.question,
        "system": system_text(prepared.request.get("system")),
        "model": prepared.request["model"],
        "max_tokens": prepared.request["max_tokens"],
        # Each document block's stored document; None for one that names none (a block of
        # the compatible API's own, which keeps its place in the count).
        "document_ids": [source and source.document_id for source in prepared.sources],
        "documents": prepared.documents,
        "retrieval": prepared.retrieval,
        "error": None,
        "support": prepared.support,
    }


async def get_batch(session: AsyncSession, tenant_id: str, batch_id: str) -> AnswerBatch:
    return await get_owned(session, AnswerBatch, tenant_id, batch_id, "answer batch")


async def list_batches(
    session: AsyncSession, tenant_id: str, limit: int, cursor: str | None
) -> Page[AnswerBatch]:
    return await list_newest(session, AnswerBatch, tenant_id, limit, cursor)


async def request_counts(
    session: AsyncSession, batch_ids: Sequence[str]
) -> dict[str, dict[str, int]]:
    """Each batch's requests by status, counted from the rows (so always true)."""
    counts = {batch_id: dict.fromkeys(_COUNTED.values(), 0) for batch_id in batch_ids}
    if not batch_ids:
        return counts
    query = (
        select(AnswerBatchRequest.batch_id, AnswerBatchRequest.status, func.count())
        .where(AnswerBatchRequest.batch_id.in_(batch_ids))
        .group_by(AnswerBatchRequest.batch_id, AnswerBatchRequest.status)
    )
    for batch_id, status, count in (await session.execute(query)).all():
        counts[batch_id][_COUNTED[status]] = count
    return counts


@dataclass(frozen=True, slots=True)
class BatchResult:
    custom_id: str
    status: str
    answer: Answer | None
    error: dict[str, Any] | None


async def list_results(
    session: AsyncSession, tenant_id: str, batch_id: str, limit: int, cursor: str | None
) -> Page[BatchResult]:
    """The results known so far, in request order; a request still being answered has none."""
    await get_batch(session, tenant_id, batch_id)
    query = (
        select(AnswerBatchRequest, Answer)
        .outerjoin(Answer, Answer.id == AnswerBatchRequest.answer_id)
        .where(AnswerBatchRequest.batch_id == batch_id, AnswerBatchRequest.status != PENDING)
    )
    if cursor is not None:
        query = query.where(AnswerBatchRequest.position > decode_index_cursor(cursor))
    rows = (
        await session.execute(query.order_by(AnswerBatchRequest.position).limit(limit + 1))
    ).all()
    page = paginate(rows, limit, key=lambda row: row[0].position)
    return Page(
        [
            BatchResult(request.custom_id, request.status, answer, request.error)
            for request, answer in page.items
        ],
        page.next_cursor,
    )


async def cancel_batch(
    session: AsyncSession, tenant_id: str, batch_id: str, context: AnswerContext
) -> AnswerBatch:
    """Ask the upstream to cancel; the poller stores the results (canceled or not) as the
    batch ends. An ended batch, or one already canceling, is returned as it is."""
    batch = await get_batch(session, tenant_id, batch_id)
    if batch.status in ("ended", "canceling") or batch.upstream_batch_id is None:
        return batch
    await session.commit()  # no connection is held while the upstream answers
    await context.upstream.cancel_batch(batch.upstream_batch_id)
    batch = await get_batch(session, tenant_id, batch_id)
    if batch.status != "ended":
        batch.status = "canceling"
        batch.cancel_requested_at = utcnow()
        batch.next_poll_at = utcnow()
        batch.polls_unchanged = 0
        await session.commit()
    return batch


def batch_payload(batch: AnswerBatch, counts: dict[str, int]) -> dict[str, Any]:
    """The AnswerBatch as the API shows it."""
    return {
        "id": batch.id,
        "status": batch.status,
        "request_counts": counts,
        "created_at": time_text(batch.created_at),
        "ended_at": time_text(batch.ended_at),
        "expires_at": time_text(batch.expires_at),
    }


def time_text(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None
