"""Per-key limits: requests per minute and upstream tokens per day, with the ``limits`` library.

Counters live in the process, or in Redis when ``CITEGATE_REDIS_URL`` is set so that replicas
share them. Fixed windows: cheap, and the reset time gives an honest ``Retry-After``.
"""

from __future__ import annotations

import math
import time

import coredis
from limits import RateLimitItem, RateLimitItemPerDay, RateLimitItemPerMinute
from limits.aio.storage import Storage
from limits.aio.strategies import FixedWindowRateLimiter
from limits.storage import storage_from_string

from app.auth.keys import Principal
from app.errors import RateLimited
from app.settings import Settings


class KeyLimits:
    def __init__(self, settings: Settings) -> None:
        self._pool: coredis.ConnectionPool | None = None
        if settings.redis_url:
            # Our own pool, so that shutdown can close its connections.
            self._pool = coredis.ConnectionPool.from_url(settings.redis_url)
            storage = storage_from_string(
                f"async+{settings.redis_url}",
                key_prefix="citegate",
                connection_pool=self._pool,  # type: ignore[arg-type]  # documented option
            )
        else:
            storage = storage_from_string("async+memory://")
        assert isinstance(storage, Storage)
        self._limiter = FixedWindowRateLimiter(storage)
        self._requests = (
            RateLimitItemPerMinute(settings.rate_limit_per_minute)
            if settings.rate_limit_per_minute
            else None
        )
        self._tokens = (
            RateLimitItemPerDay(settings.token_limit_per_day)
            if settings.token_limit_per_day
            else None
        )

    def close(self) -> None:
        if self._pool is not None:
            self._pool.disconnect()

    async def count_request(self, principal: Principal) -> None:
        """Count one request; refuse it with 429 when the key's minute is used up."""
        if self._requests and not await self._limiter.hit(self._requests, *_ids(principal)):
            raise RateLimited(
                f"More than {self._requests.amount} requests in a minute with this key.",
                await self._retry_after(self._requests, principal),
            )

    async def check_tokens(self, principal: Principal) -> None:
        """Refuse an upstream call with 429 when the key's tokens for the day are spent."""
        if self._tokens and not await self._limiter.test(self._tokens, *_ids(principal)):
            raise RateLimited(
                f"This key has used its {self._tokens.amount} upstream tokens for the day.",
                await self._retry_after(self._tokens, principal),
            )

    async def spend_tokens(self, principal: Principal, tokens: int) -> None:
        if self._tokens and tokens > 0:
            await self._limiter.hit(self._tokens, *_ids(principal), cost=tokens)

    async def _retry_after(self, item: RateLimitItem, principal: Principal) -> int:
        stats = await self._limiter.get_window_stats(item, *_ids(principal))
        return max(1, math.ceil(stats.reset_time - time.time()))


def _ids(principal: Principal) -> tuple[str, str]:
    return principal.tenant_id, principal.key_id or "open"
