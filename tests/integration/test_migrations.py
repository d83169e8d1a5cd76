"""The schema comes only from migrations, and they agree with the models, on both databases."""

from __future__ import annotations

import asyncio

import pytest
from alembic import command
from sqlalchemy import inspect
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from app.db.engine import create_engine
from app.db.migrations import alembic_config
from app.db.models import Base
from app.search.index import is_index_object
from tests.conftest import fresh_database


@pytest.fixture
def scratch_url(database_url: str, tmp_path: object) -> str:
    """A database of the same kind as the test database, that only this test uses."""
    url = make_url(database_url)
    if url.drivername.startswith("sqlite"):
        return f"sqlite+aiosqlite:///{tmp_path}/migrations.db"
    name = "citegate_migrations_test"

    async def recreate() -> None:
        admin = create_engine(
            url.set(database="postgres").render_as_string(hide_password=False),
            poolclass=NullPool,
            isolation_level="AUTOCOMMIT",
        )
        async with admin.connect() as connection:
            await connection.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            await connection.exec_driver_sql(f"CREATE DATABASE {name}")
        await admin.dispose()

    asyncio.run(recreate())
    return url.set(database=name).render_as_string(hide_password=False)


def _tables(url: str) -> set[str]:
    async def read() -> set[str]:
        engine = create_engine(url, poolclass=NullPool)
        async with engine.connect() as connection:
            names = await connection.run_sync(lambda c: inspect(c).get_table_names())
        await engine.dispose()
        # The search index's own tables (FTS5), which the models do not describe.
        return {name for name in names if not is_index_object(name, "table")}

    return asyncio.run(read())


def test_upgrade_downgrade_upgrade_and_models_agree(scratch_url: str) -> None:
    fresh_database(scratch_url)
    config = alembic_config(scratch_url)
    command.upgrade(config, "head")
    assert _tables(scratch_url) == set(Base.metadata.tables) | {"alembic_version"}
    command.check(config)  # raises when the models and the migrations disagree
    command.downgrade(config, "base")
    assert _tables(scratch_url) == {"alembic_version"}
    command.upgrade(config, "head")
    command.check(config)
    assert _tables(scratch_url) == set(Base.metadata.tables) | {"alembic_version"}


def test_every_tenant_table_has_a_tenant_id() -> None:
    for name, table in Base.metadata.tables.items():
        if name != "tenants":
            assert "tenant_id" in table.columns, name
