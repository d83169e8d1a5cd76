"""``RowInserter``, which stores every answer, against the real schema on the real database: the
row it writes is the one SQLAlchemy's own insert writes, it commits by itself, and a refused or
broken write leaves the pool's connection as every other user expects it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import bindparam, delete, insert, select, text
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import NullPool

from app.db.engine import RowInserter, create_engine, create_session_factory
from app.db.models import DEFAULT_TENANT_ID, Answer


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url)
    yield engine
    async with engine.begin() as connection:
        await connection.execute(delete(Answer).where(Answer.id.like("ans_inserter_%")))
    await engine.dispose()


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
        "created_at": datetime(2026, 12, 2, 11, 30, 15, 123456, tzinfo=UTC),
    }


async def stored(engine: AsyncEngine, answer_id: str) -> dict[str, Any]:
    """The row as the database holds it, not as the ORM reads it back."""
    async with engine.connect() as connection:
        query = text("SELECT * FROM answers WHERE id = :id").bindparams(bindparam("id"))
        row = (await connection.execute(query, {"id": answer_id})).mappings().one()
    return {key: value for key, value in row.items() if key != "id"}


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
    with pytest.raises(KeyError, match="batch_id"):
        await RowInserter(engine, Answer).insert(row)
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_a_connection_the_server_closed_is_replaced(engine: AsyncEngine) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("a server that closes connections: PostgreSQL")
    inserter = RowInserter(engine, Answer)
    await inserter.insert(answer_row("ans_inserter_before"))
    async with engine.connect() as connection:  # the one the pool holds, which wrote that row
        backend = (await connection.execute(text("SELECT pg_backend_pid()"))).scalar_one()
    other = create_engine(engine.url.render_as_string(hide_password=False), poolclass=NullPool)
    async with other.connect() as connection:
        await connection.execute(text(f"SELECT pg_terminate_backend({int(backend)})"))
    await other.dispose()
    with pytest.raises(DBAPIError) as broken:
        await inserter.insert(answer_row("ans_inserter_lost"))
    assert broken.value.connection_invalidated
    await inserter.insert(answer_row("ans_inserter_after"))
    assert (await stored(engine, "ans_inserter_after"))["status"] == "completed"
