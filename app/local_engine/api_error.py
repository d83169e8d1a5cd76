"""Errors the local engine answers with, in the upstream's shape:
``{"type": "error", "error": {"type": ..., "message": ...}, "request_id": ...}``."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error response: its HTTP status, the API's error type and the message."""

    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message

    def body(self, request_id: str) -> dict[str, Any]:
        """The JSON body the API sends for this error (also the data of an ``error`` event)."""
        return {
            "type": "error",
            "error": {"type": self.error_type, "message": self.message},
            "request_id": request_id,
        }


class InvalidRequestError(ApiError):
    """400 ``invalid_request_error``: the request is malformed or breaks a rule of the API."""

    def __init__(self, message: str) -> None:
        super().__init__(400, "invalid_request_error", message)
