"""Server-sent events out: sse-starlette's response (keep-alive pings, the end of a stream whose
client has gone or stopped reading), and the framing of a list of events as one write."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Iterable, Mapping

import anyio
from sse_starlette import EventSourceResponse, ServerSentEvent
from sse_starlette.sse import SendTimeoutError
from starlette.background import BackgroundTask
from starlette.types import Receive, Scope, Send

log = logging.getLogger(__name__)


def server_sent(events: Iterable[tuple[str, str]]) -> bytes:
    """The bytes of these events, each a name and its data, as one write."""
    return b"".join(ServerSentEvent(data, event=name).encode() for name, data in events)


class EventStream(EventSourceResponse):
    """sse-starlette's stream of ``content`` (the bytes of whole events), a ping after each
    ``ping`` seconds of silence, that also ends quietly when a send has waited
    ``send_timeout`` seconds for a client that reads nothing or when the connection breaks.

    However it ends, ``content`` is closed and then ``finish`` runs (it stores what arrived),
    shielded from cancellation; then the response holds neither, as sse-starlette's tasks leave
    it in reference cycles that only the garbage collector frees.
    """

    def __init__(
        self,
        content: AsyncGenerator[bytes, None],
        *,
        ping: float,
        send_timeout: float | None = None,
        headers: Mapping[str, str] | None = None,
        finish: BackgroundTask | None = None,
    ) -> None:
        if ping <= 0:
            raise ValueError("ping must be a number of seconds")
        super().__init__(content, headers=headers, ping=ping, send_timeout=send_timeout)
        self.content: AsyncGenerator[bytes, None] | None = content
        self.finish = finish

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except SendTimeoutError:
            log.warning(
                "a stream's client read nothing for %s s; the stream is ended", self.send_timeout
            )
        except OSError:
            log.info("a stream's client went away")
        finally:
            content, finish = self.content, self.finish
            self.content = self.finish = self.body_iterator = None  # type: ignore[assignment]
            with anyio.CancelScope(shield=True):
                try:
                    if content is not None:  # else the stream was sent before
                        await content.aclose()
                finally:
                    if finish is not None:
                        await finish()
