"""What the Messages API's failures become for our callers. httpx never leaves this package.

UpstreamError (CitegateError)      every one carries ``upstream_request_id`` when known
├── 503 upstream_rate_limited      upstream 429, after retries; with Retry-After
├── 503 upstream_overloaded        upstream 529, after retries; with Retry-After
├── 504 upstream_timeout           no answer within the read timeout
├── 502 upstream_bad_response      a body that is not a valid Messages response
├── 502 upstream_auth_failed       upstream 401/403: our key is wrong (never echoed)
├── 502 upstream_unavailable       upstream 5xx after retries, or unreachable
├── 502 upstream_stream_interrupted the stream broke off mid-answer
├── 422 upstream_rejected          upstream 400: e.g. the prompt is too long for the model
└── 413 upstream_request_too_large upstream 413

The status of each comes from its ``ErrorCode``. An error the upstream answered also keeps
what it said (``Answered``: its status, error type and message), for the Anthropic-compatible
routes, which pass the upstream's errors on as they came.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from app.errors import CitegateError, ErrorCode


@dataclass(frozen=True, slots=True)
class Answered:
    """An error response of the upstream, as it came: status, error type, message."""

    status: int
    type: str
    message: str


class UpstreamError(CitegateError):
    default_code = ErrorCode.UPSTREAM_UNAVAILABLE

    def __init__(
        self,
        detail: str,
        *,
        request_id: str | None = None,
        retry_after: int | None = None,
        code: ErrorCode | None = None,
        answered: Answered | None = None,
    ) -> None:
        extra: dict[str, object] = {"upstream_request_id": request_id}
        headers = None
        if retry_after is not None:
            extra["retry_after"] = retry_after
            headers = {"Retry-After": str(retry_after)}
        super().__init__(detail, code=code, headers=headers, **extra)
        self.request_id = request_id
        self.retry_after = retry_after
        self.answered = answered


def error_for_status(
    status: int,
    message: str,
    request_id: str | None,
    retry_after: int | None,
    *,
    upstream_type: str | None = None,
) -> UpstreamError:
    """Our error for an upstream HTTP error status (after any retries); ``upstream_type`` is
    the error type the upstream named, when it named one."""
    answered = None if upstream_type is None else Answered(status, upstream_type, message)
    error = _error_for_status(status, message, request_id, retry_after)
    error.answered = answered
    return error


# The statuses behind the error types that can arrive without one: inside a stream, or as a
# batch's errored result.
_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "not_found_error": 404,
    "permission_error": 403,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


def error_of_body(
    body: Any,
    request_id: str | None,
    *,
    status: int | None = None,
    retry_after: float | None = None,
    fallback: str = "",
) -> UpstreamError:
    """Our error for an upstream error body, ``{"type": "error", "error": {"type",
    "message"}, "request_id"}``: of an error response (its ``status``), of a stream's
    ``error`` event or of a batch's errored result (the status its error type stands for).
    ``fallback`` is the message when the body names none."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        error = {}
    kind = error.get("type")
    kind = kind if isinstance(kind, str) else None
    if status is None:
        status = _ERROR_STATUS.get(kind or "", 500)
    if request_id is None and isinstance(body, dict) and isinstance(body.get("request_id"), str):
        request_id = body["request_id"]
    message = error.get("message")
    return error_for_status(
        status,
        message if isinstance(message, str) and message else fallback,
        request_id,
        None if retry_after is None else math.ceil(retry_after),
        upstream_type=kind,
    )


def _error_for_status(
    status: int, message: str, request_id: str | None, retry_after: int | None
) -> UpstreamError:
    if status == 429:
        return UpstreamError(
            "The upstream API is rate limiting Citegate; retry later.",
            code=ErrorCode.UPSTREAM_RATE_LIMITED,
            request_id=request_id,
            retry_after=retry_after or 1,
        )
    if status == 529:
        return UpstreamError(
            "The upstream API is overloaded; retry later.",
            code=ErrorCode.UPSTREAM_OVERLOADED,
            request_id=request_id,
            retry_after=retry_after or 1,
        )
    if status in (401, 403):
        return UpstreamError(
            "The upstream API refused Citegate's credentials.",
            code=ErrorCode.UPSTREAM_AUTH_FAILED,
            request_id=request_id,
        )
    if status == 413:
        return UpstreamError(
            f"The upstream API refused the request as too large: {message}",
            code=ErrorCode.UPSTREAM_REQUEST_TOO_LARGE,
            request_id=request_id,
        )
    if 400 <= status < 500:
        return UpstreamError(
            f"The upstream API rejected the request: {message}",
            code=ErrorCode.UPSTREAM_REJECTED,
            request_id=request_id,
        )
    return UpstreamError(f"The upstream API failed with status {status}.", request_id=request_id)


def request_id_of(response: httpx.Response) -> str | None:
    request_id: str | None = response.headers.get("request-id")
    return request_id


@contextmanager
def reading(response: httpx.Response, what: str) -> Iterator[None]:
    """A body read as it arrives: its transport's failures as our errors, ``what`` says
    which body ("the answer", "the batch's results")."""
    request_id = request_id_of(response)
    try:
        yield
    except (httpx.DecodingError, httpx.TransportError) as exc:
        raise _broken_body(exc, what, request_id) from exc


def _broken_body(exc: httpx.HTTPError, what: str, request_id: str | None) -> UpstreamError:
    if isinstance(exc, httpx.DecodingError):
        detail, code = (
            f"sent {what} in a form that does not decode",
            ErrorCode.UPSTREAM_BAD_RESPONSE,
        )
    # httpx-aiohttp gives a connection that closed as ConnectTimeout: not a timeout.
    elif isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
        detail, code = f"stopped sending in the middle of {what}", ErrorCode.UPSTREAM_TIMEOUT
    else:
        detail = f"dropped the connection in the middle of {what}"
        code = ErrorCode.UPSTREAM_STREAM_INTERRUPTED
    return UpstreamError(f"The upstream API {detail}.", code=code, request_id=request_id)
