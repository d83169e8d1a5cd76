"""A fence around uvicorn: ``app.http_protocol`` subclasses uvicorn's httptools protocol, which
is not uvicorn's documented API, to time a request's headers. These tests name each thing it
borrows, so that a release that moves or changes one fails here, not in production.

When one fails, read ``uvicorn/protocols/http/httptools_impl.py`` and ``uvicorn/server.py`` for
the release installed, and make ``HeaderTimeoutProtocol`` start its timer when a connection
opens or a request's first byte arrives, and stop it when the request's headers are whole,
given the app's lifespan state.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from uvicorn.config import HTTP_PROTOCOLS
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from app.http_protocol import HEADER_TIMEOUT_STATE, HeaderTimeoutProtocol
from tests.conftest import free_port

TIMEOUT = 0.5


def test_the_protocol_is_the_one_uvicorns_http_httptools_selects() -> None:
    module, _, name = HTTP_PROTOCOLS["httptools"].partition(":")
    assert (module, name) == (HttpToolsProtocol.__module__, HttpToolsProtocol.__name__)
    assert issubclass(HeaderTimeoutProtocol, HttpToolsProtocol)


def test_uvicorn_builds_it_with_the_lifespan_state_as_app_state() -> None:
    parameters = inspect.signature(HttpToolsProtocol.__init__).parameters
    assert list(parameters)[1:] == ["config", "server_state", "app_state", "_loop"]
    source = inspect.getsource(uvicorn.Server.startup)
    assert "app_state=self.lifespan.state" in source


def test_it_is_the_parsers_callback_object_and_defines_its_callbacks() -> None:
    for callback in ("on_message_begin", "on_headers_complete"):
        assert callback in vars(HttpToolsProtocol), callback
    assert "httptools.HttpRequestParser(self)" in inspect.getsource(HttpToolsProtocol.__init__)


async def test_the_app_state_gives_the_timeout() -> None:
    config = uvicorn.Config(lambda *_: None, http=HeaderTimeoutProtocol)
    config.load()
    state = {HEADER_TIMEOUT_STATE: 2.5}
    protocol = HeaderTimeoutProtocol(
        config=config, server_state=ServerState(), app_state=state, _loop=None
    )
    assert protocol.app_state is state
    assert protocol._header_timeout == 2.5


@asynccontextmanager
async def serving(state: Mapping[str, object]) -> AsyncIterator[int]:
    """A Starlette app whose lifespan yields ``state``, served with the protocol."""

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[Mapping[str, object]]:
        yield state

    async def hello(_: Request) -> PlainTextResponse:
        return PlainTextResponse("hello")

    app = Starlette(routes=[Route("/", hello)], lifespan=lifespan)
    port = free_port()
    config = uvicorn.Config(
        app, port=port, http=HeaderTimeoutProtocol, log_level="warning", timeout_keep_alive=30
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 (uvicorn's server sets a flag, no event)
        await asyncio.sleep(0.01)
    try:
        yield port
    finally:
        server.should_exit = True
        await task


async def closed_after(reader: asyncio.StreamReader) -> float:
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await asyncio.wait_for(reader.read(), 5) == b""
    return loop.time() - started


async def test_served_by_uvicorn_headers_are_timed_from_open_and_from_a_requests_first_byte() -> (
    None
):
    async with serving({HEADER_TIMEOUT_STATE: TIMEOUT}) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n")
        assert TIMEOUT - 0.1 < await closed_after(reader) < TIMEOUT + 1
        writer.close()

        # Whole headers are answered; the next request is timed from its first byte, not
        # from the end of the first one.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await reader.readuntil(b"hello")).startswith(b"HTTP/1.1 200 ")
        await asyncio.sleep(TIMEOUT * 2)
        writer.write(b"GET / HTTP/1.1\r\n")
        assert TIMEOUT - 0.1 < await closed_after(reader) < TIMEOUT + 1
        writer.close()


@pytest.mark.parametrize("state", [{}, {HEADER_TIMEOUT_STATE: 0}])
async def test_without_the_setting_headers_take_their_time(state: dict[str, object]) -> None:
    async with serving(state) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n")
        await asyncio.sleep(TIMEOUT * 2)
        writer.write(b"\r\n")
        assert (await reader.readuntil(b"hello")).startswith(b"HTTP/1.1 200 ")
        writer.close()
