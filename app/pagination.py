"""Opaque list cursors: the last key of a page, base64url-encoded."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from app.errors import ErrorCode, InvalidRequest

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
    return _decode(cursor, lambda _: True)


# Integer keys are row indexes (chunk_index): PostgreSQL's integer, so a forged cursor with a
# huge number is refused here rather than failing in the database.
_MAX_INDEX = 2**31 - 1


def decode_index_cursor(cursor: str) -> int:
    """The integer key inside a cursor made by ``encode_cursor(str(index))``; else 422
    ``invalid_cursor``."""
    return int(_decode(cursor, _is_index))


def _is_index(key: str) -> bool:
    # isdigit alone accepts "²" and other digits that int() refuses.
    return key.isascii() and key.isdigit() and len(key) <= 10 and int(key) <= _MAX_INDEX


def _decode(cursor: str, acceptable: Callable[[str], bool]) -> str:
    key = _key_of(cursor)
    if key is None or not acceptable(key):
        raise InvalidRequest("The cursor is not valid.", code=ErrorCode.INVALID_CURSOR)
    return key


def _key_of(cursor: str) -> str | None:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        decoded = base64.b64decode(padded, altchars=b"-_", validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    if not decoded.startswith(_MARK) or "\x00" in decoded:
        return None
    return decoded.removeprefix(_MARK)


def paginate(rows: Sequence[T], limit: int, key: Callable[[T], object]) -> Page[T]:
    """A page from ``limit + 1`` fetched rows: the extra row only tells that there is more."""
    if len(rows) > limit:
        return Page(list(rows[:limit]), encode_cursor(str(key(rows[limit - 1]))))
    return Page(list(rows), None)
