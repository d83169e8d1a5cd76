"""The response of a stream of server-sent events: the bytes of the events as the relay makes
them, a keep-alive comment after each silence of ``ping`` seconds, and an end as soon as the
client has gone or has stopped reading.

The events are framed as sse-starlette's ``ServerSentEvent`` frames them (``server_sent``);
the response is this one rather than sse-starlette's ``EventSourceResponse``, which runs each
stream in a task group of three tasks behind a lock and cancels them all at its end: per stream
that was a fifth of Citegate's own CPU, and the cancelled tasks left some 300 objects in
reference cycles holding the response and its relay until a full collection (issue 20's
profile). Here the events are sent by one task, the stream's own (``EventStream.__call__``
says why not the request's); a second task only waits for ``http.disconnect``, and ends by
itself once the response is complete. Pings come from a timer (a task sends one only when a
silence is due one), and the send timeout from another, so a send costs no cancel scope, no
lock and no task switch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar, overload

import anyio
from sse_starlette import ServerSentEvent
from starlette.background import BackgroundTask
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

log = logging.getLogger(__name__)
T = TypeVar("T")

PING = b": ping\r\n\r\n"
# Not to be stored by any cache, nor held back by a proxy (nginx) until it has more.
HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def server_sent(events: Iterable[tuple[str, str]]) -> bytes:
    """The bytes of these events, each a name and its data, as one write.

    Data of one line (JSON, as every event's data is: neither orjson nor the upstream writes
    a line break into it) is framed here exactly as sse-starlette frames it, without its
    object, string buffer and regular expressions per event (3.3 us an event, 0.3 here);
    data of several lines is framed by sse-starlette, a ``data:`` line for each. Names are
    Citegate's own or the upstream's as ``app.upstream.sse`` read them, lines themselves:
    never a line break in one."""
    return b"".join(
        f"event: {name}\r\ndata: {data}\r\n\r\n".encode()
        if "\n" not in data and "\r" not in data
        else ServerSentEvent(data=data, event=name).encode()
        for name, data in events
    )


class EventStream(Response, Generic[T]):
    """Server-sent events: ``content`` yields the bytes of whole events, or with ``encode``,
    what ``encode`` makes them of (one generator less between the relay and the socket, for
    every event; measured: 2 % of an event's instructions, bench/instructions.py --trickle 100
    at a4c7b78).

    ``headers`` are added to ``HEADERS``. The stream ends when ``content`` does, or at once
    when the client disconnects (or a ping finds its connection broken), or when a send has
    waited ``send_timeout`` seconds (to a quarter more) for a client that reads nothing.
    ``content`` is then closed if it was cut short, and ``background`` runs in every case (it
    stores what arrived), closing or not.
    """

    media_type = "text/event-stream"

    @overload
    def __init__(
        self: EventStream[bytes],
        content: AsyncIterator[bytes],
        *,
        encode: None = None,
        ping: float,
        send_timeout: float | None = None,
        headers: Mapping[str, str] | None = None,
        background: BackgroundTask | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self,
        content: AsyncIterator[T],
        *,
        encode: Callable[[T], bytes],
        ping: float,
        send_timeout: float | None = None,
        headers: Mapping[str, str] | None = None,
        background: BackgroundTask | None = None,
    ) -> None: ...

    def __init__(
        self,
        content: AsyncIterator[Any],
        *,
        encode: Callable[[Any], bytes] | None = None,
        ping: float,
        send_timeout: float | None = None,
        headers: Mapping[str, str] | None = None,
        background: BackgroundTask | None = None,
    ) -> None:
        if ping <= 0:
            raise ValueError("ping must be a number of seconds")
        self.body_iterator: AsyncIterator[Any] | None = content
        self.encode = encode
        self.status_code = 200
        self.background = background
        self.ping = ping
        self.send_timeout = send_timeout
        self.init_headers({**HEADERS, **(headers or {})})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        content, background = self.body_iterator, self.background
        assert content is not None, "a stream is sent once"
        # Hold nothing of the answer once it has been sent: the response may outlive it.
        self.body_iterator = self.background = None
        sender = _Sender(send, self.ping, self.send_timeout)
        listener = asyncio.ensure_future(_disconnected(receive))
        listener.add_done_callback(sender.heard)
        try:
            # The events are sent by a task of their own: each event resumes the coroutines of
            # the task that awaits it, and in the request's task that is every middleware and
            # router above this response too (measured: 4 % of an event's instructions,
            # bench/instructions.py --trickle 100 at dcb048e). The request's task waits for it
            # and ends the stream below, so that what the stream holds is closed and stored
            # however it ends, even when a cancellation came before the task began.
            await asyncio.ensure_future(self._send_all(content, sender))
        finally:
            sender.stop(listener)
            if sender.stalled:
                log.warning(
                    "a stream's client read nothing for %s s; the stream is ended", sender.timeout
                )
            # Shielded from the stream's own scope; a cancellation of the whole request (the
            # server's, at the end of a graceful shutdown) that lands meanwhile still cuts it.
            with anyio.CancelScope(shield=True):
                try:
                    if not sender.ending:  # cut short: the relay is closed now, not when collected
                        await content.aclose()  # type: ignore[attr-defined]
                finally:
                    if background is not None:
                        await background()

    async def _send_all(self, content: AsyncIterator[Any], sender: _Sender) -> None:
        try:
            with sender.cancel_scope:
                await sender.send(
                    {"type": "http.response.start", "status": 200, "headers": self.raw_headers}
                )
                encode = self.encode
                async for item in content:
                    chunk = item if encode is None else encode(item)
                    await sender.send(
                        {"type": "http.response.body", "body": chunk, "more_body": True}
                    )
                sender.ending = True  # from now on the client's http.disconnect is no news
                await sender.send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # the connection broke under a send
            log.info("a stream's client went away")


class _Sender:
    """The sends of one stream, one at a time: a ping after each silence of ``ping`` seconds,
    and with a ``timeout``, a timer that ends the stream once a send has been waiting that long
    with none completing (a client that stopped reading). A send only counts; the timers look
    a few times per period."""

    CHECKS_PER_TIMEOUT = 4

    def __init__(self, send: Send, ping: float, timeout: float | None) -> None:
        self._send = send
        self.ping = ping
        self.timeout = timeout
        self.cancel_scope = anyio.CancelScope()
        self.ending = self.stalled = self._stopped = False
        self._begun = self._done = self._done_at_check = self._idle_checks = 0
        self._pinging: asyncio.Task[None] | None = None
        self._loop = asyncio.get_running_loop()
        self._sent_at = self._loop.time()
        self._ping_timer = self._loop.call_later(ping, self._ping_due)
        self._watch: asyncio.TimerHandle | None = None
        if timeout is not None:
            self._interval = timeout / self.CHECKS_PER_TIMEOUT
            self._watch = self._loop.call_later(self._interval, self._check)

    async def send(self, message: Message) -> None:
        if self._pinging is not None:  # a ping being sent goes first
            pinging, self._pinging = self._pinging, None
            await pinging
        await self._counted(message)

    async def _counted(self, message: Message) -> None:
        self._begun += 1
        try:
            await self._send(message)
        finally:
            self._done += 1
            self._sent_at = self._loop.time()

    def heard(self, listener: asyncio.Future[None]) -> None:
        """``http.disconnect``: the client has gone, unless the response has ended."""
        if not listener.cancelled():
            listener.exception()  # retrieved: a receive that broke is a client gone
        if not (self.ending or self._stopped):
            self.cancel_scope.cancel()

    def stop(self, listener: asyncio.Future[None]) -> None:
        self._stopped = True
        self._ping_timer.cancel()
        if self._watch is not None:
            self._watch.cancel()
        if self._pinging is not None:
            self._pinging.cancel()  # ``_pinged`` retrieves its end
        # Once the response is complete the server's receive returns at the next turn of the
        # loop; one that never returns is cancelled then.
        self._loop.call_soon(listener.cancel)

    def _ping_due(self) -> None:
        silent = self._loop.time() - self._sent_at
        if silent < self.ping:
            self._ping_timer = self._loop.call_later(self.ping - silent, self._ping_due)
            return
        if self._begun == self._done and self._pinging is None:  # else a send ends the silence
            ping = {"type": "http.response.body", "body": PING, "more_body": True}
            self._pinging = self._loop.create_task(self._counted(ping))
            self._pinging.add_done_callback(self._pinged)
        self._ping_timer = self._loop.call_later(self.ping, self._ping_due)

    def _pinged(self, pinging: asyncio.Task[None]) -> None:
        if pinging is not self._pinging:  # the main task took it over, or the stream ended
            return
        self._pinging = None
        if not pinging.cancelled() and pinging.exception() is not None and not self._stopped:
            self.cancel_scope.cancel()  # the connection broke under the ping: the stream ends

    def _check(self) -> None:
        if self._begun > self._done and self._done == self._done_at_check:
            self._idle_checks += 1
        else:
            self._idle_checks = 0
        self._done_at_check = self._done
        # The first idle check may come just after the send began: one more makes a full timeout.
        if self._idle_checks > self.CHECKS_PER_TIMEOUT:
            self.stalled = True
            self.cancel_scope.cancel()
        else:
            self._watch = self._loop.call_later(self._interval, self._check)


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass  # the request's body, were any left unread
