"""`citegate serve` migrates only a database that needs it: one at the newest revision starts
without the migration process (a restart after kill -9 is not slowed by Alembic), one behind is
migrated to the newest before the service answers, on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from alembic import command
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from app.db.engine import create_engine
from app.db.migrations import alembic_config, head_revisions
from tests.conftest import free_port
from tests.e2e.test_shutdown import CitegateProcess

MIGRATING = "Running upgrade"  # Alembic's line for each migration applied
SKIPPED = "the database is at the newest migration: none to apply"


@pytest.fixture
def own_url(database_url: str, tmp_path: Path) -> Iterator[str]:
    """An empty database of the test database's kind, that only this test uses."""
    url = make_url(database_url)
    if url.drivername.startswith("sqlite"):
        yield f"sqlite+aiosqlite:///{tmp_path}/startup.db"
        return
    name = f"{url.database}_startup"  # one per test database: suites side by side never share it
    admin_url = url.set(database="postgres").render_as_string(hide_password=False)

    async def run(statement: str) -> None:
        admin = create_engine(admin_url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
        async with admin.connect() as connection:
            await connection.exec_driver_sql(statement)
        await admin.dispose()

    asyncio.run(run(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    asyncio.run(run(f"CREATE DATABASE {name}"))
    yield url.set(database=name).render_as_string(hide_password=False)
    asyncio.run(run(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


def revisions(url: str) -> set[str]:
    async def read() -> set[str]:
        engine = create_engine(url, poolclass=NullPool)
        async with engine.connect() as connection:
            rows = await connection.execute(text("SELECT version_num FROM alembic_version"))
            found = {row[0] for row in rows}
        await engine.dispose()
        return found

    return asyncio.run(read())


def serve(tmp_path: Path, url: str) -> str:
    """Start `citegate serve` on the database, wait until it is ready, stop it; its output."""
    port = free_port()
    server = CitegateProcess(
        tmp_path, ["serve", "--port", str(port)], {"CITEGATE_DATABASE_URL": url}
    )
    try:
        server.wait_until_healthy(f"http://127.0.0.1:{port}")
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10)
        assert ready.status_code == 200, ready.text
        documents = httpx.get(f"http://127.0.0.1:{port}/v1/documents", timeout=10)
        assert documents.status_code == 200, documents.text  # the schema is there
    finally:
        server.stop()
    return server.output


def test_a_new_database_is_migrated_then_a_restart_skips_the_migrations(
    tmp_path: Path, own_url: str
) -> None:
    first = serve(tmp_path, own_url)
    assert MIGRATING in first and SKIPPED not in first
    assert revisions(own_url) == set(head_revisions())
    again = serve(tmp_path, own_url)
    assert SKIPPED in again
    assert MIGRATING not in again and "alembic" not in again  # no migration process ran


def test_a_database_behind_is_migrated_at_start(tmp_path: Path, own_url: str) -> None:
    config = alembic_config(own_url)
    command.upgrade(config, "head")
    command.downgrade(config, "-1")
    behind = revisions(own_url)
    assert behind and behind != set(head_revisions())
    output = serve(tmp_path, own_url)
    assert MIGRATING in output and SKIPPED not in output
    assert revisions(own_url) == set(head_revisions())
