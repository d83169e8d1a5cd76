"""Opaque list cursors: the last key of a page, base64url-encoded."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from app.errors import InvalidRequest

T = TypeVar("T")

DEFAULT_LIMIT = 20
MAX_LIMIT = 100


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None


_MARK = "c1:"


def encode_cursor(key: str) -> str:
    return base64.urlsafe_b64encode((_MARK + key).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    """The key inside a cursor; a cursor that we did not make is a 422 ``invalid_cursor``."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        decoded = base64.b64decode(padded, altchars=b"-_", validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise InvalidRequest("The cursor is not valid.", code="invalid_cursor") from exc
    if not decoded.startswith(_MARK) or "\x00" in decoded:
        raise InvalidRequest("The cursor is not valid.", code="invalid_cursor")
    return decoded.removeprefix(_MARK)


def paginate(rows: Sequence[T], limit: int, key: Callable[[T], object]) -> Page[T]:
    """A page from ``limit + 1`` fetched rows: the extra row only tells that there is more."""
    if len(rows) > limit:
        return Page(list(rows[:limit]), encode_cursor(str(key(rows[limit - 1]))))
    return Page(list(rows), None)
