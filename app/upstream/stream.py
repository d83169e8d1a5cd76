"""The events of a streamed answer, read with httpx-sse as they arrive."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
from httpx_sse import EventSource, SSEError

from app.errors import ErrorCode
from app.upstream.errors import UpstreamError, error_of_body, reading, request_id_of

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Frame:
    """One server-sent event as the upstream sent it: its name, its data, the data parsed."""

    name: str
    data: str
    event: dict[str, Any]

    @property
    def type(self) -> str:
        return str(self.event.get("type") or self.name)


class UpstreamStream:
    """The events of a streamed answer, each parsed as JSON, pings and errors included."""

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.request_id = request_id_of(response)

    async def frames(self) -> AsyncGenerator[Frame, None]:
        """Every event that has data, in order; ``UpstreamError`` for a body that is not an
        event stream, an event that is not a JSON object, or a stream that breaks off."""
        with reading(self._response, "the answer"):
            try:
                async with aclosing(EventSource(self._response).aiter_sse()) as events:
                    async for sse in events:
                        if not sse.data:  # an event of no data is no event (the SSE rules)
                            continue
                        try:
                            # Real streams pad their JSON with spaces: parsed, never matched.
                            event = orjson.loads(sse.data)
                        except orjson.JSONDecodeError:
                            raise self._bad("an event that is not JSON") from None
                        if not isinstance(event, dict):
                            raise self._bad("an event that is not an object")
                        yield Frame(sse.event, sse.data, event)
            except SSEError as exc:  # a TransportError to httpx: caught here first
                raise self._bad("something that is not an event stream") from exc

    def _bad(self, what: str) -> UpstreamError:
        return UpstreamError(
            f"The upstream API streamed {what}.",
            code=ErrorCode.UPSTREAM_BAD_RESPONSE,
            request_id=self.request_id,
        )

    def error_of(self, frame: Frame) -> UpstreamError:
        """Our error for an ``error`` event of the stream."""
        error = error_of_body(frame.event, self.request_id)
        log.warning("upstream error event mid-stream: %s", error.answered)
        return error
