"""Per-key limits: requests per minute and upstream tokens per day, with the ``limits`` library.

Counters live in the process, or in Redis when ``CITEGATE_REDIS_URL`` is set so that replicas
share them. Fixed windows: cheap, and the reset time gives an honest ``Retry-After``.

A limit is a guard, not the service: when Redis cannot be reached or errors, requests are let
through uncounted (fail open) rather than refused or turned into a 500. One failure marks the
store unavailable for ``STORE_RETRY_SECONDS``, during which it is not asked at all, so a dead
Redis costs a request nothing; the first call after that tries it again. The change of state is
logged (not every call), counted in ``citegate_rate_limit_store_errors_total`` and shown in
``/readyz``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal, TypeVar
from urllib.parse import urlsplit, urlunsplit

from limits import RateLimitItem, RateLimitItemPerDay, RateLimitItemPerMinute
from limits.aio.storage import Storage
from limits.aio.strategies import FixedWindowRateLimiter
from limits.errors import StorageError
from limits.storage import storage_from_string

from app.auth.keys import Principal
from app.errors import RateLimited
from app.observability import Metrics
from app.settings import Settings

if TYPE_CHECKING:
    import coredis

log = logging.getLogger(__name__)

# Redis answers on a LAN in well under a millisecond: a store slower than this is as good as
# down for a limiter, and each request would otherwise wait for it. The URL's own
# ?connect_timeout=…&stream_timeout=… win over these.
STORE_CONNECT_TIMEOUT = 0.25
STORE_COMMAND_TIMEOUT = 0.25
STORE_RETRY_SECONDS = 5.0

# What a store that cannot answer raises: Redis errors (wrapped by ``limits``), timeouts and
# socket errors.
_STORE_ERRORS = (StorageError, TimeoutError, OSError)

StoreState = Literal["memory", "ok", "unavailable"]
T = TypeVar("T")


class KeyLimits:
    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._metrics = metrics
        self._clock = clock
        self._pool: coredis.ConnectionPool | None = None
        self._location = "memory"
        if settings.redis_url:
            # Imported only for a Redis store: coredis (with pympler and numpy) is large.
            import coredis
            from coredis.retry import NoRetryPolicy

            self._location = _without_secrets(settings.redis_url)
            # Our own pool, so that shutdown can close its connections.
            self._pool = coredis.ConnectionPool.from_url(
                settings.redis_url,
                connect_timeout=STORE_CONNECT_TIMEOUT,
                stream_timeout=STORE_COMMAND_TIMEOUT,
            )
            storage = storage_from_string(
                f"async+{settings.redis_url}",
                key_prefix="citegate",
                wrap_exceptions=True,
                connection_pool=self._pool,  # type: ignore[arg-type]  # documented option
                # A retry would double the wait on a dead store; the next request retries.
                retry_policy=NoRetryPolicy(),  # type: ignore[arg-type]  # passed to coredis
            )
        else:
            storage = storage_from_string("async+memory://")
        assert isinstance(storage, Storage)
        self._storage = storage
        self._limiter = FixedWindowRateLimiter(storage)
        self._available = True
        self._retry_at = 0.0
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

    async def store_state(self) -> StoreState:
        """Where the counters live and whether that store answers now (a PING to Redis)."""
        if self._pool is None:
            return "memory"

        async def ping() -> bool:
            if not await self._storage.check():
                raise StorageError(ConnectionError("no answer to PING"))
            return True

        return "ok" if await self._ask("ping", ping) else "unavailable"

    async def count_request(self, principal: Principal) -> None:
        """Count one request; refuse it with 429 when the key's minute is used up."""
        item = self._requests
        if item is None:
            return
        allowed = await self._ask(
            "count_request", lambda: self._limiter.hit(item, *_ids(principal))
        )
        if allowed is None:
            self._metrics.rate_limit_fail_open.labels("requests").inc()
        elif not allowed:
            raise RateLimited(
                f"More than {item.amount} requests in a minute with this key.",
                await self._retry_after(item, principal),
            )

    async def check_tokens(self, principal: Principal) -> None:
        """Refuse an upstream call with 429 when the key's tokens for the day are spent."""
        item = self._tokens
        if item is None:
            return
        allowed = await self._ask(
            "check_tokens", lambda: self._limiter.test(item, *_ids(principal))
        )
        if allowed is None:
            self._metrics.rate_limit_fail_open.labels("tokens").inc()
        elif not allowed:
            raise RateLimited(
                f"This key has used its {item.amount} upstream tokens for the day.",
                await self._retry_after(item, principal),
            )

    async def spend_tokens(self, principal: Principal, tokens: int) -> None:
        """Count tokens an answer used; when the store cannot count them they go uncounted."""
        item = self._tokens
        if item is None or tokens <= 0:
            return
        spent = await self._ask(
            "spend_tokens", lambda: self._limiter.hit(item, *_ids(principal), cost=tokens)
        )
        if spent is None:
            self._metrics.rate_limit_fail_open.labels("tokens").inc()

    async def _retry_after(self, item: RateLimitItem, principal: Principal) -> int:
        stats = await self._ask(
            "retry_after", lambda: self._limiter.get_window_stats(item, *_ids(principal))
        )
        if stats is None:  # refused a moment ago, no reset time now: the whole window
            return item.get_expiry()
        return max(1, math.ceil(stats.reset_time - time.time()))

    async def _ask(self, operation: str, call: Callable[[], Awaitable[T]]) -> T | None:
        """The store's answer, or None when it cannot give one now."""
        if not self._available and self._clock() < self._retry_at:
            return None
        try:
            answer = await call()
        except _STORE_ERRORS as exc:
            self._metrics.rate_limit_store_errors.labels(operation).inc()
            self._retry_at = self._clock() + STORE_RETRY_SECONDS
            if self._available:
                self._available = False
                log.warning(
                    "rate-limit store %s unavailable (%s: %s): requests are not rate limited "
                    "until it answers; next try in %.0f s",
                    self._location,
                    type(_cause(exc)).__name__,
                    _cause(exc),
                    STORE_RETRY_SECONDS,
                )
            return None
        if not self._available:
            self._available = True
            log.info("rate-limit store %s answers again: rate limits apply", self._location)
        return answer


def _cause(exc: BaseException) -> BaseException:
    """The store's own error inside the one ``limits`` wraps it in."""
    if isinstance(exc, StorageError):
        return exc.storage_error
    return exc


def _without_secrets(url: str) -> str:
    """The Redis URL to name in logs: no user or password, no query string."""
    parts = urlsplit(url)
    _, at, host = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=("***@" if at else "") + host, query=""))


def _ids(principal: Principal) -> tuple[str, str]:
    return principal.tenant_id, principal.key_id or "open"
