"""What is refused of a request's body before a route reads it.

- A declared ``Content-Length`` over the limit, before any of the body is read: a problem+json
  413 and ``Connection: close``, so the client stops sending at once. (Starlette's own limit,
  set per route, still guards bodies sent without a length; for a declared length it answers in
  plain text, hence this first line of defence.)
- As a POST's body arrives (``CheckedBody``): a JSON body that is not UTF-8, and a multipart
  form that ends before its closing boundary. Neither is refused by the readers underneath:
  Python's JSON reader also takes UTF-16 and UTF-32 and lets UTF-8-encoded surrogates through,
  and python-multipart reports no error for a form cut short, so a route would see a form
  without its file. The check raises ``MalformedBody`` from the route's read of the body, and
  the error handlers answer it (``app.errors``), as a problem or in the Messages API's shape.
- A body that arrives too slowly (``PacedBody``): any request that has one may keep Citegate
  waiting for it ``body_timeout_seconds``, and a second more for every
  ``body_min_bytes_per_second`` bytes that arrived. Past that, the read of the body raises
  ``RequestTimeout``, answered 408 with ``Connection: close``. A bound on the rate rather than
  on the whole time: an honest upload of a large document over a slow link takes as long as
  its size needs, while a client that trickles bytes must keep paying bytes for the time it
  holds a connection. A response that starts before the body is over closes the connection
  after it, rather than leave uvicorn reading a body nobody will read.
"""

from __future__ import annotations

import codecs
import time

import anyio
from python_multipart.multipart import parse_options_header
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import ErrorRendering, MalformedBody, PayloadTooLarge, RequestTimeout
from app.settings import MIB, Settings

# The routes whose body is a multipart upload of a document.
UPLOAD_PATHS = ("/upload", "/anthropic/v1/files")


def body_limits(settings: Settings) -> tuple[int, int]:
    """(multipart upload, JSON) body limits for the configured document size: multipart
    framing and form fields need a little room beside the file; base64 makes a PDF a third
    larger."""
    return settings.max_document_bytes + MIB, -(-settings.max_json_document_bytes * 4 // 3) + MIB


class BodyChecks:
    """Refuses a declared length over the limit at once, has a POST's JSON or multipart body
    checked as it arrives (``CheckedBody``), and any body paced (``PacedBody``)."""

    def __init__(self, app: ASGIApp, settings: Settings, rendering: ErrorRendering) -> None:
        self.app = app
        self.upload_limit, self.json_limit = body_limits(settings)
        self.rendering = rendering
        self.paced = settings.body_timeout_seconds > 0 and settings.body_min_bytes_per_second > 0
        self.body_timeout = settings.body_timeout_seconds
        self.body_rate = settings.body_min_bytes_per_second

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            limit = self.upload_limit if path.endswith(UPLOAD_PATHS) else self.json_limit
            headers = Headers(scope=scope)
            declared = headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                error = PayloadTooLarge(
                    f"The request body is {declared} bytes; the limit is {limit}.",
                    headers={"Connection": "close"},
                )
                await self.rendering.response(path, error)(scope, receive, send)
                return
            # Only a POST or a PATCH: every route that reads a body is one, and a route that
            # does not read its body would meet the check in whatever listens for the client
            # leaving.
            if scope["method"] in ("POST", "PATCH"):
                receive = CheckedBody.of(path, headers.get("content-type"), receive) or receive
            if (declared.isdigit() and declared != "0") or "transfer-encoding" in headers:
                body = PacedBody(receive, self.body_timeout if self.paced else None, self.body_rate)
                receive, send = body, body.closing(send)
        await self.app(scope, receive, send)


class CheckedBody:
    """A ``receive`` that checks the body as it passes: that a JSON body is UTF-8, that a
    multipart form reaches its closing boundary. Raises ``MalformedBody`` for the message
    where the body turns out not to be, before the reader sees it."""

    def __init__(self, receive: Receive, *, utf8: bool, close_delimiter: bytes | None) -> None:
        self._receive = receive
        self._decoder = codecs.getincrementaldecoder("utf-8")() if utf8 else None
        self._close = close_delimiter
        # The end of the body so far, as long as the delimiter less one byte: a delimiter
        # split between two messages is found across them. A CRLF before the body stands for
        # the one a form of no parts starts its close delimiter without.
        self._tail = b"\r\n"
        self._read = 0  # bytes of the body before this message
        self._done = False

    @classmethod
    def of(cls, path: str, content_type: str | None, receive: Receive) -> CheckedBody | None:
        """The checked ``receive`` for a body of this content type: JSON, or a multipart form
        with a boundary sent to an upload route (the only ones that read a form). None for any
        other body, which its route refuses as it reads it, if it reads it at all."""
        # The parser Starlette reads the boundary with, so that both see the same one.
        media_type, options = parse_options_header(content_type)
        if media_type == b"application/json" or (
            media_type.startswith(b"application/") and media_type.endswith(b"+json")
        ):
            return cls(receive, utf8=True, close_delimiter=None)
        boundary = options.get(b"boundary")
        if media_type == b"multipart/form-data" and boundary and path.endswith(UPLOAD_PATHS):
            return cls(receive, utf8=False, close_delimiter=b"\r\n--" + boundary + b"--")
        return None

    async def __call__(self) -> Message:
        message = await self._receive()
        if self._done or message["type"] != "http.request":
            return message
        chunk: bytes = message.get("body", b"")
        last = not message.get("more_body", False)
        if self._decoder is not None:
            self._check_utf8(self._decoder, chunk, last)
        if self._close is not None:
            self._check_close(self._close, chunk, last)
        self._read += len(chunk)
        self._done = last
        return message

    def _check_utf8(self, decoder: codecs.IncrementalDecoder, chunk: bytes, last: bool) -> None:
        try:
            decoder.decode(chunk, final=last)
        except UnicodeDecodeError as exc:
            # The decoder read the bytes it held back from the previous message first.
            offset = self._read - (len(exc.object) - len(chunk)) + exc.start
            raise MalformedBody(
                f"The request body is not UTF-8: {exc.reason} at byte {offset}. "
                "JSON is read as UTF-8 only."
            ) from None
        # UTF-8 JSON has no NUL byte (not even in a string, where it is escaped); UTF-16 and
        # UTF-32 have one in every ASCII character, and are valid UTF-8 when all are ASCII.
        nul = chunk.find(0)
        if nul >= 0:
            raise MalformedBody(
                f"The request body is not UTF-8: a NUL byte at byte {self._read + nul}, as "
                "in UTF-16 or UTF-32. JSON is read as UTF-8 only."
            )

    def _check_close(self, close: bytes, chunk: bytes, last: bool) -> None:
        keep = len(close) - 1
        if close in self._tail + chunk[:keep] or close in chunk:
            self._close = None  # found: the rest is the parser's to read
            return
        if last:
            raise MalformedBody(
                "The multipart form ends before its closing boundary "
                f"({close.strip().decode('latin-1')}): the body is incomplete."
            )
        self._tail = chunk[-keep:] if len(chunk) >= keep else (self._tail + chunk)[-keep:]


class PacedBody:
    """A ``receive`` that waits for the body no longer than its pace allows: ``timeout``
    seconds, and a second more for every ``rate`` bytes that have arrived (None: as long as it
    takes). Only the time spent waiting for the client counts, not the time the route takes
    between two reads, and a message that has arrived is taken whatever the time. Past the
    allowance, raises ``RequestTimeout``. Once the body is over nothing is timed: a stream
    listens on ``receive`` for the client leaving.

    ``closing(send)`` closes the connection after a response that starts before the body is
    over (a route that refused it, or never reads one): uvicorn would otherwise keep reading
    the rest, however slowly it came, before the connection's next request."""

    def __init__(self, receive: Receive, timeout: float | None, rate: int) -> None:
        self._receive = receive
        self._timeout = timeout
        self._rate = rate
        self._arrived = 0  # bytes of the body so far
        self._waited = 0.0  # seconds spent waiting for them
        self._over = False
        self._expired = False

    async def __call__(self) -> Message:
        if self._expired:
            return {"type": "http.disconnect"}
        if self._over:
            return await self._receive()
        if self._timeout is None:
            message = await self._receive()
        else:
            message = await self._timed(grace=self._timeout)
        if message["type"] == "http.request" and message.get("more_body", False):
            self._arrived += len(message.get("body", b""))
        else:
            self._over = True
        return message

    async def _timed(self, grace: float) -> Message:
        allowed = grace + self._arrived / self._rate - self._waited
        started = time.monotonic()
        try:
            with anyio.fail_after(allowed):
                return await self._receive()
        except TimeoutError:
            self._expired = True
            raise RequestTimeout(
                f"The request body arrived too slowly: {self._arrived} bytes in "
                f"{self._waited + time.monotonic() - started:.0f} s, where past the first "
                f"{grace:g} s it must come at {self._rate} bytes a second at least."
            ) from None
        finally:
            self._waited += time.monotonic() - started

    def closing(self, send: Send) -> Send:
        async def send_closing(message: Message) -> None:
            if message["type"] == "http.response.start" and not self._over:
                headers = list(message.get("headers", ()))
                if not any(name.lower() == b"connection" for name, _ in headers):
                    message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        return send_closing
