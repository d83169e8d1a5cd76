"""Which failures say that the database cannot be reached, and what a client is answered for
them: 503 ``database_unavailable`` with ``Retry-After`` (529 ``overloaded_error`` under
``/anthropic``); every other error of the database, a bug's or a configuration's, stays a 500."""

from __future__ import annotations

import logging
import sqlite3
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import exc

from app.api.deps import RequestSession
from app.compat.errors import PREFIX, messages_error, render_messages_error
from app.db.unavailable import (
    FAILURES,
    DatabaseUnavailable,
    DatabaseUnreachable,
    database_unavailable,
    driver_calls,
    unreachable,
)
from app.errors import ErrorCode, ErrorRendering, install_error_handlers


class DriverError(Exception):
    """A driver's error that carries a SQLSTATE, as asyncpg's do (and SQLAlchemy's adapter of
    them)."""

    def __init__(self, message: str, sqlstate: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


def sqlite_error(message: str, code: int) -> sqlite3.OperationalError:
    error = sqlite3.OperationalError(message)
    error.sqlite_errorcode = code
    return error


def wrapped(orig: BaseException, *, invalidated: bool = False) -> exc.DBAPIError:
    """SQLAlchemy's error for a driver's, as a statement's execution raises it."""
    error = exc.DBAPIError(
        "SELECT secret FROM api_keys WHERE hash = %s",
        ("a-secret-parameter",),
        orig,
        connection_invalidated=invalidated,
    )
    error.__cause__ = orig
    return error


def refused() -> DatabaseUnreachable:
    error = DatabaseUnreachable("ConnectionRefusedError")
    error.__cause__ = ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 5432)")
    return error


UNREACHABLE: list[tuple[str, BaseException]] = [
    ("connecting failed", refused()),
    ("a connection the server closed", wrapped(DriverError("closed", "08003"), invalidated=True)),
    ("a disconnect SQLAlchemy noticed", wrapped(Exception("gone"), invalidated=True)),
    ("the connection class", wrapped(DriverError("connection failure", "08006"))),
    ("an administrator's shutdown", wrapped(DriverError("terminating connection", "57P01"))),
    ("a server starting up", wrapped(DriverError("the database system is starting up", "57P03"))),
    ("too many connections", wrapped(DriverError("sorry, too many clients", "53300"))),
    ("no pooled connection in time", exc.TimeoutError("QueuePool limit reached")),
    ("SQLite's file out of reach", wrapped(sqlite_error("unable to open database file", 14))),
]
NOT_UNREACHABLE: list[tuple[str, BaseException]] = [
    ("a constraint", exc.IntegrityError("INSERT", {}, DriverError("duplicate key", "23505"))),
    ("a statement cancelled", wrapped(DriverError("canceling statement", "57014"))),
    ("a wrong password", wrapped(DriverError("password authentication failed", "28P01"))),
    ("SQLite locked past its timeout", wrapped(sqlite_error("database is locked", 5))),
    ("SQLAlchemy misused", exc.InvalidRequestError("This session is in 'prepared' state")),
    # Only connecting (and calls on the driver's connection) make an OSError the network's.
    ("an OSError of our own", FileNotFoundError(2, "No such file", "missing.pdf")),
    ("a bug", KeyError("id")),
]


@pytest.mark.parametrize(("failure", "error"), UNREACHABLE, ids=[n for n, _ in UNREACHABLE])
def test_failures_that_say_the_database_cannot_be_reached(failure: str, error: Exception) -> None:
    assert unreachable(error), failure
    assert isinstance(error, FAILURES)  # the app's handler looks at it
    answered = database_unavailable(error)
    assert isinstance(answered, DatabaseUnavailable)
    assert answered.code is ErrorCode.DATABASE_UNAVAILABLE and answered.status == 503
    assert answered.headers == {"Retry-After": "1"}
    assert answered.extra == {"retry_after": 1}


@pytest.mark.parametrize(("failure", "error"), NOT_UNREACHABLE, ids=[n for n, _ in NOT_UNREACHABLE])
def test_other_errors_of_the_database_are_not_that(failure: str, error: Exception) -> None:
    assert not unreachable(error), failure
    assert database_unavailable(error) is None


def test_the_log_line_quotes_the_driver_never_the_statement_or_its_parameters(
    caplog: pytest.LogCaptureFixture,
) -> None:
    error = wrapped(DriverError("connection was closed in the middle of operation", "08003"))
    with caplog.at_level(logging.WARNING, logger="app.db.unavailable"):
        database_unavailable(error)
    logged = caplog.text
    assert "DriverError: connection was closed in the middle of operation" in logged
    assert "a-secret-parameter" not in logged and "api_keys" not in logged


class Connection:
    def __init__(self, closed: bool) -> None:
        self.closed = closed

    def is_closed(self) -> bool:
        return self.closed


@pytest.mark.parametrize(
    ("raised", "connection", "told"),
    [
        (ConnectionRefusedError(111, "refused"), None, True),
        (TimeoutError(), None, True),
        (OSError("Multiple exceptions: [Errno 111] …, [Errno 111] …"), None, True),
        (DriverError("the database system is shutting down", "57P03"), None, True),
        (DriverError("password authentication failed", "28P01"), None, False),
        (Exception("connection is closed"), Connection(closed=True), True),
        (DriverError("invalid input syntax", "22P02"), Connection(closed=False), False),
        (ValueError("a bug"), None, False),
    ],
)
def test_driver_calls_tell_what_left_the_database_out_of_reach(
    raised: Exception, connection: Connection | None, told: bool
) -> None:
    with pytest.raises(Exception) as caught, driver_calls(connection):
        raise raised
    if told:
        assert isinstance(caught.value, DatabaseUnreachable)
        assert caught.value.__cause__ is raised
    else:
        assert caught.value is raised


def test_the_anthropic_routes_answer_it_as_the_messages_api_answers_overloaded() -> None:
    answer = messages_error(DatabaseUnavailable())
    assert answer.status == 529 and answer.type == "overloaded_error"
    assert answer.headers == {"Retry-After": "1"}
    assert (
        answer.body()["error"]["message"] == "The database cannot be reached; retry after a moment."
    )


def served_app() -> FastAPI:
    """An app whose routes raise what a route meeting the database can meet."""
    app = FastAPI()
    rendering = ErrorRendering({PREFIX: render_messages_error})
    install_error_handlers(app, rendering, dict.fromkeys(FAILURES, database_unavailable))
    raised: dict[str, Any] = {
        "dropped": wrapped(DriverError("closed", "08003"), invalidated=True),
        "refused": refused(),
        "constraint": exc.IntegrityError("INSERT", {}, DriverError("duplicate key", "23505")),
    }

    for prefix in ("/v1", "/anthropic/v1"):

        @app.get(prefix + "/{kind}")
        async def fail(kind: str) -> None:
            raise raised[kind]

    return app


def test_the_handler_answers_503_for_the_database_and_500_for_a_bug() -> None:
    with TestClient(served_app(), raise_server_exceptions=False) as client:
        for kind in ("dropped", "refused"):
            response = client.get(f"/v1/{kind}")
            assert response.status_code == 503, kind
            assert response.headers["retry-after"] == "1"
            assert response.headers["content-type"] == "application/problem+json"
            assert response.json()["code"] == "database_unavailable"
            compatible = client.get(f"/anthropic/v1/{kind}")
            assert compatible.status_code == 529, kind
            assert compatible.headers["retry-after"] == "1"
            assert compatible.json()["error"]["type"] == "overloaded_error"
        bug = client.get("/v1/constraint")
        assert (bug.status_code, bug.json()["code"]) == (500, "internal_error")
        assert "duplicate key" not in bug.text


class ClosingSession:
    """A session in a transaction whose close fails as this says."""

    def __init__(self, failure: Exception) -> None:
        self.failure = failure

    def in_transaction(self) -> bool:
        return True

    async def close(self) -> None:
        raise self.failure


def request_of(session: ClosingSession) -> Any:
    state = SimpleNamespace(sessions=lambda: session)
    return SimpleNamespace(app=SimpleNamespace(state=state))


async def test_a_session_whose_connection_the_database_dropped_closes_quietly() -> None:
    """A route's session closes once its response is sent (a dependency's end): the database
    gone by then has taken the transaction with it, and an error would only cut the client's
    connection. Any other failure to close is still raised."""
    dropped = ClosingSession(wrapped(DriverError("closed", "08003"), invalidated=True))
    async with RequestSession(request_of(dropped)):
        pass
    bug = ClosingSession(exc.InvalidRequestError("not this"))
    with pytest.raises(exc.InvalidRequestError):
        async with RequestSession(request_of(bug)):
            pass
