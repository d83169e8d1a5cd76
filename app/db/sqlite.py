"""aiosqlite for SQLAlchemy with one trip to aiosqlite's thread per statement.

aiosqlite runs every call on its own worker thread, and SQLAlchemy's adapter makes four such
calls for each statement: open a cursor, execute, fetch the rows, close the cursor. Each is a
hand-off to that thread and back, and the awaiting task resumes only after a turn of the event
loop, while the process's one SQLite connection waits. This cursor does the four in one call,
and a commit or rollback with no transaction open makes no trip; with the connection's
``autocommit`` set (``app.db.engine.RowInserter`` sets it for one statement), the statement
commits on the thread, in its own trip. Everything else is SQLAlchemy's adapter as it is.

The cursor stands in for private parts of SQLAlchemy's adapter and of aiosqlite (and
``on_thread`` uses aiosqlite's, for ``app.db.blobs``);
``tests/integration/test_sqlite_driver.py`` names each one and fails when a release moves it.

It is handed to SQLAlchemy through ``create_async_engine(module=...)``, the documented way to
give a dialect its DBAPI.
"""

from __future__ import annotations

import sqlite3
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

import aiosqlite
from sqlalchemy.connectors.asyncio import AsyncAdapt_dbapi_connection
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_cursor,
    AsyncAdapt_aiosqlite_dbapi,
)
from sqlalchemy.util import EMPTY_DICT
from sqlalchemy.util.concurrency import await_

_T = TypeVar("_T")


class _Ran:
    """What a statement left behind: stands in for the (already closed) sqlite3 cursor."""

    __slots__ = ("arraysize", "description", "lastrowid", "rowcount")

    def __init__(self, cursor: sqlite3.Cursor | None = None) -> None:
        self.arraysize = 1
        self.description = cursor.description if cursor else None
        self.rowcount = cursor.rowcount if cursor else -1
        self.lastrowid = cursor.lastrowid if cursor else None

    def close(self) -> None:
        pass


def _run(
    connection: sqlite3.Connection, operation: str, parameters: Any, many: bool, commit: bool
) -> tuple[_Ran, list[Any]]:
    """On aiosqlite's thread: the whole statement, rows included; with ``commit`` (autocommit)
    the transaction it began is committed, or rolled back if it failed."""
    cursor = connection.cursor()
    try:
        if many:
            cursor.executemany(operation, parameters)
        elif parameters is None:
            cursor.execute(operation)
        else:
            cursor.execute(operation, parameters)
        rows = cursor.fetchall() if cursor.description else []
        ran = _Ran(cursor)
    except BaseException:
        if commit and connection.in_transaction:
            connection.rollback()
        raise
    finally:
        cursor.close()
    if commit and connection.in_transaction:
        connection.commit()
    return ran, rows


class _OneTripCursor(AsyncAdapt_aiosqlite_cursor):
    __slots__ = ()
    _awaitable_cursor_close = False  # nothing is left open on the thread to close

    def __init__(self, adapt_connection: AsyncAdapt_dbapi_connection) -> None:
        self._adapt_connection = adapt_connection
        self._connection = adapt_connection._connection
        self._cursor = _Ran()  # type: ignore[assignment]
        self._soft_closed_memoized = EMPTY_DICT
        self._rows = deque()

    def execute(self, operation: Any, parameters: Any = None) -> None:
        self._run(operation, parameters, many=False)

    def executemany(self, operation: Any, seq_of_parameters: Any) -> None:
        self._run(operation, seq_of_parameters, many=True)

    def _run(self, operation: Any, parameters: Any, many: bool) -> None:
        connection: aiosqlite.Connection = self._connection  # type: ignore[assignment]
        commit: bool = self._adapt_connection.autocommit  # type: ignore[attr-defined]
        try:
            ran, rows = await_(
                connection._execute(  # type: ignore[no-untyped-call]
                    _run, connection._conn, operation, parameters, many, commit
                )
            )
        except Exception as error:
            self._adapt_connection._handle_exception(error)
        self._cursor = ran
        self._rows = deque(rows)


class _Connection(AsyncAdapt_aiosqlite_connection):
    __slots__ = ("autocommit",)
    _cursor_cls = _OneTripCursor

    def __init__(self, dbapi: Any, connection: Any) -> None:
        super().__init__(dbapi, connection)
        # While True, each statement commits on the thread, in its own trip: a write of one
        # statement is one trip where it and its commit made two, and the commit after it
        # finds nothing to end. The attribute asyncpg's adapter has too (``RowInserter``);
        # SQLAlchemy's own autocommit for SQLite (``isolation_level``) is a trip to set and
        # another to reset.
        self.autocommit = False

    # sqlite3 opens a transaction only for a write. After reads alone (most requests end
    # their session that way, with a commit or a rollback) there is nothing to end, and asking
    # is a trip to the thread for nothing.
    def commit(self) -> None:
        if self._in_transaction():
            super().commit()

    def rollback(self) -> None:
        if self._in_transaction():
            super().rollback()

    def _in_transaction(self) -> bool:
        """Safe to read from here: the connection's one user awaits each of its statements.
        False once aiosqlite has closed the connection, where SQLAlchemy's adapter does
        nothing either."""
        connection: sqlite3.Connection | None = self._connection._connection
        return connection is not None and connection.in_transaction


class _DBAPI(AsyncAdapt_aiosqlite_dbapi):
    def connect(self, *arg: Any, **kw: Any) -> _Connection:
        adapted = super().connect(*arg, **kw)
        return _Connection(self, adapted._connection)


async def on_thread(
    connection: aiosqlite.Connection, function: Callable[..., _T], *args: Any
) -> _T:
    """``function(sqlite3_connection, *args)`` on aiosqlite's thread, for what aiosqlite has
    no method of its own for (incremental blob I/O)."""
    return await connection._execute(function, connection._conn, *args)  # type: ignore[no-untyped-call,no-any-return]


def one_trip_dbapi() -> AsyncAdapt_aiosqlite_dbapi:
    """The DBAPI to give ``create_async_engine(module=...)`` for a ``sqlite+aiosqlite`` URL."""
    return _DBAPI(aiosqlite, sqlite3)
