"""The process's one transport to the upstream: httpx's transport API (what ``UpstreamClient``
speaks) over one aiohttp session.

httpcore's own pool costs a millisecond of CPU a request at 16 concurrent (it polls every
pooled socket) and grew slowly under a burst of new streams, so the connections are aiohttp's.
The request is made as httpx-aiohttp made it (this replaces its transport; its table of
exceptions is kept), but the response's body is this module's: read as aiohttp has it,
whatever arrived since the last read in one chunk (``readany``), and with the read timeout kept
here once the body has begun to come. aiohttp's ``sock_read`` cancels a timer and makes a new
one at every read of the socket: 8.5 K instructions of each relayed event's 137 K
(bench/instructions.py --trickle 100); here one timer a body, due when the read waiting would
time out.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import aiohttp
import httpx

from app.settings import Settings

# aiohttp's exceptions as httpx's, the most specific that applies: httpx-aiohttp's table (but
# for proxies, which Citegate does not use). As there, a connection that closed before the
# answer began counts as a failure to connect, which is retried.
_ERRORS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (aiohttp.ServerTimeoutError, httpx.TimeoutException),
    (aiohttp.SocketTimeoutError, httpx.ReadTimeout),
    (aiohttp.ClientConnectionError, httpx.ConnectTimeout),
    (aiohttp.ClientConnectorError, httpx.ConnectError),
    (aiohttp.ClientPayloadError, httpx.ReadError),
    (aiohttp.NonHttpUrlClientError, httpx.UnsupportedProtocol),
    (aiohttp.InvalidUrlClientError, httpx.UnsupportedProtocol),
)


@contextmanager
def _mapped() -> Iterator[None]:
    try:
        yield
    except aiohttp.ClientError as exc:
        made: type[httpx.TransportError] | None = None
        for given, candidate in _ERRORS:
            if isinstance(exc, given) and (made is None or issubclass(candidate, made)):
                made = candidate
        if made is None:
            raise
        raise made(str(exc)) from exc


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
        with _mapped():
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
        request.headers.pop("transfer-encoding", None)  # aiohttp chunks it when it must
        return request.stream  # type: ignore[return-value]


def _session(settings: Settings) -> aiohttp.ClientSession:
    """Made as httpx-aiohttp made its own, but that it keeps no cookie: the one session serves
    every tenant, so a cookie set on one answer must never go out with another's request
    (aiohttp has a jar of its own)."""
    connector = aiohttp.TCPConnector(
        limit=settings.upstream_max_connections,
        keepalive_timeout=httpx.Limits().keepalive_expiry,
        ssl=httpx.create_ssl_context(),
    )
    return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar())


# How late a read may time out: the time for the loop to read its sockets once more.
_GRACE = 0.01


class _Body(httpx.AsyncByteStream):
    """A response's body, a chunk for each read of what has arrived. With a ``timeout``, a read
    that has waited that long for the upstream fails as aiohttp's own read timeout fails it
    (``httpx.ReadTimeout``): one timer a body, due when the read waiting would time out, where
    aiohttp makes one anew at each read of the socket. The time the consumer spends away
    (writing to a slow client) does not count, from the first bytes of the body on; until then
    the timer aiohttp started with the headers runs. A body already whole needs no timer."""

    def __init__(self, response: aiohttp.ClientResponse, timeout: float | None) -> None:
        self._response = response
        self._timeout: float | None = None
        self._waiting_since: float | None = None
        self._received = 0  # the body's bytes when the read waiting began
        self._watch: asyncio.TimerHandle | None = None
        connection = response.connection  # None once the whole body has come
        protocol = None if connection is None else connection.protocol
        if timeout is not None and protocol is not None:
            protocol.read_timeout = None  # from its next read of the socket (each request sets it)
            self._timeout = timeout

    async def __aiter__(self) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        content = self._response.content
        if self._timeout is not None and self._watch is None:
            self._watch = loop.call_later(self._timeout, self._check, loop)
        try:
            with _mapped():
                while True:
                    self._received = content.total_bytes
                    self._waiting_since = loop.time()
                    chunk = await content.readany()
                    self._waiting_since = None
                    if not chunk:  # the end
                        return
                    yield chunk
        finally:
            self._stop()

    def _check(self, loop: asyncio.AbstractEventLoop) -> None:
        assert self._timeout is not None
        since, now = self._waiting_since, loop.time()
        if since is not None and now - since >= self._timeout:
            # Due; but after a stall of the loop itself the bytes may have come meanwhile,
            # still unread (uvloop runs its timers before it reads its sockets): the read
            # fails only if none have come once the loop has read its sockets again.
            self._watch = loop.call_later(_GRACE, self._expire, loop, since)
            return
        due = self._timeout if since is None else since + self._timeout - now
        self._watch = loop.call_later(due, self._check, loop)

    def _expire(self, loop: asyncio.AbstractEventLoop, since: float) -> None:
        content = self._response.content
        if (
            self._waiting_since == since
            and content.total_bytes == self._received
            and not content.is_eof()
        ):
            self._watch = None
            error = aiohttp.SocketTimeoutError("Timeout on reading data from socket")
            content.set_exception(error)  # the read waiting raises it
        else:
            self._check(loop)

    def _stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    async def aclose(self) -> None:
        self._stop()  # closed before its iterator ended (the iterator may never be closed)
        with _mapped():
            await self._response.__aexit__(None, None, None)
