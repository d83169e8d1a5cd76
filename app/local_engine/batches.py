"""The Message Batches API of the local engine: batches kept as rows, answered in the background
one request after another in a worker thread, results kept as rows of JSON lines.

As the upstream does: a request that is not valid becomes an ``errored`` result (the batch
itself is accepted); a cancel ends the batch with the requests not yet processed ``canceled``;
a request still unprocessed when the batch expires (24 h after creation by default) is
``expired``.

A batch is a row holding the body as it arrived (until the batch ends) and one row per answered
request. Whichever process holds a batch's lease answers it, a trip of requests at a time, each
trip's results written with the lease renewed in one transaction; a process that stops (killed,
restarted) leaves the lease to run out, and the next to take it reads the body again and answers
only the requests that have no result row. A result row is written once (its primary key), so
the results file names each request once. With Citegate, the rows live in Citegate's database
(every worker and replica serves every batch); served alone, in an in-memory SQLite database of
its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

import anyio
import anyio.to_thread
import msgspec
import orjson
from sqlalchemy import Table, and_, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.db.engine import create_engine
from app.db.models import LocalEngineBatch, LocalEngineResult
from app.db.unavailable import FAILURES, OutageLog
from app.local_engine.api_error import ApiError, InvalidRequestError
from app.local_engine.engine import LocalEngine, new_upstream_id
from app.local_engine.request_validation import parse_create_request
from app.upstream.wire import CUSTOM_ID_PATTERN, MAX_BATCH_REQUESTS

log = logging.getLogger(__name__)

BATCH_LIFETIME_SECONDS = 24 * 3600.0
LEASE_SECONDS = 120.0
_CUSTOM_ID = re.compile(CUSTOM_ID_PATTERN)
# Requests answered per trip to the worker thread: few enough that a cancel is seen soon, and
# that a process killed midway has little to answer again.
_PER_THREAD_TRIP = 50
_LINES_PER_READ = 1000
_COUNTS = ("processing", "succeeded", "errored", "canceled", "expired")
_BATCHES: Table = LocalEngineBatch.__table__  # type: ignore[assignment]
_RESULTS: Table = LocalEngineResult.__table__  # type: ignore[assignment]


@dataclass
class BatchRequest:
    """One request of a batch: its custom_id and its parameters, as JSON."""

    custom_id: str
    params: msgspec.Raw | bytes | None  # JSON; None once answered


class LeaseLost(Exception):
    """Another process took the batch (this one held it past its lease)."""


def _time(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def _not_found(batch_id: str) -> ApiError:
    return ApiError(404, "not_found_error", f"No batch with id {batch_id!r}.")


class LocalBatches:
    """The engine's batches, in ``database`` (None: an in-memory database of their own).

    ``clock``: wall-clock seconds and ``lifetime`` (injectable, so that expiry is testable
    without waiting a day); ``lease_seconds``: how long a process holds a batch it answers
    without writing a trip of results; ``tick``: how often unanswered batches are looked for
    (besides at every creation).
    """

    def __init__(
        self,
        engine: LocalEngine,
        database: AsyncEngine | None = None,
        *,
        lifetime: float = BATCH_LIFETIME_SECONDS,
        clock: Callable[[], float] = time.time,
        lease_seconds: float = LEASE_SECONDS,
        tick: float = 1.0,
    ) -> None:
        self._engine = engine
        self._own_database = database is None
        # Served alone: a SQLite file of its own in a temporary folder, removed at ``aclose``
        # (the batches live as long as the process, as they did in memory).
        self._folder = (
            tempfile.mkdtemp(prefix="citegate-local-batches-") if database is None else None
        )
        self._database = database or create_engine(f"sqlite+aiosqlite:///{self._folder}/batches.db")
        self._schema_ready = not self._own_database  # Citegate's migrations made the tables
        self._lifetime = lifetime
        self._clock = clock
        self._lease_seconds = lease_seconds
        self._tick = tick
        self.owner = secrets.token_hex(8)  # this process, in the lease
        self._woken = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None
        self._tasks: dict[str, asyncio.Task[None]] = {}  # batches this process answers

    def start(self) -> None:
        """Answer the batches that need it (those left by a process that stopped too), in the
        background until ``aclose``; called again, does nothing."""
        if self._runner is None or self._runner.done():
            self._runner = asyncio.get_running_loop().create_task(self._run())

    async def create(
        self, requests: list[BatchRequest], body: bytes, version: str
    ) -> dict[str, Any]:
        """Accept requests (``parse_batch_requests`` of ``body``) and start answering them."""
        await self._ensure_schema()
        now = self._clock()
        row = {
            "id": new_upstream_id("msgbatch"),
            "created_at": now,
            "expires_at": now + self._lifetime,
            "ended_at": None,
            "cancel_initiated_at": None,
            "version": version,
            "request_count": len(requests),
            "body": body,
            "lease_owner": None,
            "lease_until": None,
        }
        async with self._database.begin() as connection:
            await connection.execute(insert(_BATCHES), [row])
        self.start()
        self._woken.set()
        return await self.describe(str(row["id"]), None)

    async def describe(self, batch_id: str, base_url: str | None) -> dict[str, Any]:
        """The batch as the API shows it; ``results_url`` once it has ended."""
        await self._ensure_schema()
        async with self._database.connect() as connection:
            batch = (
                await connection.execute(select(*_shown()).where(_BATCHES.c.id == batch_id))
            ).one_or_none()
            if batch is None:
                raise _not_found(batch_id)
            return await self._shown(connection, batch, base_url)

    async def page(
        self, limit: int, before_id: str | None, after_id: str | None, base_url: str
    ) -> dict[str, Any]:
        """A page of batches, newest first, as ``GET /v1/messages/batches`` answers."""
        await self._ensure_schema()
        order = (_BATCHES.c.created_at, _BATCHES.c.id)
        async with self._database.connect() as connection:
            query = select(*_shown())
            if before_id is not None:  # the page before (newer than) this id: nearest first
                mark = await self._mark(connection, before_id)
                query = query.where(_after(order, mark)).order_by(*order)
            else:
                if after_id is not None:  # the page after (older than) this id
                    mark = await self._mark(connection, after_id)
                    query = query.where(_after(order, mark, newer=False))
                query = query.order_by(*(column.desc() for column in order))
            rows = list((await connection.execute(query.limit(limit + 1))).all())
            has_more = len(rows) > limit
            rows = rows[:limit]
            if before_id is not None:
                rows.reverse()
            data = [await self._shown(connection, row, base_url) for row in rows]
        return {
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": has_more,
        }

    async def cancel(self, batch_id: str, base_url: str) -> dict[str, Any]:
        await self._ensure_schema()
        async with self._database.begin() as connection:
            await connection.execute(
                update(_BATCHES)
                .where(
                    _BATCHES.c.id == batch_id,
                    _BATCHES.c.ended_at.is_(None),
                    _BATCHES.c.cancel_initiated_at.is_(None),
                )
                .values(cancel_initiated_at=self._clock())
            )
        self._woken.set()
        return await self.describe(batch_id, base_url)

    async def results(self, batch_id: str) -> AsyncIterator[bytes]:
        """The results file, one JSON line per request, read a thousand lines at a time; only
        once the batch has ended (checked now, before any line is read)."""
        batch = await self.describe(batch_id, None)
        if batch["processing_status"] != "ended":
            raise InvalidRequestError(
                f"Batch {batch_id} is still {batch['processing_status']}; its results are not "
                "ready."
            )
        return self._lines(batch_id)

    async def aclose(self) -> None:
        """Stop answering (at shutdown): the leases run out, and another process, or this one
        started again, answers the rest."""
        tasks = [task for task in (self._runner, *self._tasks.values()) if task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._own_database:
            await self._database.dispose()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)

    async def _ensure_schema(self) -> None:
        if self._schema_ready:
            return
        async with self._database.begin() as connection:
            await connection.run_sync(
                lambda sync: LocalEngineBatch.metadata.create_all(sync, tables=[_BATCHES, _RESULTS])
            )
        self._schema_ready = True

    async def _mark(self, connection: AsyncConnection, batch_id: str) -> tuple[float, str]:
        found = (
            await connection.execute(
                select(_BATCHES.c.created_at, _BATCHES.c.id).where(_BATCHES.c.id == batch_id)
            )
        ).one_or_none()
        if found is None:
            raise _not_found(batch_id)
        return float(found[0]), str(found[1])

    async def _shown(
        self, connection: AsyncConnection, batch: Any, base_url: str | None
    ) -> dict[str, Any]:
        counted = await connection.execute(
            select(_RESULTS.c.outcome, func.count())
            .where(_RESULTS.c.batch_id == batch.id)
            .group_by(_RESULTS.c.outcome)
        )
        counts = dict.fromkeys(_COUNTS, 0) | {outcome: n for outcome, n in counted.all()}
        counts["processing"] = batch.request_count - sum(counts.values())
        status = "in_progress"
        if batch.ended_at is not None:
            status = "ended"
        elif batch.cancel_initiated_at is not None:
            status = "canceling"
        results_url = None
        if batch.ended_at is not None and base_url is not None:
            results_url = f"{base_url.rstrip('/')}/v1/messages/batches/{batch.id}/results"
        return {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": status,
            "request_counts": counts,
            "created_at": _time(batch.created_at),
            "expires_at": _time(batch.expires_at),
            "ended_at": _time(batch.ended_at),
            "cancel_initiated_at": _time(batch.cancel_initiated_at),
            "archived_at": None,
            "results_url": results_url,
        }

    async def _lines(self, batch_id: str) -> AsyncIterator[bytes]:
        position = -1
        while True:
            async with self._database.connect() as connection:
                rows = (
                    await connection.execute(
                        select(_RESULTS.c.position, _RESULTS.c.line)
                        .where(_RESULTS.c.batch_id == batch_id, _RESULTS.c.position > position)
                        .order_by(_RESULTS.c.position)
                        .limit(_LINES_PER_READ)
                    )
                ).all()
            if not rows:
                return
            position = rows[-1][0]
            yield b"".join(bytes(line) + b"\n" for _, line in rows)

    async def _run(self) -> None:
        """Take every batch that no process answers, then wait for a creation or the tick."""
        await self._ensure_schema()
        outage = OutageLog(log, "local engine: looking for batches to answer")
        while True:
            try:
                for batch_id in await self._take_due():
                    task = asyncio.get_running_loop().create_task(self._answer_batch(batch_id))
                    self._tasks[batch_id] = task
                    task.add_done_callback(partial(self._forget, batch_id))
            except Exception as exc:  # the database failed: the batches wait for the next round
                outage.failed(exc)
            else:
                outage.succeeded()
            with anyio.move_on_after(self._tick):
                await self._woken.wait()
            self._woken.clear()

    def _forget(self, batch_id: str, _: object) -> None:
        self._tasks.pop(batch_id, None)

    async def _take_due(self) -> list[str]:
        now = self._clock()
        free = or_(_BATCHES.c.lease_until.is_(None), _BATCHES.c.lease_until < now)
        async with self._database.connect() as connection:
            due = (
                await connection.scalars(
                    select(_BATCHES.c.id)
                    .where(_BATCHES.c.ended_at.is_(None), free)
                    .order_by(_BATCHES.c.created_at)
                    .limit(20)
                )
            ).all()
        taken = []
        for batch_id in due:
            if batch_id in self._tasks:
                continue
            async with self._database.begin() as connection:
                claimed = await connection.execute(
                    update(_BATCHES)
                    .where(_BATCHES.c.id == batch_id, _BATCHES.c.ended_at.is_(None), free)
                    .values(lease_owner=self.owner, lease_until=now + self._lease_seconds)
                )
            if claimed.rowcount == 1:
                taken.append(batch_id)
        return taken

    async def _answer_batch(self, batch_id: str) -> None:
        """Answer the batch's requests that have no result yet, then end it."""
        try:
            async with self._database.connect() as connection:
                body, version = (
                    await connection.execute(
                        select(_BATCHES.c.body, _BATCHES.c.version).where(_BATCHES.c.id == batch_id)
                    )
                ).one()
                answered = set(
                    (
                        await connection.scalars(
                            select(_RESULTS.c.position).where(_RESULTS.c.batch_id == batch_id)
                        )
                    ).all()
                )
            requests = await anyio.to_thread.run_sync(parse_batch_requests, bytes(body))
            del body
            left = [(n, request) for n, request in enumerate(requests) if n not in answered]
            done = 0
            while done < len(left):
                cancelled, expires_at = await self._state(batch_id)
                if cancelled or self._clock() >= expires_at:
                    break
                trip = left[done : done + _PER_THREAD_TRIP]
                lines = await anyio.to_thread.run_sync(self._answer_all, trip, version)
                await self._record(batch_id, lines)
                done += len(trip)
            cancelled, _ = await self._state(batch_id)
            outcome = "canceled" if cancelled else "expired"
            rest = [(n, r.custom_id, outcome, {"type": outcome}) for n, r in left[done:]]
            await self._record(batch_id, rest, end=True)
        except LeaseLost:
            log.warning("local engine batch %s was taken by another process", batch_id)
        except Exception as exc:
            if _is_database_error(exc):  # left to the next holder of the lease
                log.exception("local engine batch %s: the database failed", batch_id)
                return
            log.exception("local engine batch %s failed", batch_id)  # a bug: it still ends
            await self._fail_unanswered(batch_id)

    def _answer_all(
        self, requests: list[tuple[int, BatchRequest]], version: str
    ) -> list[tuple[int, str, str, dict[str, Any]]]:
        lines = []
        for position, request in requests:
            assert request.params is not None
            try:
                parsed = parse_create_request(bytes(request.params), version)
                message = self._engine.create_message_blocking(parsed)
                result: dict[str, Any] = {
                    "type": "succeeded",
                    "message": message.model_dump(mode="json"),
                }
            except ApiError as error:
                result = {"type": "errored", "error": error.body(new_upstream_id("req"))}
            request.params = None
            lines.append((position, request.custom_id, result["type"], result))
        return lines

    async def _state(self, batch_id: str) -> tuple[bool, float]:
        """Whether a cancel was asked, and when the batch expires; the lease renewed."""
        async with self._database.begin() as connection:
            await self._renew(connection, batch_id)
            cancelled, expires_at = (
                await connection.execute(
                    select(_BATCHES.c.cancel_initiated_at, _BATCHES.c.expires_at).where(
                        _BATCHES.c.id == batch_id
                    )
                )
            ).one()
        return cancelled is not None, float(expires_at)

    async def _renew(self, connection: AsyncConnection, batch_id: str, **values: Any) -> None:
        renewed = await connection.execute(
            update(_BATCHES)
            .where(_BATCHES.c.id == batch_id, _BATCHES.c.lease_owner == self.owner)
            .values(lease_until=self._clock() + self._lease_seconds, **values)
        )
        if renewed.rowcount != 1:
            raise LeaseLost

    async def _record(
        self,
        batch_id: str,
        lines: Iterable[tuple[int, str, str, dict[str, Any]]],
        *,
        end: bool = False,
    ) -> None:
        """Write result lines (a request that has one already keeps it) and renew the lease,
        in one transaction; ``end``: and end the batch, its body dropped."""
        rows = [
            {
                "batch_id": batch_id,
                "position": position,
                "outcome": outcome,
                "line": orjson.dumps({"custom_id": custom_id, "result": result}),
            }
            for position, custom_id, outcome, result in lines
        ]
        async with self._database.begin() as connection:
            if end:
                ended = {"ended_at": self._clock(), "body": None, "lease_owner": None}
                await self._renew(connection, batch_id, **ended)
            else:
                await self._renew(connection, batch_id)
            if rows:
                await connection.execute(_insert_once(connection), rows)

    async def _fail_unanswered(self, batch_id: str) -> None:
        with contextlib.suppress(Exception):
            async with self._database.connect() as connection:
                body = (
                    await connection.execute(
                        select(_BATCHES.c.body).where(_BATCHES.c.id == batch_id)
                    )
                ).scalar_one()
                answered = set(
                    (
                        await connection.scalars(
                            select(_RESULTS.c.position).where(_RESULTS.c.batch_id == batch_id)
                        )
                    ).all()
                )
            requests = parse_batch_requests(bytes(body)) if body is not None else []
            error = ApiError(500, "api_error", "Internal server error").body(new_upstream_id("req"))
            rest = [
                (n, request.custom_id, "errored", {"type": "errored", "error": error})
                for n, request in enumerate(requests)
                if n not in answered
            ]
            await self._record(batch_id, rest, end=True)


def _shown() -> tuple[Any, ...]:
    c = _BATCHES.c
    return (
        c.id,
        c.created_at,
        c.expires_at,
        c.ended_at,
        c.cancel_initiated_at,
        c.request_count,
    )


def _after(order: tuple[Any, Any], mark: tuple[float, str], *, newer: bool = True) -> Any:
    """Rows after ``mark`` in ``order`` (created_at, id): newer ones, or older ones."""
    created, batch_id = order
    if newer:
        return or_(created > mark[0], and_(created == mark[0], batch_id > mark[1]))
    return or_(created < mark[0], and_(created == mark[0], batch_id < mark[1]))


def _insert_once(connection: AsyncConnection) -> Any:
    """An insert of result lines that skips a request already answered."""
    dialect = postgresql if connection.dialect.name == "postgresql" else sqlite
    return dialect.insert(_RESULTS).on_conflict_do_nothing(
        index_elements=[_RESULTS.c.batch_id, _RESULTS.c.position]
    )


def _is_database_error(exc: BaseException) -> bool:
    return isinstance(exc, SQLAlchemyError | OSError | FAILURES)


class _Item(msgspec.Struct, forbid_unknown_fields=True):
    custom_id: str
    params: msgspec.Raw  # the request's JSON, never decoded here: a view into the body


class _Body(msgspec.Struct, forbid_unknown_fields=True):
    requests: list[_Item]


def parse_batch_requests(body: bytes) -> list[BatchRequest]:
    """The requests of ``{"requests": [{"custom_id", "params"}]}``; 400 for a batch the API
    refuses whole. Blocking (a body of up to 256 MB).

    Each request's parameters stay the bytes they were sent as (msgspec's ``Raw``), decoded
    one at a time as they are answered: decoding a whole batch at once would hold every
    request's documents as objects together.
    """
    try:
        decoded = msgspec.json.decode(body, type=_Body)
    except msgspec.DecodeError as exc:
        raise InvalidRequestError(f"The request body is not a valid batch: {exc}") from None
    requests = decoded.requests
    if not requests:
        raise InvalidRequestError("requests: a list of at least one request is required")
    if len(requests) > MAX_BATCH_REQUESTS:
        raise InvalidRequestError(f"requests: a batch takes at most {MAX_BATCH_REQUESTS} requests")
    parsed: list[BatchRequest] = []
    seen: set[str] = set()
    for number, request in enumerate(requests):
        where = f"requests.{number}"
        custom_id = request.custom_id
        if not _CUSTOM_ID.fullmatch(custom_id):
            raise InvalidRequestError(
                f"{where}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
            )
        if custom_id in seen:
            raise InvalidRequestError(f"{where}.custom_id: {custom_id!r} is used more than once")
        if not bytes(memoryview(request.params)[:1]).startswith(b"{"):
            raise InvalidRequestError(f"{where}.params: Input should be an object")
        seen.add(custom_id)
        parsed.append(BatchRequest(custom_id, request.params))
    return parsed
