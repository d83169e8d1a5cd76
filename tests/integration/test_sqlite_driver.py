"""SQLite through ``app.db.sqlite``: one trip to aiosqlite's thread per statement, and nothing
SQLAlchemy relies on (rows, row counts, new row ids, errors, transactions) is lost on the way."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, insert, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.engine import create_engine

metadata = MetaData()
things = Table(
    "things",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String, unique=True, nullable=False),
)


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path}/driver.db")
    async with engine.begin() as connection:
        await connection.run_sync(metadata.create_all)
    yield engine
    await engine.dispose()


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every call that goes to aiosqlite's worker thread, by the name of what it runs."""
    seen: list[str] = []
    # aiosqlite leaves this private method unannotated.
    real: Callable[..., Awaitable[Any]] = aiosqlite.Connection._execute

    async def counted(self: aiosqlite.Connection, fn: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(getattr(fn, "__name__", repr(fn)))
        return await real(self, fn, *args, **kwargs)

    monkeypatch.setattr(aiosqlite.Connection, "_execute", counted)
    return seen


async def test_a_statement_is_one_trip_to_the_thread(engine: AsyncEngine, trips: list[str]) -> None:
    async with engine.connect() as connection:
        trips.clear()
        rows = (await connection.execute(select(things.c.id))).all()
        assert rows == []
        assert trips == ["_run"]
    # Giving the connection back (its rollback, then the pool's) ends nothing: no trip.
    assert trips == ["_run"]


async def test_ending_reads_alone_makes_no_trip_and_writes_still_end(
    engine: AsyncEngine, trips: list[str]
) -> None:
    async with engine.connect() as connection:
        await connection.execute(select(things.c.id))
        trips.clear()
        await connection.rollback()  # nothing was written: sqlite3 has no transaction to end
        await connection.execute(select(things.c.id))
        await connection.commit()
        assert trips == ["_run"]
        trips.clear()
        await connection.execute(insert(things).values(name="kept"))
        await connection.commit()
        assert trips == ["_run", "commit"]
        await connection.execute(insert(things).values(name="dropped"))
        await connection.rollback()
        assert trips[-1] == "rollback"
    async with engine.connect() as connection:
        names = (await connection.execute(select(things.c.name))).scalars().all()
        assert names == ["kept"]


async def test_ending_on_a_closed_connection_is_quiet(engine: AsyncEngine) -> None:
    async with engine.connect() as connection:
        raw = await connection.get_raw_connection()
        assert raw.driver_connection is not None and raw.dbapi_connection is not None
        await raw.driver_connection.close()  # aiosqlite's connection, closed underneath
        raw.dbapi_connection.commit()
        raw.dbapi_connection.rollback()
        await connection.invalidate()


async def test_rows_counts_ids_and_transactions_come_through(engine: AsyncEngine) -> None:
    async with engine.begin() as connection:
        first = await connection.execute(insert(things).values(name="a"))
        assert first.inserted_primary_key == (1,)
        many = await connection.execute(insert(things), [{"name": "b"}, {"name": "c"}])
        assert many.rowcount == 2
        changed = await connection.execute(
            update(things).where(things.c.name.in_(["a", "b"])).values(name=things.c.name + "!")
        )
        assert changed.rowcount == 2
    async with engine.connect() as connection:
        await connection.execute(insert(things).values(name="rolled back"))
        await connection.rollback()
        names = (await connection.execute(select(things.c.name).order_by(things.c.id))).scalars()
        assert list(names) == ["a!", "b!", "c"]
        described = await connection.execute(text("SELECT id AS n, name FROM things LIMIT 1"))
        assert list(described.keys()) == ["n", "name"]


async def test_errors_are_sqlalchemys_and_the_connection_goes_on(engine: AsyncEngine) -> None:
    async with engine.connect() as connection:
        await connection.execute(insert(things).values(name="x"))
        await connection.commit()
        with pytest.raises(IntegrityError):
            await connection.execute(insert(things).values(name="x"))
        await connection.rollback()
        count = (await connection.execute(text("SELECT count(*) FROM things"))).scalar_one()
        assert count == 1
