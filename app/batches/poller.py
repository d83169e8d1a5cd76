"""The poller: a background task of every process that follows the open answer batches.

A batch is polled by the process holding its lease (``lease_owner`` / ``lease_until`` on its
row, taken by a conditional UPDATE, so among any number of replicas one takes it). Polls back
off while the upstream batch is unchanged. Once it has ended, its results file is read line by
line and stored in chunks, each chunk in one transaction that also renews the lease: answers are
inserted under the ids fixed at creation (a second insert of one does nothing) and a request
leaves ``pending`` once. So a process killed midway leaves every stored result stored, and the
next holder of the lease (itself restarted, or another replica) stores the rest.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import anyio
from pydantic import ValidationError
from sqlalchemy import and_, bindparam, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from app.answers.context import AnswerContext
from app.answers.judging import judge_rows
from app.answers.request import Prepared, passages_asked
from app.answers.store import Reply, answer_row, count_stored
from app.auth import budgets
from app.auth.keys import Principal, principal_of
from app.batches.service import PENDING, made_nothing, send_batch
from app.db.models import Answer, AnswerBatch, AnswerBatchRequest, utcnow
from app.db.unavailable import OutageLog
from app.documents.sources import SourceDocument, load_sources, request_limits, sent_blocks
from app.errors import CitegateError, ErrorCode, problem_body, problem_of
from app.upstream.errors import UpstreamError, error_of_body
from app.upstream.wire import BatchResult, Message, MessageBatch

log = logging.getLogger(__name__)

RESULTS_PER_TRANSACTION = 200
_DUE_PER_ROUND = 20
# How far the upstream's clock may be behind ours, when its batches are matched by creation time.
CLOCK_SKEW = timedelta(minutes=1)
# The upstream ends a batch when it expires; one still not ended (or not found) this long after
# is given up, its requests without results expired.
EXPIRY_GRACE = timedelta(hours=1)
_MISSING = problem_body(
    ErrorCode.UPSTREAM_BAD_RESPONSE,
    "The upstream API's results of the batch named no result for this request.",
)


class LeaseLost(Exception):
    """Another process took the batch (this one held it past its lease)."""


class BatchPoller:
    """Polls due batches until cancelled; ``wake`` makes it look now (a batch was created or
    cancelled). ``clock``: the time it goes by (the real one, or a test's)."""

    def __init__(self, context: AnswerContext, clock: Callable[[], datetime] = utcnow) -> None:
        self._context = context
        self._settings = context.settings
        self._metrics = context.metrics
        self._clock = clock
        self.owner = secrets.token_hex(8)  # this process, in the lease
        self._woken = asyncio.Event()

    def wake(self) -> None:
        self._woken.set()

    async def run(self) -> None:
        """Poll, then wait for the next round or a wake-up; until cancelled."""
        tick = min(self._settings.batch_poll_seconds, 5.0)
        outage = OutageLog(log, "polling answer batches")
        while True:
            try:
                await self.poll_due()
                await self._count_statuses()
            except Exception as exc:
                # The database failed: the batches stay where they are; try again next round.
                outage.failed(exc)
                self._metrics.batch_poll_errors.inc()
            else:
                outage.succeeded()
            with anyio.move_on_after(tick):
                await self._woken.wait()
            self._woken.clear()

    async def poll_due(self) -> int:
        """Poll every batch that is due and not held by another process; how many were."""
        now = self._clock()
        query = (
            select(AnswerBatch.id)
            .where(
                AnswerBatch.status != "ended",
                AnswerBatch.next_poll_at <= now,
                or_(AnswerBatch.lease_until.is_(None), AnswerBatch.lease_until < now),
            )
            .order_by(AnswerBatch.next_poll_at)
            .limit(_DUE_PER_ROUND)
        )
        async with self._context.engine.connect() as connection:
            due = (await connection.scalars(query)).all()
        polled = 0
        for batch_id in due:
            if await self._claim(batch_id):
                polled += 1
                await self._poll(batch_id)
        return polled

    async def _claim(self, batch_id: str) -> bool:
        now = self._clock()
        claim = (
            update(AnswerBatch)
            .where(
                AnswerBatch.id == batch_id,
                AnswerBatch.status != "ended",
                AnswerBatch.next_poll_at <= now,  # not polled meanwhile by another process
                or_(AnswerBatch.lease_until.is_(None), AnswerBatch.lease_until < now),
            )
            .values(lease_owner=self.owner, lease_until=self._lease_end())
        )
        async with self._context.engine.begin() as connection:
            return (await connection.execute(claim)).rowcount == 1

    def _lease_end(self) -> datetime:
        return self._clock() + timedelta(seconds=self._settings.batch_lease_seconds)

    async def _poll(self, batch_id: str) -> None:
        async with self._context.engine.connect() as connection:
            batch = (
                await connection.execute(select(*_POLLED).where(AnswerBatch.id == batch_id))
            ).one()
        if batch.upstream_batch_id is None:  # validating: its upstream batch is not known yet
            await self._reconcile(batch)
            return
        try:
            upstream = await self._context.upstream.get_batch(batch.upstream_batch_id)
            if upstream.processing_status == "ended":
                await self._store_results(batch)
                await self._end(batch.id)
                return
            if self._overdue(batch):
                await self._end(batch.id, "expired", None)
                return
            # Only ever to canceling: a cancel asked meanwhile must not be overwritten.
            status = "canceling" if upstream.processing_status == "canceling" else None
            await self._release(batch.id, batch.polls_unchanged + 1, status)
        except LeaseLost:
            log.warning("answer batch %s was taken by another process", batch_id)
        except Exception as exc:
            if isinstance(exc, UpstreamError):
                log.warning("polling answer batch %s failed: %s", batch_id, exc.code)
            else:  # the database, or a bug: logged whole
                log.exception("polling answer batch %s failed", batch_id)
            self._metrics.batch_poll_errors.inc()
            if self._overdue(batch):
                await self._end(batch.id, "expired", None)
            else:
                await self._release(batch.id, batch.polls_unchanged + 1, None)

    async def _reconcile(self, batch: Any) -> None:
        """Settle a batch written before its upstream batch was known (its creator failed to
        learn the outcome, or stopped): adopt the upstream batch made for it, or, once none has
        appeared for ``batch_poll_max_seconds`` after the last sending, send it again."""
        try:
            if self._overdue(batch):
                await self._end(batch.id, "expired", None)
                return
            found = await self._made_for(batch)
            if len(found) == 1:
                [upstream] = found
                log.warning("answer batch %s: adopting upstream batch %s", batch.id, upstream.id)
                await self._adopt(batch.id, upstream)
                return
            if found:  # never guessed: the rows would take another batch's results
                log.error(
                    "answer batch %s: %d upstream batches could be its own", batch.id, len(found)
                )
            else:
                settle = timedelta(seconds=self._settings.batch_poll_max_seconds)
                sent_at = batch.upstream_sent_at or batch.created_at
                if self._clock() >= sent_at + settle:
                    await self._send_again(batch)
                    return
            await self._release(batch.id, batch.polls_unchanged + 1, None)
        except LeaseLost:
            log.warning("answer batch %s was taken by another process", batch.id)
        except Exception as exc:
            if isinstance(exc, UpstreamError):
                log.warning("reconciling answer batch %s failed: %s", batch.id, exc.code)
            else:
                log.exception("reconciling answer batch %s failed", batch.id)
            self._metrics.batch_poll_errors.inc()
            await self._release(batch.id, batch.polls_unchanged + 1, None)

    async def _made_for(self, batch: Any) -> list[MessageBatch]:
        """The upstream batches no row names, made since the batch was written (give or take
        the clocks' difference), with as many requests as it sent."""
        async with self._context.engine.connect() as connection:
            sent = await connection.scalar(
                select(func.count()).where(
                    AnswerBatchRequest.batch_id == batch.id, AnswerBatchRequest.status == PENDING
                )
            )
        since = batch.created_at - CLOCK_SKEW
        candidates: list[MessageBatch] = []
        after_id = None
        while True:
            page = await self._context.upstream.list_batches(after_id)
            for upstream in page.data:
                counts = upstream.request_counts
                total = (
                    counts.processing
                    + counts.succeeded
                    + counts.errored
                    + counts.canceled
                    + counts.expired
                )
                if upstream.created_at >= since and total == sent:
                    candidates.append(upstream)
            if not page.has_more or not page.data or page.data[-1].created_at < since:
                break
            after_id = page.data[-1].id
        if not candidates:
            return []
        async with self._context.engine.connect() as connection:
            named = set(
                (
                    await connection.scalars(
                        select(AnswerBatch.upstream_batch_id).where(
                            AnswerBatch.upstream_batch_id.in_([c.id for c in candidates])
                        )
                    )
                ).all()
            )
        return [upstream for upstream in candidates if upstream.id not in named]

    async def _adopt(self, batch_id: str, upstream: MessageBatch) -> None:
        async with self._context.engine.begin() as connection:
            adopted = await connection.execute(
                self._ours(update(AnswerBatch), batch_id)
                .where(AnswerBatch.status == "validating")
                .values(
                    status="in_progress",
                    upstream_batch_id=upstream.id,
                    upstream_body=None,
                    expires_at=upstream.expires_at,
                    next_poll_at=self._clock(),
                    polls_unchanged=0,
                    lease_owner=None,
                    lease_until=None,
                )
            )
        if adopted.rowcount != 1:
            raise LeaseLost

    async def _send_again(self, batch: Any) -> None:
        """Send the kept body again, as its creator did (``service.send_batch``)."""
        async with self._context.engine.connect() as connection:
            content = await connection.scalar(
                select(AnswerBatch.upstream_body).where(AnswerBatch.id == batch.id)
            )
        if content is None:  # settled meanwhile
            return
        log.warning("answer batch %s: no upstream batch was made for it; sending again", batch.id)
        retry_at = self._clock() + timedelta(seconds=self._settings.batch_poll_seconds)
        try:
            await send_batch(self._context, batch.id, self.owner, bytes(content), retry_at)
        except UpstreamError as exc:
            answered = exc.answered
            if made_nothing(exc) and answered is not None and answered.status not in (429, 529):
                # Refused for good: every request carries the refusal.
                async with self._context.engine.begin() as connection:
                    await connection.execute(
                        update(AnswerBatch)
                        .where(AnswerBatch.id == batch.id, AnswerBatch.lease_owner.is_(None))
                        .values(lease_owner=self.owner, lease_until=self._lease_end())
                    )
                await self._end(batch.id, "errored", problem_of(exc))
                return
            raise

    def _overdue(self, batch: Any) -> bool:
        """The upstream should have ended the batch long ago: it is given up."""
        overdue: bool = self._clock() > batch.expires_at + EXPIRY_GRACE
        return overdue

    async def _release(self, batch_id: str, polls_unchanged: int, status: str | None) -> None:
        """Give the batch back until its next poll, later and later while it is unchanged."""
        delay = min(
            self._settings.batch_poll_seconds * 2 ** min(polls_unchanged, 30),
            self._settings.batch_poll_max_seconds,
        )
        values: dict[str, Any] = {
            "polls_unchanged": polls_unchanged,
            "next_poll_at": self._clock() + timedelta(seconds=delay),
            "lease_owner": None,
            "lease_until": None,
        }
        if status is not None:
            values["status"] = status
        async with self._context.engine.begin() as connection:
            await connection.execute(self._ours(update(AnswerBatch), batch_id).values(**values))

    def _ours(self, statement: Any, batch_id: str) -> Any:
        return statement.where(AnswerBatch.id == batch_id, AnswerBatch.lease_owner == self.owner)

    async def _store_results(self, batch: Any) -> None:
        chunk: list[BatchResult] = []
        async with self._context.upstream.batch_results(batch.upstream_batch_id) as results:
            async for result in results:
                chunk.append(result)
                if len(chunk) == RESULTS_PER_TRANSACTION:
                    await self._store_chunk(batch, chunk)
                    chunk = []
        if chunk:
            await self._store_chunk(batch, chunk)

    async def _store_chunk(self, batch: Any, results: Sequence[BatchResult]) -> None:
        by_id = {result.custom_id: result for result in results}
        query = select(AnswerBatchRequest).where(
            AnswerBatchRequest.batch_id == batch.id,
            AnswerBatchRequest.custom_id.in_(list(by_id)),
            AnswerBatchRequest.status == PENDING,
        )
        async with self._context.sessions() as session:
            requests = (await session.scalars(query)).all()
            indexes = await self._indexes(session, batch.tenant_id, requests)
            session.expunge_all()  # read once, used after the session: never refreshed
            await session.rollback()
        if not requests:
            return
        stored = await anyio.to_thread.run_sync(
            _resolve_all, batch.id, batch.tenant_id, requests, by_id, indexes
        )
        answers = [values for _, _, values in stored if values is not None]
        for answer in answers:
            answer["api_key_id"] = batch.key_id  # whose usage it is
        # Budgets: the chunk's reservations settled as what its answers cost, in the same
        # transaction as its requests leave ``pending`` (so once).
        reserved = sum(request.reserved_nano_usd for request in requests)
        spent = sum(
            budgets.cost(self._context.prices, values["model"], values["usage"], batch=True)
            for values in answers
        )
        tokens = sum(sum(values["usage"].values()) for values in answers)
        # Answers asking for the judge are judged before they are stored, each call on the
        # asker's budgets and daily tokens as for an answer asked alone.
        judging = {request.position for request in requests if request.support == "judge"}
        judged = [values for at, _, values in stored if values and at in judging]
        if judged:  # the asker's budgets as they are now, as for an answer asked alone
            asker = await principal_of(self._context.engine, batch.tenant_id, batch.key_id)
            tokens += await judge_rows(self._context, judged, asker)
        async with self._context.engine.begin() as connection:
            if answers:
                await connection.execute(_insert_once(connection), answers)
            await connection.execute(
                _SET_RESULT,
                [
                    {"b_batch": batch.id, "b_position": position, "status": status, "error": error}
                    for position, (status, error), _ in stored
                ],
            )
            await budgets.settle_in(connection, batch.budget_owners, reserved, spent)
            await self._renew(connection, batch.id)
        for _, (status, _), values in stored:
            self._metrics.batch_results.labels(status).inc()
            if values is not None:
                count_stored(self._metrics, values)
        # Spent as answers asked alone spend them (the judge's calls too), once per chunk stored
        # (a chunk read again is not stored again: its requests are no longer pending).
        await self._context.limits.spend_tokens(Principal(batch.tenant_id, batch.key_id), tokens)

    async def _renew(self, connection: AsyncConnection, batch_id: str) -> None:
        renewed = await connection.execute(
            self._ours(update(AnswerBatch), batch_id).values(lease_until=self._lease_end())
        )
        if renewed.rowcount != 1:
            raise LeaseLost

    async def _indexes(
        self, session: Any, tenant_id: str, requests: Sequence[AnswerBatchRequest]
    ) -> dict[tuple[str | None, ...], list[SourceDocument | None]]:
        """The stored documents the answers' citations resolve against, once per set of
        documents (None where a block named none). A document deleted since the batch was
        created resolves nothing."""
        indexes: dict[tuple[str | None, ...], list[SourceDocument | None]] = {}
        limits = request_limits(self._settings)
        for request in requests:
            ids = tuple(request.document_ids)
            if ids in indexes:
                continue
            indexes[ids] = []
            named = list(dict.fromkeys(i for i in ids if i is not None))
            if named:
                try:
                    sources = await load_sources(
                        session, tenant_id, named, self._context.sources, limits
                    )
                except CitegateError:
                    continue
                by_id = {source.document_id: source for source in sources}
                indexes[ids] = [None if i is None else by_id[i] for i in ids]
        return indexes

    async def _end(
        self, batch_id: str, unanswered: str = "errored", error: dict[str, Any] | None = _MISSING
    ) -> None:
        """End the batch: every result the upstream gave is stored, and a request it gave none
        for is ``unanswered`` (errored: the results file left it out; expired: the upstream
        never ended the batch, or lost it)."""
        async with self._context.engine.begin() as connection:
            await self._renew(connection, batch_id)
            # Budgets: what the requests left without a result reserved is released.
            owners = await connection.scalar(
                select(AnswerBatch.budget_owners).where(AnswerBatch.id == batch_id)
            )
            if owners:
                reserved = await connection.scalar(
                    select(func.sum(AnswerBatchRequest.reserved_nano_usd)).where(
                        AnswerBatchRequest.batch_id == batch_id,
                        AnswerBatchRequest.status == PENDING,
                    )
                )
                await budgets.settle_in(connection, owners, int(reserved or 0), 0)
            left = await connection.execute(
                update(AnswerBatchRequest)
                .where(
                    AnswerBatchRequest.batch_id == batch_id, AnswerBatchRequest.status == PENDING
                )
                .values(status=unanswered, error=error, reserved_nano_usd=0)
            )
            await connection.execute(
                self._ours(update(AnswerBatch), batch_id).values(
                    status="ended",
                    ended_at=self._clock(),
                    lease_owner=None,
                    lease_until=None,
                    upstream_body=None,
                )
            )
        if left.rowcount:
            log.warning("answer batch %s: %d results %s", batch_id, left.rowcount, unanswered)
            self._metrics.batch_results.labels(unanswered).inc(left.rowcount)

    async def _count_statuses(self) -> None:
        query = select(AnswerBatch.status, func.count()).group_by(AnswerBatch.status)
        async with self._context.engine.connect() as connection:
            counts = {status: count for status, count in (await connection.execute(query)).all()}
        for status in ("validating", "in_progress", "canceling", "ended"):
            self._metrics.batches.labels(status).set(counts.get(status, 0))


# A batch's columns but the body it keeps until its upstream batch is known.
_POLLED = [column for column in AnswerBatch.__table__.c if column.name != "upstream_body"]

_SET_RESULT = (
    update(AnswerBatchRequest)
    .where(
        and_(
            AnswerBatchRequest.batch_id == bindparam("b_batch"),
            AnswerBatchRequest.position == bindparam("b_position"),
            AnswerBatchRequest.status == PENDING,
        )
    )
    .values(status=bindparam("status"), error=bindparam("error"), reserved_nano_usd=0)
)


def _insert_once(connection: AsyncConnection) -> Any:
    """An insert of answers that skips one already stored (same id): results read twice."""
    dialect = postgresql if connection.dialect.name == "postgresql" else sqlite
    return dialect.insert(Answer).on_conflict_do_nothing(index_elements=[Answer.id])


def _resolve_all(
    batch_id: str,
    tenant_id: str,
    requests: Sequence[AnswerBatchRequest],
    results: dict[str, BatchResult],
    indexes: dict[tuple[str | None, ...], list[SourceDocument | None]],
) -> list[tuple[int, tuple[str, dict[str, Any] | None], dict[str, Any] | None]]:
    """Each request's outcome, problem and answer row. Blocking: citations are resolved."""
    return [
        (
            request.position,
            *_resolve(batch_id, tenant_id, request, results[request.custom_id], indexes),
        )
        for request in requests
    ]


def _resolve(
    batch_id: str,
    tenant_id: str,
    request: AnswerBatchRequest,
    result: BatchResult,
    indexes: dict[tuple[str | None, ...], list[SourceDocument | None]],
) -> tuple[tuple[str, dict[str, Any] | None], dict[str, Any] | None]:
    kind = result.result.get("type")
    if kind == "errored":
        return ("errored", problem_of(error_of_body(result.result.get("error"), None))), None
    if kind in ("canceled", "expired"):
        return (str(kind), None), None
    try:
        if kind != "succeeded":
            raise ValueError(f"a result of type {kind!r}")
        message = Message.model_validate(result.result.get("message"))
    except (ValidationError, ValueError):
        error = problem_body(
            ErrorCode.UPSTREAM_BAD_RESPONSE,
            "The upstream API's result for this request is not a message.",
        )
        return ("errored", error), None
    return ("succeeded", None), _answer_row(batch_id, tenant_id, request, message, indexes)


def _answer_row(
    batch_id: str,
    tenant_id: str,
    request: AnswerBatchRequest,
    message: Message,
    indexes: dict[tuple[str | None, ...], list[SourceDocument | None]],
) -> dict[str, Any]:
    # What createAnswer would have prepared, from what the request's row kept of it.
    sources = indexes[tuple(request.document_ids)]
    prepared = Prepared(
        id=request.answer_id,
        question=request.question,
        conversation_id=None,
        sources=sources,
        # Of the request sent, what storing an answer reads; the row kept only that.
        request={"system": request.system, "max_tokens": request.max_tokens},
        retrieval=request.retrieval or {},
        passages=passages_asked(request.retrieval),
        # A compatible request's blocks are its sources one for one (it sends no windows).
        sent=None if None in sources else sent_blocks([s for s in sources if s is not None]),
        # Lexically here; the judge's calls come after (``judge_rows``), before it is stored.
        support="off" if request.support == "off" else "lexical",
    )
    return answer_row(
        prepared,
        tenant_id,
        Reply.of_message(message, None),
        batch_id=batch_id,
        documents=request.documents,
    )
