"""A TCP proxy that a test controls, to cut a server off without touching the server.

``TcpProxy(host, port)`` listens on a port of 127.0.0.1 and forwards each connection to the
target. ``cut()`` drops every connection it carries (reset, as a network or a restarting
server drops them) and stops listening, so that new connections are refused; ``blackhole()``
drops them too but accepts new ones and never answers them; ``restore()`` listens on the same
port again and forwards. It runs its own event loop in a thread, so that a test of a
served app (itself on another thread) can cut and restore from plain synchronous code.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, Self, TypeVar

T = TypeVar("T")

_PIECE = 64 * 1024


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.connections = 0  # accepted since the proxy started
        self.blackholed = False

    def __enter__(self) -> Self:
        self._thread.start()
        self._call(self._listen())
        return self

    def __exit__(self, *_: object) -> None:
        self._call(self._drop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def cut(self) -> None:
        """Drop every connection and refuse new ones."""
        self._call(self._drop())

    def restore(self) -> None:
        """Accept connections again, on the same port, and forward them."""
        self.blackholed = False
        self._call(self._listen())

    def blackhole(self) -> None:
        """Drop every connection, then accept new ones and never answer them: a server that
        packets no longer reach (a host gone, a firewall dropping them) until ``restore``."""
        self._call(self._drop())
        self.blackholed = True
        self._call(self._listen())

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=10)

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
            self.port = self._server.sockets[0].getsockname()[1]

    async def _drop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _accept(
        self, client_reader: asyncio.StreamReader, client: asyncio.StreamWriter
    ) -> None:
        self.connections += 1
        if self.blackholed:
            self._writers.add(client)  # held open, unanswered, until dropped
            return
        try:
            server_reader, server = await asyncio.open_connection(*self.target)
        except OSError:
            client.transport.abort()
            return
        pair = {client, server}
        self._writers |= pair
        try:
            await asyncio.gather(
                _pump(client_reader, server), _pump(server_reader, client), return_exceptions=True
            )
        finally:
            for writer in pair:
                writer.transport.abort()
            self._writers -= pair


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while piece := await reader.read(_PIECE):
            writer.write(piece)
            await writer.drain()
    writer.close()  # one side ended: so does the other, once what it was sent is written
