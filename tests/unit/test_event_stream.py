"""The stream response's sends: no cancel scope around each, yet a send that waits for a client
that stopped reading ends the response after the send timeout. And a fence around the part of
sse-starlette this relies on, its private ``_send_with_timeout``."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
from sse_starlette import EventSourceResponse
from starlette.background import BackgroundTask
from starlette.types import Message, Scope, Send

from app.api.answers import EventStream

SCOPE: Scope = {"type": "http", "method": "POST", "path": "/v1/answers", "headers": []}
BODY: Message = {"type": "http.response.body", "body": b"data: x\r\n\r\n", "more_body": True}


async def never_disconnects() -> Message:
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


class Relay:
    """A body iterator and a background task that record what happened to them."""

    def __init__(self, events: int) -> None:
        self.events = events
        self.closed = False
        self.background_runs = 0

    async def body(self) -> AsyncIterator[str]:
        try:
            for n in range(self.events):
                yield f"data: {n}\r\n\r\n"
        finally:
            self.closed = True

    async def background(self) -> None:
        self.background_runs += 1


async def serve(response: EventSourceResponse, send: Callable[[Message], Awaitable[None]]) -> None:
    with anyio.fail_after(20):  # a hang fails the test instead of stalling the suite
        await response(SCOPE, never_disconnects, send)


async def test_without_a_timeout_a_send_goes_straight_through() -> None:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    await EventStream(iter(()))._send_with_timeout(send, BODY)
    assert sent == [BODY]


def stuck_after(messages: int, sent: list[Message]) -> Callable[[Message], Awaitable[None]]:
    """A client's send that takes ``messages`` messages, then never another."""

    async def send(message: Message) -> None:
        if len(sent) == messages:
            await anyio.sleep_forever()
        sent.append(message)

    return send


async def test_a_send_that_waits_past_the_timeout_ends_the_stream() -> None:
    relay = Relay(events=1000)
    sent: list[Message] = []
    response = EventStream(
        relay.body(), send_timeout=0.05, ping=0, background=BackgroundTask(relay.background)
    )
    await serve(response, stuck_after(3, sent))
    assert len(sent) == 3 and sent[-1]["more_body"]  # the response never completed
    assert relay.closed and relay.background_runs == 1


async def test_a_stream_whose_client_never_takes_the_headers_still_runs_its_background() -> None:
    relay = Relay(events=10)
    response = EventStream(
        relay.body(), send_timeout=0.05, ping=0, background=BackgroundTask(relay.background)
    )
    await serve(response, stuck_after(0, []))
    assert relay.background_runs == 1


async def test_a_slow_client_that_keeps_reading_is_not_cut_off() -> None:
    """Each send is far shorter than the timeout, all of them together far longer."""
    relay = Relay(events=40)
    sent: list[Message] = []

    async def slow(message: Message) -> None:
        await anyio.sleep(0.02)
        sent.append(message)

    response = EventStream(
        relay.body(), send_timeout=0.5, ping=0, background=BackgroundTask(relay.background)
    )
    await serve(response, slow)
    assert len(sent) == 1 + 40 + 1 and sent[-1] == {
        "type": "http.response.body",
        "body": b"",
        "more_body": False,
    }
    assert relay.background_runs == 1


async def test_sse_starlettes_own_timeout_also_ends_the_stream_cleanly() -> None:
    """Should sse-starlette bypass the override, its SendTimeoutError is not a 500."""

    class LibrarySends(EventStream):
        _send_with_timeout = EventSourceResponse._send_with_timeout

    relay = Relay(events=1000)
    response = LibrarySends(
        relay.body(), send_timeout=0.05, ping=0, background=BackgroundTask(relay.background)
    )
    await serve(response, stuck_after(3, []))
    assert relay.closed and relay.background_runs == 1


FENCE = (
    "sse-starlette changed: app.api.answers.EventStream overrides its private "
    "EventSourceResponse._send_with_timeout(self, send, message) to send events without a cancel "
    "scope each. "
)


def test_fence_sse_starlette_still_has_send_with_timeout() -> None:
    method = getattr(EventSourceResponse, "_send_with_timeout", None)
    assert method is not None, FENCE + "The method is gone: drop the override or follow the rename."
    assert list(inspect.signature(method).parameters) == ["self", "send", "message"], (
        FENCE + f"Its signature is now {inspect.signature(method)}: update the override."
    )


async def test_fence_sse_starlette_sends_every_event_and_ping_through_it() -> None:
    through: list[Message] = []

    class Spied(EventSourceResponse):
        async def _send_with_timeout(self, send: Send, message: Message) -> None:
            through.append(message)
            await super()._send_with_timeout(send, message)

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)
        if len(sent) == 2:
            await anyio.sleep(0.3)  # silence, so that a ping is sent too

    relay = Relay(events=3)
    await serve(Spied(relay.body(), ping=0.1), send)
    bodies = [m for m in sent if m["type"] == "http.response.body" and m["more_body"]]
    assert any(m["body"].startswith(b":") for m in bodies), "no ping was sent"
    assert through == bodies, (
        FENCE + "Not every event or ping goes through it any more, so the override no longer "
        "covers them: check sse_starlette.sse.EventSourceResponse and update the override."
    )
