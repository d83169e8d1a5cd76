"""Opaque list cursors: the last key of a page, base64url-encoded, and signed.

A service pages with the unsigned form (``encode_cursor``, ``decode_cursor``); the API signs
each cursor it hands out with the server's secret, bound to the list it pages (tenant, route
and path), and takes back only what it signed (``PageCursor``). The key inside is the last
row of a page the client was shown, so the signature hides nothing: it makes a cursor that
was altered, forged, made by another server or for another list a 422 ``invalid_cursor``
rather than another page.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
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


_TAG_BYTES = 16  # of HMAC-SHA256: 128 bits, as much as a forger would have to guess
_SEPARATOR = "."  # not in base64url, so never in an unsigned cursor


class PageCursor:
    """The ``cursor`` a list request gave, once its signature is checked (``value``, the
    unsigned cursor; None when none was given), and the signer of the next page's. ``scope``
    names the list: a cursor is good for that list alone."""

    __slots__ = ("_key", "_scope", "value")

    def __init__(self, key: bytes, scope: str, given: str | None) -> None:
        self._key = key
        self._scope = scope
        self.value = None if given is None else self._verified(given)

    def next(self, cursor: str | None) -> str | None:
        """The cursor of the next page, signed; None on the last page."""
        if cursor is None:
            return None
        return f"{cursor}{_SEPARATOR}{self._tag(cursor)}"

    def _verified(self, signed: str) -> str:
        cursor, separator, tag = signed.rpartition(_SEPARATOR)
        expected = self._tag(cursor)
        if not separator or not hmac.compare_digest(_bytes(tag), expected.encode()):
            raise InvalidRequest("The cursor is not valid.", code=ErrorCode.INVALID_CURSOR)
        return cursor

    def _tag(self, cursor: str) -> str:
        message = _bytes(f"citegate-cursor\x00{self._scope}\x00{cursor}")
        mac = hmac.digest(self._key, message, hashlib.sha256)[:_TAG_BYTES]
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def _bytes(text: str) -> bytes:
    # Whatever a client sent: a lone surrogate encodes too (and matches no tag).
    return text.encode("utf-8", "surrogatepass")


def paginate(rows: Sequence[T], limit: int, key: Callable[[T], object]) -> Page[T]:
    """A page from ``limit + 1`` fetched rows: the extra row only tells that there is more."""
    if len(rows) > limit:
        return Page(list(rows[:limit]), encode_cursor(str(key(rows[limit - 1]))))
    return Page(list(rows), None)
