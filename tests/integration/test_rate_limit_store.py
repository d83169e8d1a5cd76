"""Per-key limits whose Redis cannot answer: they let requests through, count and log it once,
pause before asking again, and apply again once Redis answers. Real sockets on 127.0.0.1: a
closed port, a listener that never answers, and a relay to the Redis on 6379."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest

from app.auth.keys import Principal
from app.auth.limits import STORE_RETRY_SECONDS, KeyLimits
from app.errors import RateLimited
from app.observability import Metrics
from app.settings import Settings
from tests.conftest import delete_rate_limit_counters, free_port


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def counted(metrics: Metrics, name: str, label: str) -> dict[str, float]:
    """The samples of one labelled counter, by label value."""
    return {
        sample.labels[label]: sample.value
        for family in metrics.registry.collect()
        if family.name == name
        for sample in family.samples
        if sample.name.endswith("_total")
    }


def store_errors(metrics: Metrics) -> dict[str, float]:
    return counted(metrics, "citegate_rate_limit_store_errors", "operation")


def failed_open(metrics: Metrics) -> dict[str, float]:
    return counted(metrics, "citegate_rate_limit_fail_open", "limit")


def limits_on(port: int, metrics: Metrics, clock: Clock) -> KeyLimits:
    settings = Settings(
        redis_url=f"redis://127.0.0.1:{port}/0", rate_limit_per_minute=1, token_limit_per_day=1
    )
    return KeyLimits(settings, metrics, clock)


@pytest.fixture
def principal() -> Iterator[Principal]:
    tenant = f"ten_store{secrets.token_hex(6)}"
    yield Principal(tenant, "key_store")
    delete_rate_limit_counters(tenant)


@asynccontextmanager
async def listening(port: int, relay_to: int | None) -> AsyncIterator[None]:
    """A TCP listener on 127.0.0.1:port that relays to Redis, or that never answers."""
    handlers: set[asyncio.Task[None]] = set()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        if relay_to is None:
            await reader.read()  # silent until the client hangs up
            writer.close()
            return
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", relay_to)
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    try:
        yield
    finally:
        server.close()
        await server.wait_closed()
        if handlers:
            await asyncio.wait(handlers, timeout=10)


async def test_a_store_that_refuses_connections_lets_requests_through(
    principal: Principal, caplog: pytest.LogCaptureFixture
) -> None:
    metrics, clock = Metrics(), Clock()
    limits = limits_on(free_port(), metrics, clock)  # nothing listens there
    try:
        for _ in range(3):
            await limits.count_request(principal)  # the limit is 1: a counted second is refused
        await limits.check_tokens(principal)
        await limits.spend_tokens(principal, 500)
        await limits.check_tokens(principal)
        # One failed call; until the pause is over the store is not asked again.
        assert store_errors(metrics) == {"count_request": 1}
        assert failed_open(metrics) == {"requests": 3, "tokens": 3}
        assert await limits.store_state() == "unavailable"
        assert store_errors(metrics) == {"count_request": 1}

        clock.now += STORE_RETRY_SECONDS
        assert await limits.store_state() == "unavailable"
        assert store_errors(metrics) == {"count_request": 1, "ping": 1}
    finally:
        limits.close()
    warnings = [r for r in caplog.records if r.name == "app.auth.limits"]
    assert len(warnings) == 1  # a change of state, not a line per call
    assert warnings[0].levelno == logging.WARNING
    assert "unavailable" in warnings[0].getMessage()


async def test_a_store_that_does_not_answer_times_out_and_lets_requests_through(
    principal: Principal, caplog: pytest.LogCaptureFixture
) -> None:
    metrics, clock = Metrics(), Clock()
    port = free_port()
    async with listening(port, relay_to=None):
        limits = limits_on(port, metrics, clock)
        try:
            await limits.count_request(principal)
            await limits.count_request(principal)
        finally:
            limits.close()
    assert store_errors(metrics) == {"count_request": 1}
    assert failed_open(metrics) == {"requests": 2}
    (warning,) = [r for r in caplog.records if r.name == "app.auth.limits"]
    assert "TimeoutError" in warning.getMessage()


async def test_limits_apply_again_once_the_store_answers(
    principal: Principal, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="app.auth.limits")
    metrics, clock = Metrics(), Clock()
    port = free_port()
    limits = limits_on(port, metrics, clock)
    try:
        await limits.count_request(principal)
        assert await limits.store_state() == "unavailable"
        async with listening(port, relay_to=6379):  # Redis is back, at the same address
            assert await limits.store_state() == "unavailable"  # still pausing
            clock.now += STORE_RETRY_SECONDS
            assert await limits.store_state() == "ok"
            await limits.count_request(principal)
            with pytest.raises(RateLimited) as refused:
                await limits.count_request(principal)
            assert 1 <= int(refused.value.headers["Retry-After"]) <= 60  # type: ignore[index]
            limits.close()  # hang up before the relay stops
    finally:
        limits.close()
    assert failed_open(metrics) == {"requests": 1}
    messages = [r.getMessage() for r in caplog.records if r.name == "app.auth.limits"]
    assert len(messages) == 2
    assert "unavailable" in messages[0] and "answers again" in messages[1]
