"""One small integer read on every request, through a connection of its own (``ScalarReader``).

Reading through the engine (a pooled connection, SQLAlchemy's ``Connection`` and result) costs
about 0.3-0.45 ms of CPU (docs/PERFORMANCE.md), more than the key check it serves may add to a
request. The driver alone costs a small part of that:

- PostgreSQL: a prepared statement on an asyncpg connection kept for this one statement,
  through asyncpg's public API (the connection arguments are the engine's own, from its
  dialect). One read at a time (a lock): the reader's callers share reads anyway.
- SQLite: the standard library's ``sqlite3`` on a connection of its own, in the event loop's
  thread, with no busy wait (``timeout=0``), and without awaiting (``read_now``). In WAL mode
  (which the engine sets) a reader never waits for a writer, and one row of a page in the
  cache is read in microseconds; a database file that is busy for it (a checkpoint, or not in
  WAL mode) raises at once.

Whenever the direct way fails (the connection dropped, the database busy, a driver this
module does not know, SQLite in memory), the read goes through the engine as any query does,
with its errors (``database_unavailable`` when the database cannot be reached), and the
direct connection is made again on a later read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from typing import Any

from sqlalchemy import Select
from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger(__name__)

# Options SQLAlchemy's asyncpg dialect takes from the URL for itself, not for asyncpg.connect.
_DIALECT_ONLY = ("prepared_statement_cache_size", "prepared_statement_name_func", "async_fallback")
# A direct read that has not answered in this long has failed (a server gone silent); so has
# the connection that does not open in this long. After a failure the engine reads alone for
# RETRY_SECONDS, so a database that is down costs no direct attempt per request.
TIMEOUT_SECONDS = 2.0
RETRY_SECONDS = 1.0


class ScalarReader:
    """Reads the integer ``sql`` selects (one row, one column); ``statement`` is the same
    query for the engine, used when the direct way cannot be."""

    def __init__(
        self, engine: AsyncEngine, sql: str, statement: Select[Any], name: str = "citegate-reader"
    ) -> None:
        self._engine = engine
        self._name = name  # PostgreSQL's application_name of the direct connection
        self._sql = sql
        self._statement = statement
        self._driver = engine.dialect.driver
        self._lock = asyncio.Lock()
        self._pg: Any = None  # asyncpg's PreparedStatement
        self._pg_connection: Any = None
        self._sqlite: sqlite3.Connection | None = None
        self._retry_at = 0.0

    def read_now(self) -> int | None:
        """The value read without waiting where the direct way is a local file (SQLite): the
        read is microseconds, and awaiting it (a task a request) cost more than the read.
        None where it must be awaited (``read``) or failed (``read`` says why)."""
        if self._driver != "aiosqlite":
            return None
        now = asyncio.get_running_loop().time()
        if now < self._retry_at:
            return None
        try:
            return self._read_sqlite()
        except Exception as error:  # the engine's read says what is wrong, if anything
            self._failed(error, now)
            return None

    async def read(self) -> int:
        if (value := self.read_now()) is not None:
            return value
        now = asyncio.get_running_loop().time()
        if self._driver == "asyncpg" and now >= self._retry_at:
            try:
                return await self._read_asyncpg()
            except Exception as error:  # the engine's read says what is wrong, if anything
                self._failed(error, now)
                await self.aclose()
        return await self._read_engine()

    def _failed(self, error: Exception, now: float) -> None:
        log.debug("direct read failed (%s); through the engine", type(error).__name__)
        self._retry_at = now + RETRY_SECONDS
        lite, self._sqlite = self._sqlite, None
        if lite is not None:
            lite.close()

    async def _read_engine(self) -> int:
        async with self._engine.connect() as connection:
            return int(await connection.scalar(self._statement) or 0)

    async def _read_asyncpg(self) -> int:
        async with self._lock:
            if self._pg is None:
                import asyncpg

                cargs, cparams = self._engine.dialect.create_connect_args(self._engine.url)
                for option in _DIALECT_ONLY:
                    cparams.pop(option, None)
                cparams.setdefault("timeout", TIMEOUT_SECONDS)
                cparams["server_settings"] = {
                    **cparams.get("server_settings", {}),
                    "application_name": self._name,
                }
                self._pg_connection = await asyncpg.connect(*cargs, **cparams)
                self._pg = await self._pg_connection.prepare(self._sql)
            return int(await self._pg.fetchval(timeout=TIMEOUT_SECONDS) or 0)

    def _read_sqlite(self) -> int | None:
        if self._sqlite is None:
            cargs, cparams = self._engine.dialect.create_connect_args(self._engine.url)
            database = cargs[0] if cargs else ""
            if not database or database == ":memory:" or "mode=memory" in database:
                return None  # another connection would see another database
            self._sqlite = sqlite3.connect(
                database,
                timeout=0,
                isolation_level=None,
                check_same_thread=False,
                uri=bool(cparams.get("uri")),
            )
        row = self._sqlite.execute(self._sql).fetchone()
        return int(row[0]) if row else 0

    async def aclose(self) -> None:
        pg, self._pg, self._pg_connection = self._pg_connection, None, None
        if pg is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(pg.close(), 2)
        lite, self._sqlite = self._sqlite, None
        if lite is not None:
            lite.close()


def sql_of(statement: Select[Any]) -> str:
    """A statement without parameters as plain SQL, the same for both databases."""
    return str(statement.compile(compile_kwargs={"literal_binds": True}))
