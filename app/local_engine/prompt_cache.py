"""Prompt-cache accounting that behaves like the upstream's.

Rules:

- A block with ``cache_control`` is a breakpoint; it caches the whole prefix up to and including
  it (tools, system, then messages, in order). A prefix is identified by a running SHA-256 over
  the canonical bytes of its blocks, seeded with the model and whether citations are on.
- A breakpoint whose prefix is under ``min_cacheable_tokens`` caches nothing, silently (the
  upstream's minimum is 1,024 tokens on Sonnet models, more on others).
- At each breakpoint, from the last one back, the cache is looked up at the breakpoint and up to
  20 blocks before it (the upstream's lookback); the longest live prefix found is read:
  ``cache_read_input_tokens``, and its entry's lifetime starts again.
- The tokens from there to the last breakpoint are written: ``cache_creation_input_tokens``,
  split by the TTL of the breakpoint that ends each stretch (5 minutes, or 1 hour with
  ``"ttl": "1h"``), and every breakpoint past the read prefix is remembered.
- ``input_tokens`` is what comes after the last breakpoint (everything when there is none).

The entries live in one bounded LRU per engine (cachetools' ``TLRUCache``: each entry expires
at its own time). ``account`` holds a lock for its whole (short,
synchronous) critical section, so concurrent requests, from the event loop or worker threads,
see each other's writes in some order. The clock is injectable for tests.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cachetools import TLRUCache

from app.local_engine.tokens import PromptUnit
from app.local_engine.wire import CacheCreation, Usage

DEFAULT_MIN_CACHEABLE_TOKENS = 1_024
DEFAULT_PROMPT_CACHE_ENTRIES = 4_096
LOOKBACK_BLOCKS = 20

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class CacheAccount:
    """How a request's input tokens split between the cache and fresh input."""

    input_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    ephemeral_5m_input_tokens: int = 0
    ephemeral_1h_input_tokens: int = 0

    def usage(self, output_tokens: int) -> Usage:
        """The ``usage`` object of a message with these input counts."""
        return Usage(
            input_tokens=self.input_tokens,
            cache_creation_input_tokens=self.cache_creation_input_tokens,
            cache_read_input_tokens=self.cache_read_input_tokens,
            cache_creation=CacheCreation(
                ephemeral_5m_input_tokens=self.ephemeral_5m_input_tokens,
                ephemeral_1h_input_tokens=self.ephemeral_1h_input_tokens,
            ),
            output_tokens=output_tokens,
        )


def prefix_digests(seed: bytes, units: Sequence[PromptUnit]) -> list[bytes]:
    """The digest of every prefix: ``digests[i]`` identifies units ``0..i``."""
    digests: list[bytes] = []
    current = hashlib.sha256(seed).digest()
    for unit in units:
        step = hashlib.sha256(current)
        step.update(len(unit.canonical).to_bytes(8, "big"))
        step.update(unit.canonical)
        current = step.digest()
        digests.append(current)
    return digests


class PromptCache:
    """Remembers cached prefixes and accounts each request's usage against them."""

    def __init__(
        self,
        *,
        clock: Clock = time.monotonic,
        max_entries: int = DEFAULT_PROMPT_CACHE_ENTRIES,
        min_cacheable_tokens: int = DEFAULT_MIN_CACHEABLE_TOKENS,
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._clock = clock
        self.min_cacheable_tokens = min_cacheable_tokens
        # A prefix's digest -> its lifetime in seconds, which each write and hit starts again.
        self._entries: TLRUCache[bytes, float] = TLRUCache(max_entries, _expiry, timer=clock)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            self._entries.expire()
            return len(self._entries)

    def account(self, seed: bytes, units: Sequence[PromptUnit]) -> CacheAccount:
        """Split a request's input tokens into read, written and fresh; remember what it wrote."""
        totals = list(itertools.accumulate(unit.tokens for unit in units))
        total = totals[-1] if totals else 0
        breakpoints = [
            (place, unit.cache_control)
            for place, unit in enumerate(units)
            if unit.cache_control is not None and totals[place] >= self.min_cacheable_tokens
        ]
        if not breakpoints:
            return CacheAccount(input_tokens=total)
        digests = prefix_digests(seed, units)
        with self._lock:
            read_end = self._longest_live_prefix(digests, [place for place, _ in breakpoints])
            written = {"5m": 0, "1h": 0}
            previous = read_end
            for place, control in breakpoints:
                if place <= read_end:
                    continue
                written[control.label] += totals[place] - (totals[previous] if previous >= 0 else 0)
                previous = place
                self._entries[digests[place]] = control.seconds
        return CacheAccount(
            input_tokens=total - totals[breakpoints[-1][0]],
            cache_creation_input_tokens=written["5m"] + written["1h"],
            cache_read_input_tokens=totals[read_end] if read_end >= 0 else 0,
            ephemeral_5m_input_tokens=written["5m"],
            ephemeral_1h_input_tokens=written["1h"],
        )

    def _longest_live_prefix(self, digests: list[bytes], breakpoints: list[int]) -> int:
        # Scanning from the last breakpoint down, the first live entry is the longest prefix.
        for place in reversed(breakpoints):
            for candidate in range(place, max(place - LOOKBACK_BLOCKS, 0) - 1, -1):
                lifetime = self._entries.get(digests[candidate])  # None once expired
                if lifetime is not None:
                    self._entries[digests[candidate]] = lifetime  # a hit refreshes the entry
                    return candidate
        return -1


def _expiry(_: bytes, lifetime: float, now: float) -> float:
    return now + lifetime
