"""A stand-in for the Messages API on 127.0.0.1: replays scripted replies, records requests."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # JSON-able, or bytes sent as they are
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


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
        self.replies: deque[Reply] = deque()
        self.requests: list[Recorded] = []
        self.app = Starlette(
            routes=[
                Route("/v1/messages", self._answer, methods=["POST"]),
                Route("/v1/messages/count_tokens", self._answer, methods=["POST"]),
            ]
        )

    def reset(self, *replies: Reply) -> None:
        self.replies = deque(replies)
        self.requests = []

    async def _answer(self, request: Request) -> Response:
        self.requests.append(
            Recorded(request.url.path, dict(request.headers), json.loads(await request.body()))
        )
        reply = self.replies.popleft() if len(self.replies) > 1 else self.replies[0]
        if reply.delay:
            await asyncio.sleep(reply.delay)
        content = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
        headers = {"request-id": "req_fake0001", **reply.headers}
        return Response(content, reply.status, headers, media_type="application/json")
