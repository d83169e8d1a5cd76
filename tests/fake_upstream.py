"""A stand-in for the Messages API on 127.0.0.1: replays scripted replies, records requests,
and keeps Message Batches (``FakeBatch``) whose course each test sets."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # JSON-able, or bytes sent as they are
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    events: list[bytes] | None = None  # an SSE body, sent piece by piece
    pause: float = 0.0  # between two pieces
    silence: float = 0.0  # after the last piece, before the end
    drop: bool = False  # cut the connection after the last piece


class DroppedConnection(Exception):
    pass


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


GRASS = "The grass is green. The sky is blue."
# An answer about GRASS as the real API gives it: an uncited block, then a cited one.
GRASS_ANSWER: list[dict[str, Any]] = [
    {"type": "text", "text": "Based on the document, "},
    {
        "type": "text",
        "text": "the grass is green",
        "citations": [
            {
                "type": "char_location",
                "cited_text": "The grass is green. ",
                "document_index": 0,
                "document_title": None,
                "start_char_index": 0,
                "end_char_index": 20,
            }
        ],
    },
]


def message(content: list[dict[str, Any]], **overrides: Any) -> dict[str, Any]:
    """A Messages API response envelope around content blocks, as the API sends it."""
    return {
        "id": "msg_fake0001",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-5",
        "content": content,
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 25,
            "output_tokens": 40,
            "cache_creation_input_tokens": 900,
            "cache_read_input_tokens": 0,
            "service_tier": "standard",
        },
        **overrides,
    }


def error(status: int, kind: str, text: str) -> Reply:
    body = {"type": "error", "error": {"type": kind, "message": text}, "request_id": "req_fakeerr"}
    return Reply(status, body, {"request-id": "req_fakeerr"})


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class FakeBatch:
    """A Message Batch: ``in_progress`` for ``polls_before_end`` polls, then ``ended`` with a
    result per request from ``FakeUpstream.batch_result``; a cancel ends it at the next poll
    with every request ``canceled``. ``hold_after``: the results file stops after that many
    lines for ``hold_seconds``, once (a slow download to kill a reader in the middle of)."""

    id: str
    requests: list[dict[str, Any]]
    polls_before_end: int = 0
    canceled: bool = False
    hold_after: int | None = None
    hold_seconds: float = 0.0
    # A day from now, as the real API sets it: a fixed date became, once it had passed, a batch
    # the poller gives up as expired.
    expires_at: str = field(default_factory=lambda: _iso(datetime.now(UTC) + timedelta(days=1)))
    created_at: str = field(default_factory=lambda: _iso(datetime.now(UTC)))
    polls: int = 0

    @property
    def status(self) -> str:
        if self.polls > self.polls_before_end:
            return "ended"
        return "canceling" if self.canceled else "in_progress"

    def describe(self) -> dict[str, Any]:
        ended = self.status == "ended"
        return {
            "id": self.id,
            "type": "message_batch",
            "processing_status": self.status,
            "request_counts": {
                "processing": 0 if ended else len(self.requests),
                "succeeded": len(self.requests) if ended and not self.canceled else 0,
                "errored": 0,
                "canceled": len(self.requests) if ended and self.canceled else 0,
                "expired": 0,
            },
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "ended_at": "2026-12-01T09:05:00Z" if ended else None,
            "cancel_initiated_at": "2026-12-01T09:01:00Z" if self.canceled else None,
            "archived_at": None,
            "results_url": f"http://127.0.0.1:9/v1/messages/batches/{self.id}/results"
            if ended
            else None,
        }


def succeeded(custom_id: str, params: dict[str, Any]) -> dict[str, Any]:
    """The default result of a batch request: the GRASS answer."""
    return {"type": "succeeded", "message": message(GRASS_ANSWER)}


class FakeUpstream:
    def __init__(self) -> None:
        self.base_url = ""  # set once it is served
        self.replies: deque[Reply] = deque()
        self.requests: list[Recorded] = []
        self.stream_closed = asyncio.Event()  # set when a stream ends, finished or not
        self.stream_finished = False
        self.batches: dict[str, FakeBatch] = {}
        self.new_batch: dict[str, Any] = {}  # FakeBatch fields of the next batches created
        self.batch_result = succeeded
        # Statuses the next batch creations answer with instead of the batch, each after making
        # the batch (True) or not (False).
        self.batch_failures: deque[tuple[int, bool]] = deque()
        self.create_delay = 0.0  # seconds between making a batch and answering with it
        self.app = Starlette(
            routes=[
                Route("/v1/messages", self._answer, methods=["POST"]),
                Route("/v1/messages/count_tokens", self._answer, methods=["POST"]),
                Route("/v1/messages/batches", self._create_batch, methods=["POST"]),
                Route("/v1/messages/batches", self._list_batches, methods=["GET"]),
                Route("/v1/messages/batches/{batch_id}", self._get_batch, methods=["GET"]),
                Route(
                    "/v1/messages/batches/{batch_id}/cancel", self._cancel_batch, methods=["POST"]
                ),
                Route(
                    "/v1/messages/batches/{batch_id}/results",
                    self._batch_results,
                    methods=["GET"],
                ),
            ]
        )

    def reset(self, *replies: Reply) -> None:
        self.replies = deque(replies)
        self.requests = []
        self.stream_closed = asyncio.Event()
        self.stream_finished = False
        self.batches = {}
        self.new_batch = {}
        self.batch_result = succeeded
        self.batch_failures = deque()
        self.create_delay = 0.0

    def paths(self) -> list[str]:
        return [recorded.path for recorded in self.requests]

    async def _record(self, request: Request) -> dict[str, Any]:
        raw = await request.body()
        body: dict[str, Any] = json.loads(raw) if raw else {}
        self.requests.append(Recorded(request.url.path, dict(request.headers), body))
        return body

    async def _create_batch(self, request: Request) -> Response:
        body = await self._record(request)
        status, made = self.batch_failures.popleft() if self.batch_failures else (200, True)
        if made:
            batch = FakeBatch(f"msgbatch_fake{len(self.batches):04d}", body["requests"])
            for name, value in self.new_batch.items():
                setattr(batch, name, value)
            self.batches[batch.id] = batch
        if status != 200:
            kind = "invalid_request_error" if status == 400 else "api_error"
            reply = error(status, kind, "Scripted failure")
            return Response(json.dumps(reply.body), status, reply.headers, "application/json")
        if self.create_delay:
            await asyncio.sleep(self.create_delay)
        return self._json(batch.describe())

    async def _list_batches(self, request: Request) -> Response:
        """Newest first, ``limit`` and ``after_id`` as the API pages them."""
        await self._record(request)
        newest = list(reversed(self.batches.values()))
        after_id = request.query_params.get("after_id")
        if after_id is not None:
            newest = newest[[b.id for b in newest].index(after_id) + 1 :]
        limit = int(request.query_params.get("limit", "20"))
        page = newest[:limit]
        return self._json(
            {
                "data": [batch.describe() for batch in page],
                "first_id": page[0].id if page else None,
                "last_id": page[-1].id if page else None,
                "has_more": len(newest) > limit,
            }
        )

    async def _get_batch(self, request: Request) -> Response:
        await self._record(request)
        batch = self.batches.get(request.path_params["batch_id"])
        if batch is None:
            return self._not_found()
        batch.polls += 1
        return self._json(batch.describe())

    async def _cancel_batch(self, request: Request) -> Response:
        await self._record(request)
        batch = self.batches.get(request.path_params["batch_id"])
        if batch is None:
            return self._not_found()
        if batch.status != "ended":
            batch.canceled = True
        return self._json(batch.describe())

    async def _batch_results(self, request: Request) -> Response:
        await self._record(request)
        batch = self.batches.get(request.path_params["batch_id"])
        if batch is None or batch.status != "ended":
            return self._not_found()
        lines = []
        for item in batch.requests:
            result = {"type": "canceled"} if batch.canceled else None
            result = result or self.batch_result(item["custom_id"], item["params"])
            lines.append(json.dumps({"custom_id": item["custom_id"], "result": result}) + "\n")
        hold_after, batch.hold_after = batch.hold_after, None

        async def send() -> AsyncIterator[bytes]:
            for number, line in enumerate(lines):
                if number == hold_after:
                    await asyncio.sleep(batch.hold_seconds)
                yield line.encode()

        return StreamingResponse(send(), media_type="application/binary")

    def _json(self, body: dict[str, Any]) -> Response:
        return Response(json.dumps(body), 200, {"request-id": "req_fake0001"}, "application/json")

    def _not_found(self) -> Response:
        reply = error(404, "not_found_error", "No such batch.")
        return Response(json.dumps(reply.body), 404, reply.headers, "application/json")

    async def _answer(self, request: Request) -> Response:
        await self._record(request)
        reply = self.replies.popleft() if len(self.replies) > 1 else self.replies[0]
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.events is not None:
            return StreamingResponse(
                self._stream(reply),
                reply.status,
                {"request-id": "req_fakestream", **reply.headers},
                media_type="text/event-stream",
            )
        content = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
        headers = {"request-id": "req_fake0001", **reply.headers}
        return Response(content, reply.status, headers, media_type="application/json")

    async def _stream(self, reply: Reply) -> AsyncIterator[bytes]:
        try:
            for piece in reply.events or []:
                yield piece
                if reply.pause:
                    await asyncio.sleep(reply.pause)
            if reply.silence:
                await asyncio.sleep(reply.silence)
            if reply.drop:
                raise DroppedConnection  # uvicorn closes the connection mid-body
            self.stream_finished = True
        finally:
            self.stream_closed.set()


def sse(name: str, data: dict[str, Any]) -> bytes:
    """One server-sent event, padded as the real API pads its JSON."""
    return f"event: {name}\ndata: {json.dumps(data)[:-1]}   }}\n\n".encode()


def sse_message(content: list[dict[str, Any]], usage_out: int = 40) -> list[bytes]:
    """A streamed answer in the real event order: citations before text in each block."""
    events = [
        sse(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    **message([]),
                    "stop_reason": None,
                    "usage": {**message([])["usage"], "output_tokens": 1},
                },
            },
        ),
        sse("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(content):
        start: dict[str, Any] = {"type": "text", "text": ""}
        if block.get("citations"):
            start["citations"] = []
        events.append(
            sse(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
        )
        for citation in block.get("citations") or []:
            delta = {"type": "citations_delta", "citation": citation}
            events.append(
                sse(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
        text = block["text"]
        for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
            if piece:
                delta = {"type": "text_delta", "text": piece}
                events.append(
                    sse(
                        "content_block_delta",
                        {"type": "content_block_delta", "index": index, "delta": delta},
                    )
                )
        events.append(sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {**message([])["usage"], "output_tokens": usage_out},
            },
        )
    )
    events.append(sse("message_stop", {"type": "message_stop"}))
    return events
