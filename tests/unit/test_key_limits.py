"""Per-key token budget for the day (the request limit is tested over HTTP in tests/e2e)."""

from __future__ import annotations

import pytest

from app.auth.keys import Principal
from app.auth.limits import KeyLimits
from app.errors import RateLimited
from app.observability import Metrics
from app.settings import Settings


async def test_tokens_per_day_refuse_once_spent() -> None:
    limits = KeyLimits(Settings(token_limit_per_day=1000, rate_limit_per_minute=0), Metrics())
    spender, other = Principal("ten_a", "key_a"), Principal("ten_b", "key_b")
    await limits.check_tokens(spender)
    await limits.spend_tokens(spender, 600)
    await limits.check_tokens(spender)
    await limits.spend_tokens(spender, 600)  # an answer may overshoot; the next call may not
    with pytest.raises(RateLimited) as refused:
        await limits.check_tokens(spender)
    assert 1 <= int(refused.value.headers["Retry-After"]) <= 86400  # type: ignore[index]
    await limits.check_tokens(other)


async def test_zero_turns_limits_off() -> None:
    limits = KeyLimits(Settings(token_limit_per_day=0, rate_limit_per_minute=0), Metrics())
    principal = Principal("ten_a", None)
    for _ in range(1000):
        await limits.count_request(principal)
    await limits.spend_tokens(principal, 10**9)
    await limits.check_tokens(principal)
