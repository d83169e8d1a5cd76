"""Opaque, prefixed, time-ordered ids (``doc_…``): newer ids sort after older ones."""

from __future__ import annotations

import secrets
import time

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
