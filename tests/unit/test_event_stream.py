"""The stream response's sends: straight through without a timeout, still bounded with one."""

from __future__ import annotations

import asyncio

import pytest
from sse_starlette.sse import SendTimeoutError
from starlette.types import Message

from app.api.answers import _EventStream

BODY: Message = {"type": "http.response.body", "body": b"data: x\n\n", "more_body": True}


async def test_without_a_timeout_a_send_goes_straight_through() -> None:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    await _EventStream(iter(()))._send_with_timeout(send, BODY)
    assert sent == [BODY]


async def test_with_a_timeout_a_stuck_send_still_fails() -> None:
    async def stuck(message: Message) -> None:
        await asyncio.sleep(5)

    with pytest.raises(SendTimeoutError):
        await _EventStream(iter(()), send_timeout=0.01)._send_with_timeout(stuck, BODY)
