"""Errors in OpenAI's shape, for the OpenAI-compatible routes.

``{"error": {"message", "type", "param", "code"}}`` with the statuses OpenAI gives, so that
the official SDKs raise their own classes (``AuthenticationError``, ``NotFoundError``,
``BadRequestError``, ``RateLimitError``, …). ``code`` is Citegate's stable code (OpenAI's own
``invalid_api_key`` for a refused key); ``param`` names the parameter at fault when one is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from fastapi.responses import Response

from app.errors import CitegateError, ErrorCode
from app.upstream.errors import UpstreamError

PREFIX = "/openai/"

_TYPE_OF_STATUS = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    408: "timeout_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    429: "requests",
    500: "server_error",
    502: "server_error",
    503: "server_error",
    504: "timeout_error",
}
# Citegate's statuses that OpenAI does not give for the same fault.
_STATUS_OF_STATUS = {415: 400, 422: 400}
_STATUS_OF_UPSTREAM_STATUS = {529: 503}
_INVALID_API_KEY = "invalid_api_key"  # OpenAI's own code for a refused key


@dataclass(frozen=True, slots=True)
class OpenAIError:
    status: int
    type: str
    message: str
    param: str | None
    openai_code: str | None  # the body's ``code``
    headers: dict[str, str] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.openai_code,
            }
        }


def openai_error(error: CitegateError) -> OpenAIError:
    """OpenAI's answer for one of Citegate's errors."""
    headers = {k: v for k, v in (error.headers or {}).items() if k != "WWW-Authenticate"}
    if isinstance(error, UpstreamError):
        return _upstream_error(error, headers)
    status = error.status
    status = _STATUS_OF_STATUS.get(status, status if status in _TYPE_OF_STATUS else 400)
    shown_code = str(error.code)
    message = error.detail
    param = error.extra.get("param")
    if error.code is ErrorCode.UNAUTHORIZED:
        shown_code = _INVALID_API_KEY
        message = "A valid Citegate API key is required: Authorization: Bearer <key>."
    errors = error.extra.get("errors")
    if error.code is ErrorCode.VALIDATION_ERROR and errors:
        param = param or _param_of(errors[0]["loc"])
        message = "; ".join(f"{_param_of(err['loc'])}: {err['msg']}" for err in errors)
    return OpenAIError(status, _TYPE_OF_STATUS[status], message, param, shown_code, headers)


def _param_of(loc: Any) -> str:
    """A validation error's location as OpenAI names a parameter: ``messages[0].content``."""
    parts = list(loc)[1:] if loc and loc[0] in ("body", "query", "path") else list(loc)
    name = ""
    for part in parts:
        if isinstance(part, int):
            name += f"[{part}]"
        else:
            name += f".{part}" if name else str(part)
    return name or "body"


def _upstream_error(error: UpstreamError, headers: dict[str, str]) -> OpenAIError:
    if error.request_id is not None:
        headers["x-request-id"] = error.request_id
    answered = error.answered
    if answered is not None and answered.status not in (401, 403):
        status = _STATUS_OF_UPSTREAM_STATUS.get(answered.status, answered.status)
        kind = _TYPE_OF_STATUS.get(status, "invalid_request_error" if status < 500 else "")
        return OpenAIError(
            status, kind or "server_error", answered.message, None, answered.type, headers
        )
    status = error.status
    return OpenAIError(
        status, _TYPE_OF_STATUS.get(status, "server_error"), error.detail, None, str(error.code)
    )


def render_openai_error(error: CitegateError) -> Response:
    """The error as OpenAI answers one."""
    answer = openai_error(error)
    return Response(
        orjson.dumps(answer.body()),
        status_code=answer.status,
        headers=answer.headers,
        media_type="application/json",
    )


def unsupported(param: str, message: str) -> CitegateError:
    """A parameter Citegate does not take, or a value of it Claude cannot honour."""
    return CitegateError(message, code=ErrorCode.UNSUPPORTED_PARAMETER, param=param)


def invalid(param: str, message: str) -> CitegateError:
    """A parameter whose value is not valid."""
    return CitegateError(message, code=ErrorCode.INVALID_PARAMETER, param=param)
