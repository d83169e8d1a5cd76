"""The upstream transport (app/upstream/transport.py) against a real HTTP server on 127.0.0.1,
in a thread of its own so that it goes on sending while the test's event loop is held up: the
body's read timeout, kept by the transport's own timer."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import httpx
import pytest
import uvloop

from app.settings import Settings
from app.upstream.transport import UpstreamTransport

Serve = Callable[[float], str]
Run = Callable[[Coroutine[Any, Any, Any]], Any]
HEADERS = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


@pytest.fixture
def server() -> Iterator[Serve]:
    """``serve(gap)``: the URL of a server that answers one request with a chunked body,
    ``head``, then after ``gap`` seconds ``tail`` and the end."""
    listener = socket.create_server(("127.0.0.1", 0))
    threads = []

    def answer(gap: float) -> None:
        connection, _ = listener.accept()
        with connection:
            while b"\r\n\r\n" not in connection.recv(65536):
                pass
            connection.sendall(HEADERS + chunk(b"head\n"))
            time.sleep(gap)
            connection.sendall(chunk(b"tail\n") + b"0\r\n\r\n")
            time.sleep(0.2)  # the client reads the end before the connection closes

    def serve(gap: float) -> str:
        thread = threading.Thread(target=answer, args=(gap,), daemon=True)
        thread.start()
        threads.append(thread)
        return f"http://127.0.0.1:{listener.getsockname()[1]}/"

    yield serve
    for thread in threads:
        thread.join(timeout=10)
    listener.close()


async def read(url: str, read_timeout: float, stall: float = 0.0) -> list[bytes]:
    """The body's chunks; with ``stall``, the event loop is held that long while the read
    after the first waits (by a callback, as by any burst of other work)."""
    transport = UpstreamTransport(Settings())
    timeout = {"connect": 5.0, "read": read_timeout, "write": 5.0, "pool": 5.0}
    try:
        request = httpx.Request("GET", url, extensions={"timeout": timeout})
        response = await transport.handle_async_request(request)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        got = []
        try:
            async for piece in response.stream:
                got.append(piece)
                if stall and len(got) == 1:
                    asyncio.get_running_loop().call_soon(time.sleep, stall)
        finally:
            await response.aclose()
        return got
    finally:
        await transport.aclose()


# The service runs on uvloop (uvicorn's choice when it is installed), which runs its timers
# before it reads its sockets; asyncio's own loop reads first.
LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


@pytest.fixture(params=sorted(LOOPS))
def run(request: pytest.FixtureRequest) -> Run:
    def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
        with asyncio.Runner(loop_factory=LOOPS[request.param]) as runner:
            return runner.run(coroutine)

    return run


def test_a_body_that_keeps_coming_is_read_whole(server: Serve, run: Run) -> None:
    assert b"".join(run(read(server(0.1), read_timeout=1.0))) == b"head\ntail\n"


def test_a_read_that_waits_past_the_timeout_fails(server: Serve, run: Run) -> None:
    with pytest.raises(httpx.ReadTimeout):
        run(read(server(3.0), read_timeout=0.5))


def test_bytes_that_came_while_the_loop_was_held_are_no_timeout(server: Serve, run: Run) -> None:
    """The tail arrives while the loop is held past the read timeout: when the loop runs again,
    the timer is due in the same turn as the socket has the tail to read, and must not fail
    the read that gets it."""
    got = run(read(server(0.3), read_timeout=0.5, stall=1.0))
    assert b"".join(got) == b"head\ntail\n"
