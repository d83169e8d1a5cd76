"""The Message Batches API of the local engine: batches kept in memory, processed in the
background, one request after another in a worker thread, results kept as JSON lines.

As the upstream does: a request that is not valid becomes an ``errored`` result (the batch
itself is accepted); a cancel ends the batch with the requests not yet processed ``canceled``;
a request still unprocessed when the batch expires (24 h after creation by default) is
``expired``. Each request's parameters are dropped once it is answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio.to_thread
import msgspec
import orjson

from app.local_engine.api_error import ApiError, InvalidRequestError
from app.local_engine.engine import LocalEngine, new_upstream_id
from app.local_engine.request_validation import parse_create_request
from app.upstream.wire import CUSTOM_ID_PATTERN, MAX_BATCH_REQUESTS

log = logging.getLogger(__name__)

BATCH_LIFETIME_SECONDS = 24 * 3600.0
_CUSTOM_ID = re.compile(CUSTOM_ID_PATTERN)
# Requests answered per trip to the worker thread: few enough that a cancel is seen soon.
_PER_THREAD_TRIP = 50


@dataclass
class BatchRequest:
    """One request of a batch: its custom_id and its parameters, as JSON."""

    custom_id: str
    params: msgspec.Raw | bytes | None  # JSON; None once answered


@dataclass
class _Batch:
    id: str
    created_at: float
    expires_at: float
    requests: list[BatchRequest]
    results: list[bytes] = field(default_factory=list)  # JSON lines, in processing order
    counts: dict[str, int] = field(default_factory=dict)
    ended_at: float | None = None
    cancel_initiated_at: float | None = None

    @property
    def status(self) -> str:
        if self.ended_at is not None:
            return "ended"
        return "canceling" if self.cancel_initiated_at is not None else "in_progress"


def _time(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


class LocalBatches:
    """The engine's batches. ``clock``: wall-clock seconds (injectable, as is ``lifetime``, so
    that expiry is testable without waiting a day)."""

    def __init__(
        self,
        engine: LocalEngine,
        *,
        lifetime: float = BATCH_LIFETIME_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._engine = engine
        self._lifetime = lifetime
        self._clock = clock
        self._batches: dict[str, _Batch] = {}  # in creation order
        self._tasks: set[asyncio.Task[None]] = set()

    def create(self, requests: list[BatchRequest], version: str) -> dict[str, Any]:
        """Accept requests (from ``parse_batch_requests``) and start processing them."""
        now = self._clock()
        batch = _Batch(new_upstream_id("msgbatch"), now, now + self._lifetime, requests)
        batch.counts = {"processing": len(requests)}
        self._batches[batch.id] = batch
        task = asyncio.get_running_loop().create_task(self._process(batch, version))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return self.describe(batch.id, None)

    def describe(self, batch_id: str, base_url: str | None) -> dict[str, Any]:
        """The batch as the API shows it; ``results_url`` once it has ended."""
        batch = self._get(batch_id)
        counts = {name: batch.counts.get(name, 0) for name in _COUNTS}
        results_url = None
        if batch.ended_at is not None and base_url is not None:
            results_url = f"{base_url.rstrip('/')}/v1/messages/batches/{batch.id}/results"
        return {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": batch.status,
            "request_counts": counts,
            "created_at": _time(batch.created_at),
            "expires_at": _time(batch.expires_at),
            "ended_at": _time(batch.ended_at),
            "cancel_initiated_at": _time(batch.cancel_initiated_at),
            "archived_at": None,
            "results_url": results_url,
        }

    def page(
        self, limit: int, before_id: str | None, after_id: str | None, base_url: str
    ) -> dict[str, Any]:
        """A page of batches, newest first, as ``GET /v1/messages/batches`` answers."""
        ids = list(reversed(self._batches))
        if after_id is not None:  # the page after (older than) this id
            ids = ids[ids.index(self._get(after_id).id) + 1 :]
        if before_id is not None:  # the page before (newer than) this id
            ids = ids[: ids.index(self._get(before_id).id)][-limit:]
        page = ids[:limit]
        return {
            "data": [self.describe(batch_id, base_url) for batch_id in page],
            "first_id": page[0] if page else None,
            "last_id": page[-1] if page else None,
            "has_more": len(ids) > len(page),
        }

    def cancel(self, batch_id: str, base_url: str) -> dict[str, Any]:
        batch = self._get(batch_id)
        if batch.ended_at is None and batch.cancel_initiated_at is None:
            batch.cancel_initiated_at = self._clock()
        return self.describe(batch_id, base_url)

    def results(self, batch_id: str) -> Iterator[bytes]:
        """The results file, one JSON line per request; only once the batch has ended."""
        batch = self._get(batch_id)
        if batch.ended_at is None:
            raise InvalidRequestError(
                f"Batch {batch_id} is still {batch.status}; its results are not ready."
            )
        for line in list(batch.results):
            yield line + b"\n"

    async def aclose(self) -> None:
        """Stop processing (at shutdown)."""
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _get(self, batch_id: str) -> _Batch:
        batch = self._batches.get(batch_id)
        if batch is None:
            raise ApiError(404, "not_found_error", f"No batch with id {batch_id!r}.")
        return batch

    async def _process(self, batch: _Batch, version: str) -> None:
        try:
            position = 0
            while position < len(batch.requests):
                if batch.cancel_initiated_at is not None or self._clock() >= batch.expires_at:
                    break
                trip = batch.requests[position : position + _PER_THREAD_TRIP]
                lines = await anyio.to_thread.run_sync(self._answer_all, trip, version)
                self._record(batch, lines)
                position += len(trip)
            outcome = "canceled" if batch.cancel_initiated_at is not None else "expired"
            rest = [
                (request.custom_id, outcome, {"type": outcome})
                for request in batch.requests[position:]
            ]
            self._record(batch, rest)
            batch.requests = []
            batch.ended_at = self._clock()
        except Exception:  # a bug: the batch must still end, with its requests errored
            log.exception("local engine batch %s failed", batch.id)
            self._fail_unanswered(batch)

    def _answer_all(
        self, requests: list[BatchRequest], version: str
    ) -> list[tuple[str, str, dict[str, Any]]]:
        lines = []
        for request in requests:
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
            lines.append((request.custom_id, result["type"], result))
        return lines

    def _record(self, batch: _Batch, lines: list[tuple[str, str, dict[str, Any]]]) -> None:
        for custom_id, outcome, result in lines:
            batch.results.append(orjson.dumps({"custom_id": custom_id, "result": result}))
            batch.counts[outcome] = batch.counts.get(outcome, 0) + 1
            batch.counts["processing"] -= 1

    def _fail_unanswered(self, batch: _Batch) -> None:
        done = {orjson.loads(line)["custom_id"] for line in batch.results}
        error = ApiError(500, "api_error", "Internal server error").body(new_upstream_id("req"))
        self._record(
            batch,
            [
                (request.custom_id, "errored", {"type": "errored", "error": error})
                for request in batch.requests
                if request.custom_id not in done
            ],
        )
        batch.requests = []
        batch.ended_at = self._clock()


_COUNTS = ("processing", "succeeded", "errored", "canceled", "expired")


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
