"""Errors in the Messages API's shape, for the Anthropic-compatible routes.

``{"type": "error", "error": {"type", "message"}, "request_id"}`` with the Messages API's
statuses, so that the official SDKs raise their own classes (``AuthenticationError``,
``NotFoundError``, ``BadRequestError``, ``RateLimitError``, …). An error the upstream answered
passes on as it came: its status, type, message and request id, except a refusal of Citegate's
own key, which is no fault of the caller's key. Citegate's own errors are typed by status.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from fastapi.responses import Response

from app.errors import CitegateError, ErrorCode
from app.upstream.errors import UpstreamError

PREFIX = "/anthropic/"

_TYPE_OF_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",  # a body that arrived too slowly; the SDKs retry a 408
    409: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
# Citegate's statuses that the Messages API does not use, as the ones it would answer.
_STATUS_OF_STATUS = {415: 400, 422: 400, 502: 500, 503: 529}
# What the upstream's failures without an answer of its own are for the caller.
_STATUS_OF_UPSTREAM_CODE = {
    ErrorCode.UPSTREAM_TIMEOUT: 504,
    ErrorCode.UPSTREAM_RATE_LIMITED: 429,
    ErrorCode.UPSTREAM_OVERLOADED: 529,
    ErrorCode.UPSTREAM_REQUEST_TOO_LARGE: 413,
    ErrorCode.UPSTREAM_REJECTED: 400,
}


@dataclass(frozen=True, slots=True)
class MessagesError:
    status: int
    type: str
    message: str
    request_id: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        return {
            "type": "error",
            "error": {"type": self.type, "message": self.message},
            "request_id": self.request_id,
        }


def messages_error(error: CitegateError) -> MessagesError:
    """The Messages API's answer for one of Citegate's errors."""
    headers = {k: v for k, v in (error.headers or {}).items() if k != "WWW-Authenticate"}
    if isinstance(error, UpstreamError):
        return _upstream_error(error, headers)
    status = error.status
    status = _STATUS_OF_STATUS.get(status, status if status in _TYPE_OF_STATUS else 400)
    return MessagesError(status, _TYPE_OF_STATUS[status], _message(error), None, headers)


def _message(error: CitegateError) -> str:
    if error.code is ErrorCode.UNAUTHORIZED:
        return "A valid Citegate API key is required: x-api-key or Authorization: Bearer."
    errors = error.extra.get("errors")
    if error.code is ErrorCode.VALIDATION_ERROR and errors:
        return "; ".join(
            f"{'.'.join(str(part) for part in err['loc'][1:] or err['loc'])}: {err['msg']}"
            for err in errors
        )
    return error.detail


def _upstream_error(error: UpstreamError, headers: dict[str, str]) -> MessagesError:
    if error.request_id is not None:
        headers["request-id"] = error.request_id
    answered = error.answered
    if answered is not None and answered.status not in (401, 403):
        return MessagesError(
            answered.status, answered.type, answered.message, error.request_id, headers
        )
    status = _STATUS_OF_UPSTREAM_CODE.get(error.code, 500)
    return MessagesError(status, _TYPE_OF_STATUS[status], error.detail, error.request_id, headers)


def render_messages_error(error: CitegateError) -> Response:
    """The error as the Messages API answers one."""
    answer = messages_error(error)
    return Response(
        orjson.dumps(answer.body()),
        status_code=answer.status,
        headers=answer.headers,
        media_type="application/json",
    )


def error_event_data(error: CitegateError) -> str:
    """The ``data`` of the ``error`` event that ends a stream which failed."""
    answer = messages_error(error)
    return orjson.dumps(answer.body()).decode()


def problem_error(problem: dict[str, Any]) -> dict[str, Any]:
    """The Messages API's error body for a stored problem (a batch request refused before it
    went upstream)."""
    status = int(problem.get("status") or 400)
    status = _STATUS_OF_STATUS.get(status, status if status in _TYPE_OF_STATUS else 400)
    message = str(problem.get("detail") or "")
    errors = problem.get("errors")
    if errors:
        message = "; ".join(
            f"{'.'.join(str(part) for part in err['loc'])}: {err['msg']}" for err in errors
        )
    return MessagesError(status, _TYPE_OF_STATUS[status], message).body()
