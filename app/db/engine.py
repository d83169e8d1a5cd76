"""The async engine and its sessions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import orjson
from sqlalchemy import Executable, event, exc
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.pool import ConnectionPoolEntry, PoolProxiedConnection
from sqlalchemy.util import greenlet_spawn

from app.db.sqlite import commits_itself, one_trip_dbapi
from app.settings import Settings


def _json_dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


# JSON columns (an answer's segments, documents and usage) through orjson, not the json module.
_JSON: dict[str, Any] = {"json_serializer": _json_dumps, "json_deserializer": orjson.loads}


_POOL_SIZE = Settings.model_fields["database_pool_size"].default
_MAX_OVERFLOW = Settings.model_fields["database_max_overflow"].default
_PING_AFTER_IDLE = Settings.model_fields["database_ping_after_idle_seconds"].default


def create_engine(
    database_url: str,
    *,
    pool_size: int = _POOL_SIZE,
    max_overflow: int = _MAX_OVERFLOW,
    ping_after_idle: float = _PING_AFTER_IDLE,
    **kwargs: Any,
) -> AsyncEngine:
    """An async engine for SQLite (aiosqlite) or PostgreSQL (asyncpg).

    For SQLite the file's folder is created, foreign keys are enforced, and the process uses one
    connection: SQLite takes one writer at a time anyway, and writers that contend sleep in
    SQLite's busy handler, while a task queued for the one connection wakes as soon as it is
    free. No transaction is held across a slow await (the upstream call, PDF parsing),
    so the queue stays short; and each statement is one trip to aiosqlite's thread
    (``app.db.sqlite``), so the connection is held for as few turns of the event loop as can be.
    """
    url = make_url(database_url)
    if not url.drivername.startswith("sqlite"):
        if "poolclass" not in kwargs:
            # Sizes: Settings.database_pool_size and database_max_overflow, and why. Last in,
            # first out: at a low rate the connection given back last serves the next request
            # too, so it is never idle past the ping window, where a pool in turn (FIFO) kept
            # every connection idle that long and pinged each before use (at 5 answers a
            # second after a burst: 1.17 pings per answer, now 0.13; PostgreSQL's CPU -13 %).
            kwargs |= {"pool_size": pool_size, "max_overflow": max_overflow, "pool_use_lifo": True}
        engine = create_async_engine(url, **_JSON, **kwargs)
        _ping_when_idle(engine, ping_after_idle)
        return engine

    if url.database and url.database != ":memory:":
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    if "poolclass" not in kwargs:
        kwargs |= {"pool_size": 1, "max_overflow": 0, "pool_timeout": 60}
    if url.drivername == "sqlite+aiosqlite" and "module" not in kwargs:
        kwargs["module"] = one_trip_dbapi()
    engine = create_async_engine(url, connect_args={"timeout": 30}, **_JSON, **kwargs)

    @event.listens_for(engine.sync_engine, "connect")
    def _sqlite_pragmas(dbapi_connection: Any, _: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    return engine


def _ping_when_idle(engine: AsyncEngine, idle: float) -> None:
    """Ping a pooled connection before it is used only when it has been idle for more than
    ``idle`` seconds, and replace it if the ping fails (the server restarted, or closed it).

    SQLAlchemy's ``pool_pre_ping`` pings at every checkout, and asyncpg's ping is three round
    trips (BEGIN, an empty query, ROLLBACK): more than the answer's own insert, on both sides
    of the socket. A connection given back moments ago is almost always as alive as a ping
    would show; like HikariCP's ``aliveBypassWindowMs``, only one idle past the window is
    asked. The cost: a connection the server closed within the window (a restart in that
    second) fails the one request that uses it next, and SQLAlchemy, seeing the disconnect,
    then replaces every connection the pool held before it.
    """
    sync = engine.sync_engine

    @event.listens_for(sync, "checkin")
    def _returned(_: Any, entry: ConnectionPoolEntry) -> None:
        entry.info["returned_at"] = time.monotonic()

    @event.listens_for(sync, "checkout")
    def _checked_out(
        dbapi_connection: Any, entry: ConnectionPoolEntry, _: PoolProxiedConnection
    ) -> None:
        # A new connection has no mark: ``info`` goes with the DBAPI connection.
        returned = entry.info.get("returned_at")
        if returned is None or time.monotonic() - returned <= idle:
            return
        try:
            sync.dialect.do_ping(dbapi_connection)
        except Exception as error:  # the pool retries with a new connection
            raise exc.DisconnectionError("a pooled connection failed its ping") from error


def one_statement_writer(engine: AsyncEngine) -> AsyncEngine:
    """For a write that is one statement (an answer's insert), atomic by itself: on PostgreSQL
    in autocommit, one round trip where BEGIN, the statement and COMMIT made three. On SQLite
    the engine itself: switching sqlite3 to autocommit and back would cost two trips to
    aiosqlite's thread; ``write_one`` commits in the statement's own trip instead."""
    if engine.dialect.name == "postgresql":
        return engine.execution_options(isolation_level="AUTOCOMMIT")
    return engine


async def write_one(writer: AsyncEngine, statement: Executable, values: dict[str, Any]) -> None:
    """Execute ``statement`` with ``values`` on ``writer`` (``one_statement_writer``) and commit,
    all in one greenlet.

    Each step of SQLAlchemy's async API (connect, begin, execute, commit, close) runs the
    synchronous engine in a greenlet of its own, and each new greenlet maps a Python frame
    stack and unmaps it at its end: five mmap/munmap pairs for one insert. One greenlet for the
    whole write is the same work (the same pool, ping, transaction and statement) for an
    eighth (SQLite) to a fifth (PostgreSQL) less CPU; issue 20's notes have the figures.
    """
    await greenlet_spawn(_write_one, writer.sync_engine, statement, values)


def _write_one(engine: Engine, statement: Executable, values: dict[str, Any]) -> None:
    # On SQLite the statement commits on aiosqlite's thread: one trip there, not two.
    with engine.begin() as connection, commits_itself(connection.connection.dbapi_connection):
        connection.execute(statement, values)


def create_session_factory(engine: AsyncEngine) -> async_sessionmaker[Any]:
    return async_sessionmaker(engine, expire_on_commit=False)


T = TypeVar("T")


def run_in_session(database_url: str, work: Callable[[AsyncSession], Awaitable[T]]) -> T:
    """Run ``work`` in a session of its own, from code that has no event loop (the CLI)."""

    async def run() -> T:
        engine = create_engine(database_url)
        try:
            async with create_session_factory(engine)() as session:
                return await work(session)
        finally:
            await engine.dispose()

    return asyncio.run(run())
