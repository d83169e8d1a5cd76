"""Citegate's errors and the one handler that renders them as RFC 9457 problem documents.

    CitegateError                 any error a client can act on; carries status and a stable code
    ├── NotFound                  404: unknown id, another tenant's id, unknown route
    ├── InvalidRequest            422: the request is well-formed but cannot be honoured
    │   └── InvalidDocument       422: the uploaded document cannot be read (pdf_encrypted, …)
    ├── Unauthorized              401: no key, a malformed, unknown or revoked key (one answer)
    ├── RateLimited               429: a per-key limit is reached; says when to retry
    ├── Conflict                  409: e.g. a conversation already answering a follow-up
    ├── PayloadTooLarge           413: the body or document exceeds the size limit
    └── UnsupportedMediaType      415: neither PDF nor text

Services raise these; they never import FastAPI. Anything else that escapes a route is logged
and answered with a bare 500 ``internal_error`` that carries no detail.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)

PROBLEM_MEDIA_TYPE = "application/problem+json"


class CitegateError(Exception):
    """An error with an HTTP status and a stable snake_case ``code``."""

    status = 400
    code = "bad_request"

    def __init__(
        self,
        detail: str,
        *,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        if code is not None:
            self.code = code
        self.headers = headers
        self.extra = extra


class NotFound(CitegateError):
    status = 404
    code = "not_found"


class InvalidRequest(CitegateError):
    status = 422
    code = "invalid_request"


class InvalidDocument(InvalidRequest):
    code = "invalid_document"


class Conflict(CitegateError):
    status = 409
    code = "conflict"


class Unauthorized(CitegateError):
    status = 401
    code = "unauthorized"

    def __init__(self) -> None:
        # The same words for every failure: nothing tells whether a key exists.
        super().__init__(
            "A valid API key is required: Authorization: Bearer <key>.",
            headers={"WWW-Authenticate": "Bearer"},
        )


class RateLimited(CitegateError):
    status = 429
    code = "rate_limited"

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail, headers={"Retry-After": str(retry_after)}, retry_after=retry_after)


class PayloadTooLarge(CitegateError):
    status = 413
    code = "payload_too_large"


class UnsupportedMediaType(CitegateError):
    status = 415
    code = "unsupported_media_type"


# Codes for errors raised by the framework itself rather than by our services.
_HTTP_CODES = {
    400: "malformed_body",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


# Our own titles: Python's status phrases change between versions (422, 413 did in 3.13).
_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


def problem_body(status: int, code: str, detail: str, **extra: Any) -> dict[str, Any]:
    """An RFC 9457 problem document: type, title, status, detail, code, plus extra members."""
    return {
        "type": f"urn:citegate:problem:{code}",
        "title": _TITLES.get(status) or HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        "code": code,
        **extra,
    }


def problem_of(error: CitegateError) -> dict[str, Any]:
    return problem_body(error.status, error.code, error.detail, **error.extra)


def problem_response(
    status: int,
    code: str,
    detail: str,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    """A problem+json response."""
    body = problem_body(status, code, detail, **extra)
    return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_MEDIA_TYPE)


async def _citegate_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, CitegateError)
    return problem_response(exc.status, exc.code, exc.detail, headers=exc.headers, **exc.extra)


async def _http_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
    headers = dict(exc.headers or {})
    if exc.status_code == 413:
        detail = "The request body exceeds the size limit."
        # The rest of the body is never read: close rather than wait for the client to send it.
        headers["Connection"] = "close"
    return problem_response(exc.status_code, code, detail, headers=headers)


async def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {"loc": list(err.get("loc", ())), "msg": err.get("msg", ""), "type": err.get("type", "")}
        for err in exc.errors()
    ]
    return problem_response(
        422, "validation_error", "The request is not valid; see errors.", errors=errors
    )


async def _unexpected_error(_: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error", exc_info=exc)
    return problem_response(500, "internal_error", "An unexpected error occurred.")


def install_error_handlers(app: FastAPI) -> None:
    """Render every error the app can raise as problem+json."""
    app.add_exception_handler(CitegateError, _citegate_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Exception, _unexpected_error)
