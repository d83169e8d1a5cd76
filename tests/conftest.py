"""Shared fixtures: a database (SQLite by default, PostgreSQL when CITEGATE_TEST_DATABASE_URL
says so), the schema built by the real migrations, and the app served by uvicorn on loopback."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Self

import coredis
import httpx
import hypothesis
import pytest
import uvicorn
from pydantic import SecretStr
from sqlalchemy import delete, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool
from starlette.types import ASGIApp

from app.db.engine import create_engine
from app.db.migrations import upgrade_to_head
from app.db.models import (
    DEFAULT_TENANT_ID,
    Answer,
    AnswerBatch,
    AnswerBatchRequest,
    ApiKey,
    AuditEvent,
    AuthVersion,
    Collection,
    Conversation,
    Document,
    LocalEngineBatch,
    LocalEngineResult,
    Tenant,
    UsageRecord,
)
from app.http_protocol import HeaderTimeoutProtocol
from app.main import create_app
from app.settings import Settings
from tests.fake_upstream import FakeUpstream

# No per-example deadline: timings on a loaded CI machine say nothing about correctness.
hypothesis.settings.register_profile("citegate", deadline=None)
hypothesis.settings.load_profile("citegate")

REDIS_URL = "redis://127.0.0.1:6379/0"


def _run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


async def _reset_postgres(url: str) -> None:
    engine = create_engine(url, poolclass=NullPool)
    async with engine.begin() as connection:
        await connection.execute(text("DROP SCHEMA public CASCADE"))
        await connection.execute(text("CREATE SCHEMA public"))
    await engine.dispose()


def fresh_database(url: str) -> None:
    """Drop everything in the database the URL names (a new file for SQLite)."""
    parsed = make_url(url)
    if parsed.drivername.startswith("sqlite"):
        if parsed.database:
            for suffix in ("", "-wal", "-shm"):
                Path(parsed.database + suffix).unlink(missing_ok=True)
    else:
        _run(_reset_postgres(url))


@pytest.fixture(scope="session")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = os.environ.get("CITEGATE_TEST_DATABASE_URL") or (
        f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('db') / 'citegate.db'}"
    )
    fresh_database(url)
    upgrade_to_head(url)
    return url


@pytest.fixture(scope="session")
def settings(database_url: str) -> Settings:
    # recheck_seconds=0: tests make, revoke and delete keys behind the served app's back and
    # expect its next request to see it. test_recheck.py and test_keys.py test rechecking.
    # batch_poller=False: apps on other upstreams share the database; test_batches.py polls.
    # ocr="off": PDFs without text stay so (OCR takes seconds a page); the OCR tests serve
    # apps of their own with it on.
    return Settings(
        database_url=database_url,
        anthropic_api_key=None,
        recheck_seconds=0,
        batch_poller=False,
        ocr="off",
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Served:
    """An ASGI app served by uvicorn in a thread, on a real loopback socket."""

    def __init__(self, app: ASGIApp) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        # The protocol `citegate serve` serves with; an app whose lifespan sets no header
        # timeout is served as uvicorn's own httptools protocol serves it.
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            http=HeaderTimeoutProtocol,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


class ServedApp(Served):
    """Citegate itself, served."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(create_app(settings))


@pytest.fixture(scope="session")
def fake() -> Iterator[FakeUpstream]:
    """A fake Messages API on 127.0.0.1; each test scripts its replies with ``fake.reset``."""
    upstream = FakeUpstream()
    with Served(upstream.app) as served:
        upstream.base_url = served.base_url
        yield upstream


def behind(settings: Settings, fake: FakeUpstream, **update: object) -> ServedApp:
    """Citegate with an API key, talking to the fake upstream."""
    update = {
        "anthropic_api_key": SecretStr("sk-test"),
        "anthropic_base_url": fake.base_url,
    } | update
    return ServedApp(settings.model_copy(update=update))


@pytest.fixture(scope="session")
def served(settings: Settings) -> Iterator[Served]:
    with ServedApp(settings) as app:
        yield app


async def _delete_everything(url: str) -> None:
    engine = create_engine(url, poolclass=NullPool)
    async with engine.begin() as connection:
        await connection.execute(delete(AnswerBatchRequest))
        await connection.execute(delete(Answer))
        await connection.execute(delete(AnswerBatch))
        await connection.execute(delete(LocalEngineResult))
        await connection.execute(delete(LocalEngineBatch))
        await connection.execute(delete(Conversation))
        await connection.execute(delete(Collection))
        await connection.execute(delete(Document))  # blobs and chunks go by cascade
        await connection.execute(delete(ApiKey))
        await connection.execute(delete(AuditEvent))
        await connection.execute(delete(UsageRecord))
        # As every change of keys does: the served apps read their keys again.
        await connection.execute(update(AuthVersion).values(version=AuthVersion.version + 1))
        await connection.execute(delete(Tenant).where(Tenant.id != DEFAULT_TENANT_ID))
    await engine.dispose()


@pytest.fixture
def client(served: Served, database_url: str) -> Iterator[httpx.Client]:
    """An HTTP client of the served app; every test starts with no data and no API key."""
    _run(_delete_everything(database_url))
    with httpx.Client(base_url=served.base_url, timeout=60) as http:
        yield http


DOCUMENT_TABLES = ("documents", "document_blobs", "document_chunks")


def count_rows(database_url: str, tables: tuple[str, ...] = DOCUMENT_TABLES) -> dict[str, int]:
    """Rows in each table (by default those that hold documents), to prove nothing was stored."""

    async def count() -> dict[str, int]:
        engine = create_engine(database_url, poolclass=NullPool)
        async with engine.connect() as connection:
            counts = {
                table: (
                    await connection.execute(text(f"SELECT count(*) FROM {table}"))
                ).scalar_one()
                for table in tables
            }
        await engine.dispose()
        return counts

    return asyncio.run(count())


def delete_rate_limit_counters(identifier: str) -> None:
    """Delete the Redis counters of the tenant or key this id names: tests share one Redis."""

    async def delete() -> None:
        redis = coredis.Redis.from_url(REDIS_URL)
        try:
            names: list[str | bytes] = [
                n async for n in redis.scan_iter(match=f"citegate:LIMITER/*{identifier}/*")
            ]
            if names:
                await redis.delete(names)
        finally:
            redis.connection_pool.disconnect()

    asyncio.run(delete())
