"""Opaque, prefixed, time-ordered ids (``doc_…``): newer ids sort after older ones; and what a
request may give as one."""

from __future__ import annotations

import secrets
import time
from typing import Annotated

from pydantic import Field

# PostgreSQL text cannot hold NUL: every string that is stored or looked up refuses it here,
# as a validation error, rather than failing in the database.
NO_NUL = r"^[^\x00]*$"
Id = Annotated[str, Field(min_length=1, max_length=100, pattern=NO_NUL)]

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case


def _base32(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        value, digit = divmod(value, 32)
        chars.append(_ALPHABET[digit])
    return "".join(reversed(chars))


def new_id(prefix: str) -> str:
    """``prefix_`` + 10 characters of milliseconds + 16 random characters (80 bits)."""
    return f"{prefix}_{_base32(time.time_ns() // 1_000_000, 10)}{_base32(secrets.randbits(80), 16)}"
