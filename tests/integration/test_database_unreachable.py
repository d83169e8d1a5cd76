"""The engine against a database it cannot reach, on the real drivers: what comes out is what
``app.db.unavailable`` calls unreachable (and nothing else is taken for it), and the same
engine works again, with no new one made, once the database can be reached.

PostgreSQL is cut through ``tests/tcp_proxy.py``; the shared server is never stopped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import delete, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import QueuePool

from app.db.blobs import insert_blob
from app.db.engine import RowInserter, create_engine, create_session_factory
from app.db.models import DEFAULT_TENANT_ID, Answer, Document
from app.db.unavailable import DatabaseUnreachable, unreachable
from tests.conftest import free_port
from tests.integration.test_row_inserter import answer_row
from tests.tcp_proxy import TcpProxy


async def select_one(engine: AsyncEngine) -> int:
    async with engine.connect() as connection:
        return int((await connection.execute(text("SELECT 1"))).scalar_one())


async def test_a_refused_postgresql_connection_is_unreachable() -> None:
    """Nothing listens on the port: asyncpg's ``ConnectionRefusedError`` comes out as
    ``DatabaseUnreachable``, for a statement and for an answer's insert alike."""
    engine = create_engine(f"postgresql+asyncpg://citegate@127.0.0.1:{free_port()}/citegate")
    try:
        with pytest.raises(DatabaseUnreachable) as caught:
            await select_one(engine)
        assert isinstance(caught.value.__cause__, ConnectionRefusedError)
        with pytest.raises(DatabaseUnreachable):
            await RowInserter(engine, Answer).insert(answer_row("ans_unreachable"))
        pool = engine.sync_engine.pool
        assert isinstance(pool, QueuePool) and pool.checkedout() == 0  # none held by failures
    finally:
        await engine.dispose()


async def test_a_sqlite_file_that_cannot_be_opened_is_unreachable(tmp_path: Path) -> None:
    """The folder of the file is gone when the pool must open a connection: SQLite's
    ``SQLITE_CANTOPEN``. Once it is back, the same engine opens it."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'data' / 'citegate.db'}")
    try:
        assert await select_one(engine) == 1
        await engine.dispose()  # the pool's connection closed: the next one opens the file
        (tmp_path / "data").rename(tmp_path / "away")
        with pytest.raises(DatabaseUnreachable) as caught:
            await select_one(engine)
        assert "unable to open database file" in str(caught.value.__cause__)
        (tmp_path / "away").rename(tmp_path / "data")
        assert await select_one(engine) == 1
    finally:
        await engine.dispose()


@pytest.fixture
async def proxied(database_url: str) -> AsyncIterator[tuple[TcpProxy, AsyncEngine]]:
    """An engine of the test database through a proxy that can cut it off."""
    if not database_url.startswith("postgresql"):
        pytest.skip("a server to cut off: PostgreSQL")
    target = make_url(database_url)
    with TcpProxy(target.host or "127.0.0.1", target.port or 5432) as proxy:
        via_proxy = target.set(host="127.0.0.1", port=proxy.port)
        engine = create_engine(via_proxy.render_as_string(hide_password=False))
        try:
            yield proxy, engine
        finally:
            await engine.dispose()


async def test_every_way_of_meeting_a_cut_is_unreachable_and_the_engine_recovers(
    proxied: tuple[TcpProxy, AsyncEngine],
) -> None:
    proxy, engine = proxied
    inserter = RowInserter(engine, Answer)
    await asyncio.gather(select_one(engine), select_one(engine))  # two pooled connections
    proxy.cut()
    failures: list[BaseException] = []
    # A pooled connection the cut dropped, then connections refused; an answer's insert too.
    for work in (select_one(engine), select_one(engine), inserter.insert(answer_row("ans_cut"))):
        with pytest.raises(Exception) as caught:
            await work
        failures.append(caught.value)
    assert isinstance(failures[0], DBAPIError) and failures[0].connection_invalidated
    assert isinstance(failures[1], DatabaseUnreachable)
    assert all(unreachable(failure) for failure in failures), failures
    proxy.restore()
    assert list(await asyncio.gather(select_one(engine), select_one(engine))) == [1, 1]
    await inserter.insert(answer_row("ans_after_the_cut"))
    async with engine.begin() as connection:
        kept = await connection.scalars(select(Answer.id).where(Answer.id.like("ans_%cut%")))
        assert list(kept) == ["ans_after_the_cut"]
        await connection.execute(delete(Answer).where(Answer.id == "ans_after_the_cut"))


async def test_a_copy_cut_off_is_unreachable_and_stores_nothing(
    proxied: tuple[TcpProxy, AsyncEngine],
) -> None:
    """A document's bytes go by a COPY on asyncpg's own connection, outside SQLAlchemy: a
    connection lost under it is told as one lost under SQLAlchemy is, and the transaction,
    document row included, is gone with the connection."""
    proxy, engine = proxied
    sessions = create_session_factory(engine)
    document_id = "doc_copy_cut_off"
    session = sessions()
    session.add(_document(document_id))
    await session.flush()
    proxy.cut()
    with pytest.raises(DatabaseUnreachable):
        await insert_blob(session, document_id, DEFAULT_TENANT_ID, b"%PDF" * 1_000_000)
    try:
        await session.close()
    except Exception as error:  # rolling back a transaction whose connection is gone
        assert unreachable(error), error
    proxy.restore()
    async with sessions() as session:
        assert await session.get(Document, document_id) is None


async def test_no_free_connection_in_time_is_unreachable(database_url: str) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("the pool's size and timeout are PostgreSQL's: SQLite has one connection")
    engine = create_engine(database_url, pool_size=1, max_overflow=0, pool_timeout=0.2)
    try:
        async with engine.connect() as held:
            await held.execute(text("SELECT 1"))
            with pytest.raises(Exception) as caught:
                await select_one(engine)
        assert unreachable(caught.value), caught.value
    finally:
        await engine.dispose()


async def test_a_constraint_is_not_unreachable(engine_of_test_database: AsyncEngine) -> None:
    row = answer_row("ans_twice")
    inserter = RowInserter(engine_of_test_database, Answer)
    await inserter.insert(row)
    try:
        with pytest.raises(IntegrityError) as caught:
            await inserter.insert(row)
        assert not unreachable(caught.value)
    finally:
        async with engine_of_test_database.begin() as connection:
            await connection.execute(delete(Answer).where(Answer.id == "ans_twice"))


@pytest.fixture
async def engine_of_test_database(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url)
    yield engine
    await engine.dispose()


def _document(document_id: str) -> Document:
    return Document(
        id=document_id,
        tenant_id=DEFAULT_TENANT_ID,
        kind="pdf",
        media_type="application/pdf",
        title=None,
        context=None,
        user_metadata={},
        filename=None,
        sha256="0" * 64,
        size_bytes=4_000_000,
        page_count=1,
        char_count=0,
        chunk_count=0,
        citable=False,
        warnings=[],
    )
