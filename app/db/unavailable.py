"""The database cannot be reached: which failures say so, and what a client is answered.

Such a failure is neither the request's fault nor a bug of Citegate's: the client is answered
503 ``database_unavailable`` with ``Retry-After``, and nothing needs restarting, since the
pool replaces the connections the server dropped once it answers again (``app.db.engine``).
The failures that say so:

- connecting failed: refused, reset, timed out, no route to the host, or a server that turns
  connections away while it starts, stops or has too many. asyncpg raises a refused connection
  as Python's ``OSError``, which could as well be a bug's, so the engine connects through
  ``driver_calls``, and these come out of connecting as ``DatabaseUnreachable``;
- a connection broke while in use: SQLAlchemy says so (``connection_invalidated``), or the
  server's error is of the connection class (SQLSTATE ``08…``) or says it is shutting down; a
  call made on the driver's connection outside SQLAlchemy (a COPY) is watched the same way
  (``driver_calls``);
- no pooled connection came free within the pool's timeout;
- SQLite's file cannot be opened (``SQLITE_CANTOPEN``). "database is locked", another writer
  holding it past the busy timeout, is not: nothing is down, and it stays an unexpected error.

Every other error of the database (a constraint, a syntax error, a wrong password) is what it
was: a bug, or a configuration to fix, answered 500.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from sqlalchemy import exc

from app.errors import CitegateError, ErrorCode

log = logging.getLogger(__name__)

# What a client is told to wait: a restarting PostgreSQL answers again within seconds, and a
# retry that finds it still down costs a refused connection.
RETRY_AFTER_SECONDS = 1

# PostgreSQL's SQLSTATEs, besides the connection class 08, of a server that turns connections
# away or ends them: shutting down (admin, crash), starting up, too many connections.
_UNREACHABLE_STATES = frozenset({"57P01", "57P02", "57P03", "53300"})


class DatabaseUnreachable(Exception):
    """Connecting to the database failed, or the driver's connection broke under a call made
    outside SQLAlchemy; the driver's error is its ``__cause__``. Not a ``CitegateError``:
    code that turns Citegate's errors into results (a batch's errored request) must not take
    it for one; it becomes ``DatabaseUnavailable`` only where a client is answered."""


class DatabaseUnavailable(CitegateError):
    default_code = ErrorCode.DATABASE_UNAVAILABLE

    def __init__(self) -> None:
        super().__init__(
            "The database cannot be reached; retry after a moment.",
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            retry_after=RETRY_AFTER_SECONDS,
        )


# The exceptions that can say the database is unreachable: what the app's error handler
# looks at (each is then asked ``unreachable``).
FAILURES: tuple[type[Exception], ...] = (DatabaseUnreachable, exc.DBAPIError, exc.TimeoutError)


def unreachable(error: BaseException) -> bool:
    """Whether ``error`` says that the database cannot be reached (the module says which)."""
    if isinstance(error, DatabaseUnreachable | exc.TimeoutError):
        return True
    if isinstance(error, exc.DBAPIError):
        return error.connection_invalidated or _driver_says_unreachable(error.orig)
    return False


def database_unavailable(error: Exception) -> CitegateError | None:
    """The client's error for a database that cannot be reached; None for any other error."""
    if not unreachable(error):
        return None
    cause = _driver_error(error)
    # The driver's own words (a refused address, a closed connection), never SQLAlchemy's,
    # which quote the statement and may quote its parameters.
    log.warning("the database cannot be reached: %s: %s", type(cause).__name__, cause)
    return DatabaseUnavailable()


class OutageLog:
    """What a background loop (the batch poller) logs of its rounds' failures: a database that
    cannot be reached once when it goes and once when it is back, not a traceback every round
    while it is away; any other failure, a bug, with its traceback every time."""

    def __init__(self, logger: logging.Logger, what: str) -> None:
        self._log = logger
        self._what = what
        self._away = False

    def failed(self, error: Exception) -> None:
        if not unreachable(error):
            self._log.error("%s failed", self._what, exc_info=error)
            return
        if not self._away:
            cause = _driver_error(error)
            self._log.warning(
                "%s: the database cannot be reached (%s: %s); trying again every round, "
                "logged again when it answers",
                self._what,
                type(cause).__name__,
                cause,
            )
            self._away = True

    def succeeded(self) -> None:
        if self._away:
            self._log.warning("%s: the database answers again", self._what)
            self._away = False


class _DriverConnection(Protocol):
    def is_closed(self) -> bool: ...


@contextmanager
def driver_calls(connection: _DriverConnection | None = None) -> Iterator[None]:
    """Around work on the driver itself, outside SQLAlchemy: connecting, or a call on the
    driver's ``connection`` (asyncpg's, for a COPY). A failure that says the database cannot
    be reached, or that left the connection closed (what SQLAlchemy asks of asyncpg to tell
    a disconnect), comes out as ``DatabaseUnreachable``; any other as it was."""
    try:
        yield
    except Exception as error:
        # Connecting and copying are socket work: an OSError there is the network's.
        if (
            isinstance(error, OSError)
            or _driver_says_unreachable(error)
            or (connection is not None and connection.is_closed())
        ):
            raise DatabaseUnreachable(type(error).__name__) from error
        raise


def _driver_says_unreachable(error: BaseException | None) -> bool:
    """A driver's error (asyncpg's, through SQLAlchemy's adapter or not; sqlite3's) that says
    the database cannot be reached."""
    sqlstate = getattr(error, "sqlstate", None)
    if isinstance(sqlstate, str):
        return sqlstate.startswith("08") or sqlstate in _UNREACHABLE_STATES
    return isinstance(error, sqlite3.Error) and error.sqlite_errorcode == sqlite3.SQLITE_CANTOPEN


def _driver_error(error: BaseException) -> BaseException:
    """The error the driver raised, beneath SQLAlchemy's and ours."""
    while isinstance(error, DatabaseUnreachable | exc.DBAPIError) and error.__cause__:
        error = error.__cause__
    return error
