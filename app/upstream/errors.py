"""What the Messages API's failures become for our callers. httpx never leaves this package.

UpstreamError (CitegateError)      every one carries ``upstream_request_id`` when known
├── 503 upstream_rate_limited      upstream 429, after retries; with Retry-After
├── 503 upstream_overloaded        upstream 529, after retries; with Retry-After
├── 504 upstream_timeout           no answer within the read timeout
├── 502 upstream_bad_response      a body that is not a valid Messages response
├── 502 upstream_auth_failed       upstream 401/403: our key is wrong (never echoed)
├── 502 upstream_unavailable       upstream 5xx after retries, or unreachable
├── 422 upstream_rejected          upstream 400: e.g. the prompt is too long for the model
└── 413 upstream_request_too_large upstream 413
"""

from __future__ import annotations

from app.errors import CitegateError


class UpstreamError(CitegateError):
    status = 502
    code = "upstream_unavailable"

    def __init__(
        self,
        detail: str,
        *,
        request_id: str | None = None,
        retry_after: int | None = None,
        status: int | None = None,
        code: str | None = None,
    ) -> None:
        extra: dict[str, object] = {"upstream_request_id": request_id}
        headers = None
        if retry_after is not None:
            extra["retry_after"] = retry_after
            headers = {"Retry-After": str(retry_after)}
        super().__init__(detail, code=code, headers=headers, **extra)
        if status is not None:
            self.status = status
        self.request_id = request_id


def error_for_status(
    status: int, message: str, request_id: str | None, retry_after: int | None
) -> UpstreamError:
    """Our error for an upstream HTTP error status (after any retries)."""
    if status == 429:
        return UpstreamError(
            "The upstream API is rate limiting Citegate; retry later.",
            status=503,
            code="upstream_rate_limited",
            request_id=request_id,
            retry_after=retry_after or 1,
        )
    if status == 529:
        return UpstreamError(
            "The upstream API is overloaded; retry later.",
            status=503,
            code="upstream_overloaded",
            request_id=request_id,
            retry_after=retry_after or 1,
        )
    if status in (401, 403):
        return UpstreamError(
            "The upstream API refused Citegate's credentials.",
            code="upstream_auth_failed",
            request_id=request_id,
        )
    if status == 413:
        return UpstreamError(
            f"The upstream API refused the request as too large: {message}",
            status=413,
            code="upstream_request_too_large",
            request_id=request_id,
        )
    if 400 <= status < 500:
        return UpstreamError(
            f"The upstream API rejected the request: {message}",
            status=422,
            code="upstream_rejected",
            request_id=request_id,
        )
    return UpstreamError(f"The upstream API failed with status {status}.", request_id=request_id)
