"""The async engine and its sessions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import orjson
from sqlalchemy import Table, bindparam, event, exc, insert, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.pool import ConnectionPoolEntry, PoolProxiedConnection
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.util import greenlet_spawn, is_exit_exception

from app.db.unavailable import driver_calls
from app.settings import Settings


def _json_dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


# JSON columns (an answer's segments, documents and usage) through orjson, not the json module.
_JSON: dict[str, Any] = {"json_serializer": _json_dumps, "json_deserializer": orjson.loads}


_POOL_SIZE = Settings.model_fields["database_pool_size"].default
_MAX_OVERFLOW = Settings.model_fields["database_max_overflow"].default
_PING_AFTER_IDLE = Settings.model_fields["database_ping_after_idle_seconds"].default
_CONNECT_TIMEOUT = Settings.model_fields["database_connect_timeout_seconds"].default


def create_engine(
    database_url: str,
    *,
    pool_size: int = _POOL_SIZE,
    max_overflow: int = _MAX_OVERFLOW,
    ping_after_idle: float = _PING_AFTER_IDLE,
    connect_timeout: float = _CONNECT_TIMEOUT,
    **kwargs: Any,
) -> AsyncEngine:
    """An async engine for SQLite (aiosqlite) or PostgreSQL (asyncpg).

    For SQLite the file's folder is created, foreign keys are enforced, and the process uses one
    connection: SQLite takes one writer at a time anyway, and writers that contend sleep in
    SQLite's busy handler, while a task queued for the one connection wakes as soon as it is
    free. No transaction is held across a slow await (the upstream call, PDF parsing),
    so the queue stays short.
    """
    url = make_url(database_url)
    if not url.drivername.startswith("sqlite"):
        if "poolclass" not in kwargs:
            # Sizes: Settings.database_pool_size and database_max_overflow, and why. Last in,
            # first out: at a low rate the connection given back last serves the next request
            # too, so it is never idle past the ping window, where a pool in turn (FIFO) kept
            # every connection idle that long and pinged each before use (docs/PERFORMANCE.md).
            kwargs |= {"pool_size": pool_size, "max_overflow": max_overflow, "pool_use_lifo": True}
        # asyncpg waits 60 s for a server that never answers; a request should not.
        kwargs["connect_args"] = {"timeout": connect_timeout, **kwargs.get("connect_args", {})}
        engine = create_async_engine(url, **_JSON, **kwargs)
        _ping_when_idle(engine, ping_after_idle)
        _tell_unreachable(engine)
        return engine

    if url.database and url.database != ":memory:":
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    if "poolclass" not in kwargs:
        kwargs |= {"pool_size": 1, "max_overflow": 0, "pool_timeout": 60}
    engine = create_async_engine(url, connect_args={"timeout": 30}, **_JSON, **kwargs)

    @event.listens_for(engine.sync_engine, "connect")
    def _sqlite_pragmas(dbapi_connection: Any, _: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    _tell_unreachable(engine)
    return engine


def _tell_unreachable(engine: AsyncEngine) -> None:
    """Connect through ``driver_calls``: a database that cannot be reached raises
    ``DatabaseUnreachable``, where asyncpg raises a refused connection as an ``OSError``
    that SQLAlchemy passes on as it is."""

    @event.listens_for(engine.sync_engine, "do_connect")
    def _connect(dialect: Any, _: Any, cargs: Any, cparams: Any) -> Any:
        with driver_calls():
            return dialect.connect(*cargs, **cparams)


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


class RowInserter:
    """Inserts whole rows into one table, each committed by itself: how every answer is stored.

    ``insert`` does what ``connection.execute(insert(table), values)`` in a transaction of its
    own does: the statement is compiled once, for the engine's dialect; the values are made by
    the columns' own bind processors, as SQLAlchemy makes them; and they go through a pooled
    connection's DBAPI cursor: in autocommit on PostgreSQL, one round trip (BEGIN and COMMIT of
    their own made three); on SQLite the statement and then the DBAPI connection's commit.
    What is left out is what costs (docs/PERFORMANCE.md):
    SQLAlchemy's ``Connection``, transaction, execution context and result. All of it runs in
    one greenlet, as each new one maps a Python frame stack and unmaps it at its end.

    What SQLAlchemy's ``Connection`` does on failure, it does too: a driver error comes out as
    SQLAlchemy's (``IntegrityError`` and so on), parameters hidden; on a disconnect the
    connection is invalidated and every other one the pool holds is replaced (the engine
    disposed of its pool, the public way to what SQLAlchemy does there); an insert cut off
    midway (cancelled, timed out) closes its connection rather than give it back in the middle
    of a command. Left out: the asyncpg adapter re-prepares its cached statements after DDL run
    on the engine (``_invalidate_schema_cache_asof``); the service runs none on it.
    """

    def __init__(self, engine: AsyncEngine, model: type[DeclarativeBase]) -> None:
        # every column, in the table's order
        self._statement = Statement(engine, insert(model))

    async def insert(self, values: Mapping[str, Any]) -> None:
        """Insert the row of ``values`` (one for every column) and commit it."""
        await self._statement.run(values)


class RowUpdater:
    """Sets some columns of one row, found by its primary key, committed by itself: how a
    streamed answer, inserted when it began, is finished. Written as ``RowInserter`` writes,
    for the same reasons, with the same behaviour on failure."""

    def __init__(
        self, engine: AsyncEngine, model: type[DeclarativeBase], columns: Sequence[str]
    ) -> None:
        table = cast(Table, model.__table__)
        [key] = table.primary_key.columns
        statement = (
            update(table)
            .where(key == bindparam(f"key_{key.key}", type_=key.type))
            .values({name: bindparam(name, type_=table.columns[name].type) for name in columns})
        )
        self._key = key.key
        self._statement = Statement(engine, statement)

    async def update(self, values: Mapping[str, Any]) -> None:
        """Set the columns of the row whose key ``values`` holds to ``values``' and commit."""
        await self._statement.run({**values, f"key_{self._key}": values[self._key]})


class Statement:
    """One compiled statement of positional parameters, run on a pooled connection's DBAPI
    cursor and committed by itself (``RowInserter`` says how and why): also the budgets'
    reservations (``app.auth.budgets``), which need how many rows it changed."""

    def __init__(self, engine: AsyncEngine, statement: Any) -> None:
        dialect = engine.dialect
        compiled = cast(SQLCompiler, statement.compile(dialect=dialect))
        if compiled.positiontup is None:  # aiosqlite's and asyncpg's parameters are positional
            raise ValueError(f"{dialect.driver} takes named parameters")
        self._sql = compiled.string
        # Each parameter made by its column type's own bind processor, as SQLAlchemy makes it.
        self._binds = [
            (name, compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect))
            for name in compiled.positiontup
        ]
        self._engine = engine.sync_engine

    async def run(self, values: Mapping[str, Any]) -> int:
        """Run it with these values, committed; how many rows it changed."""
        parameters = [
            values[name] if process is None else process(values[name])
            for name, process in self._binds
        ]
        changed: int = await greenlet_spawn(self._run, parameters)
        return changed

    def _run(self, parameters: list[Any]) -> int:
        engine = self._engine
        dialect = engine.dialect
        connection: PoolProxiedConnection | None = None
        try:
            connection = engine.raw_connection()
            dbapi_connection: Any = connection.dbapi_connection
            if dialect.name == "sqlite":  # the statement, then its commit
                try:
                    cursor = connection.cursor()
                    cursor.execute(self._sql, parameters)
                    changed: int = cursor.rowcount
                    cursor.close()
                    dbapi_connection.commit()
                except BaseException:
                    dbapi_connection.rollback()
                    raise
            else:  # the statement in autocommit: one round trip
                dbapi_connection.autocommit = True
                try:
                    cursor = connection.cursor()
                    cursor.execute(self._sql, parameters)
                    changed = cursor.rowcount
                    cursor.close()
                finally:  # the next user of the connection has its transactions as before
                    dbapi_connection.autocommit = False
            return changed
        except dialect.loaded_dbapi.Error as error:
            broken = dialect.is_disconnect(error, connection, None)
            if broken and connection is not None:
                connection.invalidate(error)
                engine.dispose()  # the server dropped the others too, as a restart does
            raise DBAPIError.instance(
                self._sql,
                None,
                error,
                dialect.loaded_dbapi.Error,
                hide_parameters=True,
                connection_invalidated=broken,
                dialect=dialect,
            ) from error
        except BaseException as error:
            # Stopped midway from outside (cancelled, timed out, the process exiting): as
            # SQLAlchemy's own Connection tells it, and closes the connection.
            if connection is not None and is_exit_exception(error):
                connection.invalidate(error)
            raise
        finally:
            if connection is not None:
                connection.close()


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
