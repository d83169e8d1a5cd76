"""``RowInserter``, which stores every answer, against the real schema on the real database: the
row it writes is the one SQLAlchemy's own insert writes, it commits by itself, and a refused or
broken write leaves the pool's connection as every other user expects it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import bindparam, delete, event, insert, select, text, update
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import NullPool

from app.db.engine import RowInserter, RowUpdater, create_engine, create_session_factory
from app.db.models import DEFAULT_TENANT_ID, Answer


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url)
    yield engine
    async with engine.begin() as connection:
        await connection.execute(delete(Answer).where(Answer.id.like("ans_inserter_%")))
    await engine.dispose()


PLUS_TWO = timezone(timedelta(hours=2))


def answer_row(answer_id: str) -> dict[str, Any]:
    """Every column of an answer, with JSON of each shape, text beyond ASCII and nulls."""
    citation = {"document_id": "doc_1", "cited_text": "Grüße, “quoted”.", "start_char_index": 0}
    return {
        "id": answer_id,
        "tenant_id": DEFAULT_TENANT_ID,
        "conversation_id": None,
        "status": "completed",
        "question": "Was steht über Wachstum?",
        "system": None,
        "model": "claude-sonnet-5",
        "max_tokens": 1024,
        "stop_reason": "end_turn",
        "text": "Growth is up.",
        "segments": [{"text": "Growth is up.", "citations": [citation]}],
        "documents": [{"id": "doc_1", "title": None}],
        "retrieval": {"mode": "documents", "passages": [], "first_new_passage": 0},
        "usage": {"input_tokens": 10, "output_tokens": 3},
        "upstream_message_id": "msg_1",
        "upstream_request_id": None,
        "batch_id": None,
        "stream_owner": None,
        "api_key_id": "key_1",
        # Not in UTC: the column's own processor (UTCDateTime) is what makes it UTC.
        "created_at": datetime(
            2026, 12, 2, 11, 30, 15, 123456, tzinfo=timezone(timedelta(hours=2))
        ),
    }


async def stored(engine: AsyncEngine, answer_id: str) -> dict[str, Any]:
    """The row as the database holds it, each value as text (JSON as it was written, not as a
    driver decodes it), not as the ORM reads it back."""
    columns = [column.name for column in Answer.__table__.columns if column.name != "id"]
    listed = ", ".join(f"CAST({name} AS TEXT) AS {name}" for name in columns)
    query = text(f"SELECT {listed} FROM answers WHERE id = :id").bindparams(bindparam("id"))
    async with engine.connect() as connection:
        row = (await connection.execute(query, {"id": answer_id})).mappings().one()
    return dict(row)


async def transactions_are_whole(engine: AsyncEngine, kept: list[str]) -> None:
    """The pool's connection (on SQLite its only one) is out of autocommit: a transaction of two
    statements is still one, and the answers kept are ``kept``."""
    async with engine.connect() as connection:
        await connection.execute(insert(Answer), answer_row("ans_inserter_rolled_back_1"))
        await connection.execute(insert(Answer), answer_row("ans_inserter_rolled_back_2"))
        await connection.rollback()
        ids = select(Answer.id).where(Answer.id.like("ans_inserter_%")).order_by(Answer.id)
        assert (await connection.execute(ids)).scalars().all() == kept


async def test_the_row_is_the_one_sqlalchemys_insert_writes(engine: AsyncEngine) -> None:
    await RowInserter(engine, Answer).insert(answer_row("ans_inserter_ours"))
    async with engine.begin() as connection:
        await connection.execute(insert(Answer), answer_row("ans_inserter_theirs"))
    assert await stored(engine, "ans_inserter_ours") == await stored(engine, "ans_inserter_theirs")
    async with create_session_factory(engine)() as session:
        answer = await session.get_one(Answer, "ans_inserter_ours")
    assert {column: getattr(answer, column) for column in answer_row("")} == answer_row(
        "ans_inserter_ours"
    )
    assert answer.created_at.utcoffset() == timedelta(0)
    await transactions_are_whole(engine, ["ans_inserter_ours", "ans_inserter_theirs"])


async def test_the_update_is_the_one_sqlalchemys_update_writes(engine: AsyncEngine) -> None:
    """``RowUpdater``, which finishes a streamed answer, sets its columns as SQLAlchemy's own
    update sets them, on the row its key names only, committed by itself."""
    begun = {**answer_row(""), "status": "in_progress", "text": "", "segments": []}
    begun |= {"stop_reason": None, "stream_owner": "proc_1"}
    for answer_id in ("ans_inserter_ours", "ans_inserter_theirs", "ans_inserter_other"):
        await RowInserter(engine, Answer).insert({**begun, "id": answer_id})
    ending = ("status", "stop_reason", "text", "segments", "usage")
    updater = RowUpdater(engine, Answer, ending)
    await updater.update(answer_row("ans_inserter_ours"))
    async with engine.begin() as connection:
        done = {column: answer_row("")[column] for column in ending}
        await connection.execute(
            update(Answer).where(Answer.id == "ans_inserter_theirs").values(done)
        )
    assert await stored(engine, "ans_inserter_ours") == await stored(engine, "ans_inserter_theirs")
    other = await stored(engine, "ans_inserter_other")
    assert other["status"] == "in_progress" and other["text"] == ""
    await transactions_are_whole(
        engine, ["ans_inserter_other", "ans_inserter_ours", "ans_inserter_theirs"]
    )


async def test_a_refused_row_is_sqlalchemys_error_and_leaves_the_connection_as_it_was(
    engine: AsyncEngine,
) -> None:
    inserter = RowInserter(engine, Answer)
    await inserter.insert(answer_row("ans_inserter_1"))
    with pytest.raises(IntegrityError) as refused:
        await inserter.insert(answer_row("ans_inserter_1"))
    assert refused.value.hide_parameters and "Grüße" not in str(refused.value)
    # The pool's connection (on SQLite its only one) is out of autocommit: a transaction of
    # two statements is still one.
    async with engine.connect() as connection:
        await connection.execute(insert(Answer), answer_row("ans_inserter_2"))
        await connection.execute(insert(Answer), answer_row("ans_inserter_3"))
        await connection.rollback()
        ids = select(Answer.id).where(Answer.id.like("ans_inserter_%"))
        assert (await connection.execute(ids)).scalars().all() == ["ans_inserter_1"]
    await inserter.insert(answer_row("ans_inserter_4"))
    assert (await stored(engine, "ans_inserter_4"))["status"] == "completed"


async def test_a_row_missing_a_column_is_refused_before_the_database(engine: AsyncEngine) -> None:
    row = answer_row("ans_inserter_partial")
    del row["batch_id"]
    checkouts: list[object] = []
    event.listen(engine.sync_engine, "checkout", lambda *_: checkouts.append(1))
    with pytest.raises(KeyError, match="batch_id"):
        await RowInserter(engine, Answer).insert(row)
    assert checkouts == []


async def test_connections_the_server_closed_are_replaced(engine: AsyncEngine) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("a server that closes connections: PostgreSQL")
    inserter = RowInserter(engine, Answer)
    # Two connections in the pool, both of which the server then closes (as a restart does).
    async with engine.connect() as first, engine.connect() as second:
        backends = [
            (await connection.execute(text("SELECT pg_backend_pid()"))).scalar_one()
            for connection in (first, second)
        ]
    other = create_engine(engine.url.render_as_string(hide_password=False), poolclass=NullPool)
    async with other.connect() as connection:
        for backend in backends:
            await connection.execute(text(f"SELECT pg_terminate_backend({int(backend)})"))
    await other.dispose()
    with pytest.raises(DBAPIError) as broken:
        await inserter.insert(answer_row("ans_inserter_lost"))
    assert broken.value.connection_invalidated
    # The other dead connection went with it: two users at once both get sound ones.
    async with engine.connect() as first, engine.connect() as second:
        for connection in (first, second):
            assert (await connection.execute(text("SELECT 1"))).scalar_one() == 1
    await inserter.insert(answer_row("ans_inserter_after"))
    assert (await stored(engine, "ans_inserter_after"))["status"] == "completed"


@asynccontextmanager
async def write_locked(engine: AsyncEngine, answer_id: str) -> AsyncIterator[None]:
    """Within: another connection holds what an insert of ``answer_id`` must wait for (on
    SQLite the database's write lock; on PostgreSQL the uncommitted row of the same id)."""
    other = create_engine(engine.url.render_as_string(hide_password=False), poolclass=NullPool)
    async with other.connect() as connection:
        if connection.dialect.name == "sqlite":
            await connection.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            await connection.execute(insert(Answer), answer_row(answer_id))
        try:
            yield
        finally:
            await connection.rollback()
    await other.dispose()


async def test_an_insert_cut_off_midway_gives_back_no_connection_in_the_middle_of_a_command(
    engine: AsyncEngine,
) -> None:
    inserter = RowInserter(engine, Answer)
    await inserter.insert(answer_row("ans_inserter_before"))  # the pool holds a connection
    async with engine.connect() as connection:  # the one the insert will take: LIFO, or the only
        before = (await connection.get_raw_connection()).driver_connection
    async with write_locked(engine, "ans_inserter_cut"):
        task = asyncio.ensure_future(inserter.insert(answer_row("ans_inserter_cut")))
        await asyncio.sleep(0.2)  # waiting for the lock, in the middle of its statement
        assert not task.done()
        task.cancel()
        await asyncio.sleep(0.1)
    with pytest.raises(asyncio.CancelledError):
        await task
    pool: Any = engine.sync_engine.pool
    assert pool.checkedout() == 0
    # The connection it had was closed, not given back: the next users get a new, sound one.
    async with engine.connect() as connection:
        assert (await connection.get_raw_connection()).driver_connection is not before
    await transactions_are_whole(engine, ["ans_inserter_before"])  # the cut one rolled back
    await inserter.insert(answer_row("ans_inserter_after"))
