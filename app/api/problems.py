"""OpenAPI declarations of the problem+json answers a route can give."""

from __future__ import annotations

from typing import Any

from app.errors import PROBLEM_MEDIA_TYPE

_PROBLEM = {"content": {PROBLEM_MEDIA_TYPE: {}}, "description": "Problem document"}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {status: _PROBLEM for status in statuses}
