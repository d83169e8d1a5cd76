"""The process's one transport to the upstream: httpx's transport API (what ``UpstreamClient``
speaks) over one aiohttp session.

httpcore's own pool costs a millisecond of CPU a request at 16 concurrent (it polls every
pooled socket) and grew slowly under a burst of new streams, so the connections are aiohttp's.
The request is made as httpx-aiohttp makes it (its exceptions mapped by its own table), but the
response's body is this module's: read as aiohttp has it, whatever arrived since the last read
in one chunk (``readany``), and with the read timeout kept here once the headers have come.
aiohttp's ``sock_read`` cancels a timer and makes a new one at every read of the socket: 8.5 K
instructions of each relayed event's 137 K (bench/instructions.py --trickle 100), where here
one timer a stream looks whether a read has waited too long.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import httpx
from httpx_aiohttp.transport import map_aiohttp_exceptions

from app.settings import Settings


class UpstreamTransport(httpx.AsyncBaseTransport):
    """httpx requests sent through one aiohttp session, made at the first request (inside the
    running loop, as aiohttp wants)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._session: aiohttp.ClientSession | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._session is None:
            self._session = _session(self._settings)
        timeout = request.extensions.get("timeout", {})
        with map_aiohttp_exceptions():
            response = await self._session.request(
                request.method,
                str(request.url),
                headers=request.headers,
                data=_content(request),
                allow_redirects=False,
                auto_decompress=False,  # httpx decodes, as it would its own transport's
                compress=False,
                timeout=aiohttp.ClientTimeout(
                    sock_connect=timeout.get("connect"),
                    sock_read=timeout.get("read"),  # up to the headers; the body's is _Body's
                    connect=timeout.get("pool"),
                ),
            )
        extensions = {"http_version": b"HTTP/1.1"}
        if response.reason:
            extensions["reason_phrase"] = response.reason.encode()
        return httpx.Response(
            status_code=response.status,
            headers=response.raw_headers,
            stream=_Body(response, timeout.get("read")),
            request=request,
            extensions=extensions,
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


def _content(request: httpx.Request) -> bytes | httpx.AsyncByteStream | None:
    try:
        return request.content or None
    except httpx.RequestNotRead:  # a body given as an iterator: sent as it comes
        return request.stream  # type: ignore[return-value]


def _session(settings: Settings) -> aiohttp.ClientSession:
    """Made as httpx-aiohttp makes its own, but that it keeps no cookie: the one session serves
    every tenant, so a cookie set on one answer must never go out with another's request
    (aiohttp has a jar of its own)."""
    connector = aiohttp.TCPConnector(
        limit=settings.upstream_max_connections,
        keepalive_timeout=httpx.Limits().keepalive_expiry,
        ssl=httpx.create_ssl_context(),
    )
    return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar())


class _Body(httpx.AsyncByteStream):
    """A response's body, a chunk for each read of what has arrived. With a ``timeout``, a read
    that has waited that long for the upstream fails as aiohttp's own read timeout fails it
    (``httpx.ReadTimeout``); one timer a stream, due when the read waiting would time out,
    instead of aiohttp's, made anew at each read of the socket. Time the consumer spends away
    (writing to a slow client) is not the upstream's and does not count."""

    def __init__(self, response: aiohttp.ClientResponse, timeout: float | None) -> None:
        self._response = response
        self._timeout = timeout
        self._waiting_since: float | None = None
        self._watch: asyncio.TimerHandle | None = None
        if timeout is not None and response.connection is not None:
            protocol = response.connection.protocol
            if protocol is not None:  # from its next read of the socket, no timer of its own
                protocol.read_timeout = None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        content = self._response.content
        if self._timeout is not None:
            self._watch = loop.call_later(self._timeout, self._check, loop)
        try:
            with map_aiohttp_exceptions():
                while True:
                    self._waiting_since = loop.time()
                    chunk = await content.readany()
                    self._waiting_since = None
                    if not chunk:  # the end
                        return
                    yield chunk
        finally:
            if self._watch is not None:
                self._watch.cancel()

    def _check(self, loop: asyncio.AbstractEventLoop) -> None:
        assert self._timeout is not None
        since, now = self._waiting_since, loop.time()
        if since is not None and now - since >= self._timeout:
            self._watch = None
            error = aiohttp.SocketTimeoutError("Timeout on reading data from socket")
            self._response.content.set_exception(error)  # the read waiting raises it
            return
        due = self._timeout if since is None else since + self._timeout - now
        self._watch = loop.call_later(due, self._check, loop)

    async def aclose(self) -> None:
        with map_aiohttp_exceptions():
            await self._response.__aexit__(None, None, None)
