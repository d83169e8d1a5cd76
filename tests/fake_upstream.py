"""A stand-in for the Messages API on 127.0.0.1: replays scripted replies, records requests."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
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


class FakeUpstream:
    def __init__(self) -> None:
        self.base_url = ""  # set once it is served
        self.replies: deque[Reply] = deque()
        self.requests: list[Recorded] = []
        self.stream_closed = asyncio.Event()  # set when a stream ends, finished or not
        self.stream_finished = False
        self.app = Starlette(
            routes=[
                Route("/v1/messages", self._answer, methods=["POST"]),
                Route("/v1/messages/count_tokens", self._answer, methods=["POST"]),
            ]
        )

    def reset(self, *replies: Reply) -> None:
        self.replies = deque(replies)
        self.requests = []
        self.stream_closed = asyncio.Event()
        self.stream_finished = False

    async def _answer(self, request: Request) -> Response:
        self.requests.append(
            Recorded(request.url.path, dict(request.headers), json.loads(await request.body()))
        )
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
