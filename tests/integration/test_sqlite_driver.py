"""SQLite through ``app.db.sqlite``: one trip to aiosqlite's thread per statement, and nothing
SQLAlchemy relies on (rows, row counts, new row ids, errors, transactions) is lost on the way.
The last two tests fence the private parts of SQLAlchemy and aiosqlite that the cursor stands in
for: they say what moved when a release moves it."""

from __future__ import annotations

import importlib
import inspect
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
import sqlalchemy
from sqlalchemy import (
    Column,
    Integer,
    MetaData,
    String,
    Table,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import DeclarativeBase

from app.db.engine import RowInserter, create_engine
from app.db.sqlite import _Connection, _OneTripCursor

metadata = MetaData()
things = Table(
    "things",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String, unique=True, nullable=False),
)


class _Base(DeclarativeBase):
    metadata = metadata


class Thing(_Base):
    __table__ = things


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


async def test_in_autocommit_a_write_is_one_trip_and_is_committed(
    engine: AsyncEngine, trips: list[str]
) -> None:
    await RowInserter(engine, Thing).insert({"id": 1, "name": "stored"})
    assert trips == ["_run"]  # the insert and its commit, in one trip
    async with engine.connect() as connection:
        raw = await connection.get_raw_connection()
        assert not raw.driver_connection._connection.in_transaction  # type: ignore[union-attr]
        names = (await connection.execute(select(things.c.name))).scalars().all()
        assert names == ["stored"]


async def test_in_autocommit_a_failed_write_leaves_nothing_open(
    engine: AsyncEngine, trips: list[str]
) -> None:
    inserter = RowInserter(engine, Thing)
    await inserter.insert({"id": 1, "name": "x"})
    trips.clear()
    with pytest.raises(IntegrityError):  # fails on the thread, which rolls back there
        await inserter.insert({"id": 2, "name": "x"})
    assert trips == ["_run"]
    # Out of autocommit again: the next transaction is the caller's, whole.
    async with engine.connect() as connection:
        trips.clear()
        await connection.execute(insert(things).values(name="a"))
        await connection.execute(insert(things).values(name="b"))
        assert trips == ["_run", "_run"]
        await connection.rollback()
        names = (await connection.execute(select(things.c.name))).scalars().all()
        assert names == ["x"]


# What app.db.sqlite takes from SQLAlchemy's aiosqlite adapter and from aiosqlite beyond their
# documented API: (module, object, member or None for the object itself).
PRIVATE_PARTS = [
    ("sqlalchemy.util.concurrency", "await_", None),
    ("sqlalchemy.util", "EMPTY_DICT", None),
    ("sqlalchemy.connectors.asyncio", "AsyncAdapt_dbapi_connection", "_handle_exception"),
    ("sqlalchemy.dialects.sqlite.aiosqlite", "AsyncAdapt_aiosqlite_dbapi", "connect"),
    ("sqlalchemy.dialects.sqlite.aiosqlite", "AsyncAdapt_aiosqlite_connection", "_cursor_cls"),
    ("sqlalchemy.dialects.sqlite.aiosqlite", "AsyncAdapt_aiosqlite_connection", "commit"),
    ("sqlalchemy.dialects.sqlite.aiosqlite", "AsyncAdapt_aiosqlite_connection", "rollback"),
    ("sqlalchemy.dialects.sqlite.aiosqlite", "AsyncAdapt_aiosqlite_cursor", "execute"),
    ("sqlalchemy.dialects.sqlite.aiosqlite", "AsyncAdapt_aiosqlite_cursor", "executemany"),
    ("sqlalchemy.dialects.sqlite.aiosqlite", "AsyncAdapt_aiosqlite_cursor", "fetchall"),
    (
        "sqlalchemy.dialects.sqlite.aiosqlite",
        "AsyncAdapt_aiosqlite_cursor",
        "_awaitable_cursor_close",
    ),
    ("aiosqlite", "Connection", "_execute"),
    ("aiosqlite", "Connection", "_conn"),
]
# The cursor's state, which _OneTripCursor.__init__ sets in place of the adapter's __init__.
CURSOR_SLOTS = {"_adapt_connection", "_connection", "_cursor", "_rows", "_soft_closed_memoized"}


def _fence_message(gone: list[str]) -> str:
    return (
        f"app/db/sqlite.py stands in for private parts of SQLAlchemy {sqlalchemy.__version__}'s "
        f"aiosqlite adapter or of aiosqlite {aiosqlite.__version__} that are gone or changed: "
        + "; ".join(gone)
        + ". Rebuild _OneTripCursor and _Connection on the new adapter, or give SQLite "
        "SQLAlchemy's own adapter (drop module=one_trip_dbapi() in app/db/engine.py) and "
        "RowInserter a way to commit on SQLite of its own (it sets the DBAPI connection's "
        "autocommit, which only _Connection has)."
    )


def _slots(cls: type) -> set[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        slots = vars(klass).get("__slots__", ())
        names |= {slots} if isinstance(slots, str) else set(slots)
    return names


def test_the_private_parts_app_db_sqlite_stands_in_for_are_still_there() -> None:
    gone: list[str] = []
    for module_name, name, member in PRIVATE_PARTS:
        try:
            owner = getattr(importlib.import_module(module_name), name)
        except (ImportError, AttributeError):
            gone.append(f"{module_name}.{name}")
            continue
        if member is not None and not hasattr(owner, member):
            gone.append(f"{module_name}.{name}.{member}")

    from sqlalchemy.connectors.asyncio import AsyncAdapt_dbapi_connection
    from sqlalchemy.dialects.sqlite.aiosqlite import AsyncAdapt_aiosqlite_cursor

    # _OneTripCursor replaces the adapter cursor's __init__: state the adapter adds in a new
    # slot (or, without __slots__, anywhere) would be left unset.
    if _slots(AsyncAdapt_aiosqlite_cursor) != CURSOR_SLOTS:
        gone.append(
            f"AsyncAdapt_aiosqlite_cursor's slots are {sorted(_slots(AsyncAdapt_aiosqlite_cursor))}"
            f", not {sorted(CURSOR_SLOTS)}"
        )
    without_slots = [
        klass.__name__
        for klass in AsyncAdapt_aiosqlite_cursor.__mro__[:-1]
        if "__slots__" not in vars(klass)
    ]
    if without_slots:
        gone.append(f"__slots__ on {without_slots}")
    # _DBAPI.connect builds _Connection(dbapi, aiosqlite_connection) itself.
    if "_connection" not in _slots(AsyncAdapt_dbapi_connection):
        gone.append("AsyncAdapt_dbapi_connection._connection")
    parameters = list(inspect.signature(AsyncAdapt_dbapi_connection.__init__).parameters)
    if parameters != ["self", "dbapi", "connection"]:
        gone.append(f"AsyncAdapt_dbapi_connection.__init__{tuple(parameters)}")
    assert not gone, _fence_message(gone)


async def test_a_statement_runs_through_the_one_trip_cursor(
    engine: AsyncEngine, trips: list[str]
) -> None:
    def through_the_cursor(connection: Any) -> None:
        adapted = connection.connection.dbapi_connection
        assert type(adapted) is _Connection, _fence_message([f"the connection is {adapted!r}"])
        # aiosqlite's own connection, and the sqlite3 connection under it that _Connection
        # asks whether a transaction is open.
        assert isinstance(adapted._connection, aiosqlite.Connection)
        assert isinstance(adapted._connection._connection, sqlite3.Connection)
        cursor = adapted.cursor()
        assert type(cursor) is _OneTripCursor, _fence_message([f"the cursor is {cursor!r}"])
        trips.clear()
        cursor.execute("INSERT INTO things (name) VALUES (?)", ("fenced",))
        assert (cursor.rowcount, cursor.lastrowid, cursor.description) == (1, 1, None)
        cursor.execute("SELECT id, name FROM things")
        assert [column[0] for column in cursor.description] == ["id", "name"]
        assert cursor.fetchone() == (1, "fenced")
        assert cursor.fetchall() == []
        cursor.close()
        assert trips == ["_run", "_run"], _fence_message([f"a statement took trips {trips}"])
        assert adapted._connection._connection.in_transaction
        adapted.commit()
        assert trips[-1] == "commit"
        assert not adapted._connection._connection.in_transaction

    async with engine.connect() as connection:
        await connection.run_sync(through_the_cursor)
