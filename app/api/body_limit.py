"""Refuse a request whose declared ``Content-Length`` is over the limit before reading any of
it: a problem+json 413 and ``Connection: close``, so the client stops sending at once.

(Starlette's own limit, set per route, still guards bodies sent without a length; for a
declared length it answers in plain text, hence this first line of defence.)
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from app.errors import ErrorRendering, PayloadTooLarge
from app.settings import MIB, Settings

# The routes whose body is a multipart upload of a document.
UPLOAD_PATHS = ("/upload", "/anthropic/v1/files")


def body_limits(settings: Settings) -> tuple[int, int]:
    """(multipart upload, JSON) body limits for the configured document size: multipart
    framing and form fields need a little room beside the file; base64 makes a PDF a third
    larger."""
    return settings.max_document_bytes + MIB, -(-settings.max_json_document_bytes * 4 // 3) + MIB


class DeclaredLengthLimit:
    def __init__(self, app: ASGIApp, settings: Settings, rendering: ErrorRendering) -> None:
        self.app = app
        self.upload_limit, self.json_limit = body_limits(settings)
        self.rendering = rendering

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            limit = self.upload_limit if path.endswith(UPLOAD_PATHS) else self.json_limit
            declared = Headers(scope=scope).get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                error = PayloadTooLarge(
                    f"The request body is {declared} bytes; the limit is {limit}.",
                    headers={"Connection": "close"},
                )
                await self.rendering.response(path, error)(scope, receive, send)
                return
        await self.app(scope, receive, send)
