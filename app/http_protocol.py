"""The HTTP protocol Citegate is served with: uvicorn's httptools protocol, with a time limit
on a request's headers.

uvicorn bounds no part of reading a request. Its keep-alive timeout runs only between two
requests, is put off by every byte that arrives, and is not set on a new connection, so a
client sending its headers a byte a second (or nothing at all) holds a connection for ever.
The ASGI app cannot see such a client, since it is called once the headers are whole, and
uvicorn has no setting for it (its issue "Further timeouts and resource limiting" proposes one,
never built). So the limit is kept here, in a subclass of uvicorn's protocol that `citegate
serve` and the tests name as uvicorn's ``http``: from a connection's opening, or from the
first byte of a later request on it, the headers have ``header_timeout_seconds`` to arrive
whole; past that the connection is closed, with no answer (a request may be pipelined behind
another whose response is being sent, and an answer would land inside it). The body is the
app's to bound (``app.api.body_checks``): by then there is a route to answer it, 408
``request_timeout``.

What this borrows of uvicorn, which is not its documented API, is named here and nowhere else,
and tests/unit/test_uvicorn_fence.py fails when a release changes it:

- ``uvicorn.protocols.http.httptools_impl.HttpToolsProtocol``, the class ``--http httptools``
  selects, which uvicorn's server builds with ``config``, ``server_state``, ``app_state`` and
  ``_loop`` for each connection;
- its ``app_state`` attribute: the state the app's lifespan yielded, through which the app
  tells its protocol the setting (``HEADER_TIMEOUT_STATE``), in every worker process alike;
- that it is the callback object of httptools' parser, so that its ``on_message_begin`` and
  ``on_headers_complete`` (httptools' callbacks, which it defines) run when a request's first
  byte and the end of its headers arrive.

``connection_made`` and ``connection_lost`` are asyncio's protocol interface.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger(__name__)

HEADER_TIMEOUT_STATE = "citegate.header_timeout_seconds"
"""The key of the app's lifespan state that holds ``header_timeout_seconds``; absent or 0,
headers are given all the time they take, as uvicorn gives them."""


class HeaderTimeoutProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, closing a connection whose request headers take longer
    than the app's ``header_timeout_seconds``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timeout = float(self.app_state.get(HEADER_TIMEOUT_STATE) or 0)
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_transport: asyncio.Transport | None = None
        self._head_begun = False  # a byte of the request now awaited has arrived

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._head_transport = transport  # type: ignore[assignment]
        self._await_head()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_begun = True
        # A connection's first request is timed from the connection's opening; a later one
        # from its first byte, the time between two requests being the keep-alive timeout's.
        if self._head_timer is None:
            self._await_head()

    def on_headers_complete(self) -> None:
        self._stop_waiting()
        self._head_begun = False
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def _await_head(self) -> None:
        if self._header_timeout > 0:
            loop = asyncio.get_running_loop()
            self._head_timer = loop.call_later(self._header_timeout, self._head_too_slow)

    def _stop_waiting(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        transport = self._head_transport
        if transport is None or transport.is_closing():
            return
        if self._head_begun:
            log.info(
                "request headers not whole within %g s: connection from %s closed",
                self._header_timeout,
                transport.get_extra_info("peername"),
            )
        transport.close()
