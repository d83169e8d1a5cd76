"""The stream response: it sends each event as the relay makes it, pings during silences, and
ends early, closing the relay and running ``finish``, when the client has gone, has stopped
reading, its connection broke, or the server cancels the request. Driven through its ASGI
interface, as uvicorn drives it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable

import anyio
import pytest
from httpx import Response
from httpx_sse import EventSource
from starlette.background import BackgroundTask
from starlette.types import Message, Scope

from app.api.event_stream import EventStream, server_sent

SCOPE: Scope = {"type": "http", "method": "POST", "path": "/v1/answers", "headers": []}
END: Message = {"type": "http.response.body", "body": b"", "more_body": False}


async def never_disconnects() -> Message:
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


class Relay:
    """A body iterator and a finishing task that record what happened to them."""

    def __init__(self, events: int, pause: float = 0) -> None:
        self.events = events
        self.pause = pause
        self.sent = 0
        self.closed = False
        self.finished = 0

    async def body(self) -> AsyncGenerator[bytes, None]:
        try:
            for n in range(self.events):
                if self.pause:
                    await anyio.sleep(self.pause)
                self.sent += 1
                yield f"data: {n}\r\n\r\n".encode()
        finally:
            self.closed = True

    async def finish(self) -> None:
        self.finished += 1

    def response(self, ping: float = 60, send_timeout: float | None = None) -> EventStream:
        return EventStream(
            self.body(), ping=ping, send_timeout=send_timeout, finish=BackgroundTask(self.finish)
        )


Receive = Callable[[], Awaitable[Message]]


async def serve(
    response: EventStream,
    send: Callable[[Message], Awaitable[None]],
    receive: Receive = never_disconnects,
) -> None:
    with anyio.fail_after(20):  # a hang fails the test instead of stalling the suite
        await response(SCOPE, receive, send)


def recording(sent: list[Message]) -> Callable[[Message], Awaitable[None]]:
    async def send(message: Message) -> None:
        sent.append(message)

    return send


def bodies(sent: list[Message]) -> list[bytes]:
    return [m["body"] for m in sent if m["type"] == "http.response.body"]


async def test_every_event_is_sent_then_the_end_and_finish_runs() -> None:
    relay = Relay(events=3)
    sent: list[Message] = []
    await serve(relay.response(), recording(sent))
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    headers = dict(sent[0]["headers"])
    assert headers[b"content-type"] == b"text/event-stream; charset=utf-8"
    assert headers[b"cache-control"] == b"no-store"
    assert headers[b"x-accel-buffering"] == b"no"
    assert bodies(sent) == [b"data: 0\r\n\r\n", b"data: 1\r\n\r\n", b"data: 2\r\n\r\n", b""]
    assert sent[-1] == END
    assert relay.closed and relay.finished == 1


async def test_a_silence_gets_pings_and_a_quick_stream_none() -> None:
    relay = Relay(events=2, pause=1.0)  # two silences of ten ping periods each
    sent: list[Message] = []
    await serve(relay.response(ping=0.1), recording(sent))
    sent_bodies = bodies(sent)
    assert [body for body in sent_bodies if body.startswith(b"data:")] == [
        b"data: 0\r\n\r\n",
        b"data: 1\r\n\r\n",
    ]
    assert sent_bodies[-1] == b""
    pings = [body for body in sent_bodies if body.startswith(b":")]
    assert all(body.startswith(b": ping") and body.endswith(b"\r\n\r\n") for body in pings)
    assert 2 * 5 <= len(pings) <= 2 * 11  # about one per 0.1 s of silence

    quick = Relay(events=50)
    sent = []
    await serve(quick.response(ping=0.1), recording(sent))
    assert not [body for body in bodies(sent) if body.startswith(b":")]


async def test_a_ping_that_finds_the_connection_broken_ends_the_stream() -> None:
    relay = Relay(events=3, pause=3)  # 9 s of silences

    async def send(message: Message) -> None:
        if message.get("body", b"").startswith(b":"):
            raise ConnectionResetError("the client's connection was reset")

    started = anyio.current_time()
    await serve(relay.response(ping=0.1), send)
    assert anyio.current_time() - started < 2
    assert relay.closed and relay.finished == 1


async def test_a_client_that_disconnects_ends_the_stream_at_once() -> None:
    relay = Relay(events=1000, pause=0.01)  # 10 s of events
    left = anyio.Event()

    async def receive() -> Message:
        await left.wait()
        return {"type": "http.disconnect"}

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)
        if len(sent) == 5:
            left.set()

    started = anyio.current_time()
    await serve(relay.response(), send, receive)
    assert anyio.current_time() - started < 2
    assert relay.sent < 20 and END not in sent
    assert relay.closed and relay.finished == 1


async def test_a_send_that_waits_past_the_timeout_ends_the_stream() -> None:
    relay = Relay(events=1000)
    sent: list[Message] = []

    async def stuck_after_three(message: Message) -> None:
        if len(sent) == 3:
            await anyio.sleep_forever()
        sent.append(message)

    await serve(relay.response(send_timeout=0.05), stuck_after_three)
    assert len(sent) == 3 and sent[-1]["more_body"]  # the response never completed
    assert relay.closed and relay.finished == 1


async def test_a_slow_client_that_keeps_reading_is_not_cut_off() -> None:
    """Each send is far shorter than the timeout, all of them together far longer."""
    relay = Relay(events=40)
    sent: list[Message] = []

    async def slow(message: Message) -> None:
        await anyio.sleep(0.02)
        sent.append(message)

    await serve(relay.response(send_timeout=0.5), slow)
    assert len(sent) == 1 + 40 + 1 and sent[-1] == END
    assert relay.finished == 1


async def test_a_connection_that_breaks_under_a_send_ends_the_stream_quietly() -> None:
    relay = Relay(events=100)
    sent: list[Message] = []

    async def broken_after_two(message: Message) -> None:
        if len(sent) == 2:
            raise ConnectionResetError("the client's connection was reset")
        sent.append(message)

    await serve(relay.response(), broken_after_two)
    assert relay.closed and relay.finished == 1 and relay.sent < 5


async def test_finish_runs_even_when_closing_the_relay_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runs: list[int] = []

    async def body() -> AsyncGenerator[bytes, None]:
        try:
            while True:
                yield b"data: x\r\n\r\n"
        finally:
            await asyncio.sleep(0)
            raise RuntimeError("closing failed")

    async def finish() -> None:
        runs.append(1)

    async def reset(message: Message) -> None:
        if message["type"] == "http.response.body":
            raise ConnectionResetError

    response = EventStream(body(), ping=60, finish=BackgroundTask(finish))
    await serve(response, reset)
    assert runs == [1]
    assert "closing failed" in caplog.text  # logged, with its traceback


async def test_a_request_the_server_cancels_still_runs_finish() -> None:
    """uvicorn cancels what is still running after its graceful shutdown timeout."""
    relay = Relay(events=1000, pause=0.01)
    task = asyncio.get_running_loop().create_task(
        relay.response()(SCOPE, never_disconnects, recording([]))
    )
    await anyio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert relay.closed and relay.finished == 1


async def test_a_request_cancelled_before_its_events_begin_still_closes_and_finishes() -> None:
    relay = Relay(events=3)
    body = relay.body()
    await anext(body)  # begun, so that closing it runs its ``finally``
    response = EventStream(body, ping=60, finish=BackgroundTask(relay.finish))
    task = asyncio.get_running_loop().create_task(response(SCOPE, never_disconnects, recording([])))
    await asyncio.sleep(0)  # started, not yet sending
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert relay.closed and relay.finished == 1


async def test_it_leaves_no_task_of_its_own_behind() -> None:
    """Neither the disconnect listener, when the server's receive never returns, nor a ping.
    (sse-starlette's one shutdown watcher per event loop stays: it is started by the first.)"""
    await serve(Relay(events=1).response(), recording([]))
    before = asyncio.all_tasks()
    await serve(Relay(events=3, pause=0.15).response(ping=0.1), recording([]))
    await asyncio.sleep(0)
    assert asyncio.all_tasks() - before == set()


def test_a_ping_interval_is_required() -> None:
    with pytest.raises(ValueError, match="ping"):
        EventStream(Relay(events=0).body(), ping=0)


EVENTS = [
    ("text.delta", '{"segment_index":0,"text":"caf\u00e9 \\n not a break"}'),
    ("message_start", '{"type": "message_start", "message": {"id": "msg_1"}}'),
    ("error", '{"type":"error"}'),
    ("multi", "first line\nsecond line\r\nthird\rfourth"),
    ("empty", ""),
]


def test_events_are_framed_as_the_sse_rules_say() -> None:
    assert server_sent(EVENTS) == (
        b'event: text.delta\r\ndata: {"segment_index":0,"text":"caf\xc3\xa9 \\n not a break"}'
        b"\r\n\r\n"
        b'event: message_start\r\ndata: {"type": "message_start", "message": {"id": "msg_1"}}'
        b"\r\n\r\n"
        b'event: error\r\ndata: {"type":"error"}\r\n\r\n'
        b"event: multi\r\ndata: first line\r\ndata: second line\r\ndata: third\r\n"
        b"data: fourth\r\n\r\n"
        b"event: empty\r\ndata: \r\n\r\n"
    )


async def test_a_client_reads_back_every_event_as_it_was() -> None:
    response = Response(
        200, headers={"content-type": "text/event-stream"}, content=server_sent(EVENTS)
    )
    read = [(sse.event, sse.data) async for sse in EventSource(response).aiter_sse()]
    # A data of several lines is read back with its line breaks as "\n" (the SSE rule).
    assert read == [(name, "\n".join(data.splitlines())) for name, data in EVENTS]
