"""The schema comes only from migrations, and they agree with the models, on both databases."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from alembic import command
from sqlalchemy import inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from app.db.engine import create_engine, run_in_session
from app.db.migrations import alembic_config
from app.db.models import DEFAULT_TENANT_ID, Base
from app.search.index import is_index_object
from app.search.service import search_passages
from tests.conftest import fresh_database


@pytest.fixture
def scratch_url(database_url: str, tmp_path: object) -> str:
    """A database of the same kind as the test database, that only this test uses."""
    url = make_url(database_url)
    if url.drivername.startswith("sqlite"):
        return f"sqlite+aiosqlite:///{tmp_path}/migrations.db"
    name = f"{url.database}_migrations"  # one per test database: suites side by side never share it

    async def recreate() -> None:
        admin = create_engine(
            url.set(database="postgres").render_as_string(hide_password=False),
            poolclass=NullPool,
            isolation_level="AUTOCOMMIT",
        )
        async with admin.connect() as connection:
            await connection.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            await connection.exec_driver_sql(f"CREATE DATABASE {name}")
        await admin.dispose()

    asyncio.run(recreate())
    return url.set(database=name).render_as_string(hide_password=False)


def _tables(url: str) -> set[str]:
    async def read() -> set[str]:
        engine = create_engine(url, poolclass=NullPool)
        async with engine.connect() as connection:
            names = await connection.run_sync(lambda c: inspect(c).get_table_names())
        await engine.dispose()
        # The search index's own tables (FTS5), which the models do not describe.
        return {name for name in names if not is_index_object(name, "table")}

    return asyncio.run(read())


def test_upgrade_downgrade_upgrade_and_models_agree(scratch_url: str) -> None:
    fresh_database(scratch_url)
    config = alembic_config(scratch_url)
    command.upgrade(config, "head")
    assert _tables(scratch_url) == set(Base.metadata.tables) | {"alembic_version"}
    command.check(config)  # raises when the models and the migrations disagree
    command.downgrade(config, "base")
    assert _tables(scratch_url) == {"alembic_version"}
    command.upgrade(config, "head")
    command.check(config)
    assert _tables(scratch_url) == set(Base.metadata.tables) | {"alembic_version"}


def test_every_tenant_table_has_a_tenant_id() -> None:
    # The local engine's tables are the stand-in upstream's, which knows no tenants (as the
    # Messages API knows only Citegate's key).
    for name, table in Base.metadata.tables.items():
        # service_processes, auth_version: the service's own; local_engine_*: the stand-in
        # upstream's.
        if name not in ("tenants", "service_processes", "auth_version") and not name.startswith(
            "local_engine_"
        ):
            assert "tenant_id" in table.columns, name


def test_the_search_index_is_built_for_documents_stored_before_it(scratch_url: str) -> None:
    fresh_database(scratch_url)
    config = alembic_config(scratch_url)
    command.upgrade(config, "0004")
    chunks = ["Glaciers melt faster. ", "冰川融化得很快。", "Nothing else."]

    async def store_before() -> None:
        engine = create_engine(scratch_url, poolclass=NullPool)
        async with engine.begin() as connection:
            await connection.execute(
                text(
                    "INSERT INTO documents (id, tenant_id, kind, media_type, metadata, sha256, "
                    "size_bytes, char_count, chunk_count, citable, warnings, created_at) VALUES "
                    "('doc_old', 'ten_default', 'text', 'text/plain', '{}', 'x', 1, 1, 3, true, "
                    "'[]', CURRENT_TIMESTAMP)"
                )
            )
            for index, chunk in enumerate(chunks):
                await connection.execute(
                    text(
                        "INSERT INTO document_chunks (document_id, chunk_index, tenant_id, text, "
                        "start_char, end_char) VALUES ('doc_old', :i, 'ten_default', :t, 0, 1)"
                    ),
                    {"i": index, "t": chunk},
                )
        await engine.dispose()

    asyncio.run(store_before())
    command.upgrade(config, "head")

    def search(query: str) -> list[list[int]]:
        passages = run_in_session(
            scratch_url,
            lambda session: search_passages(
                session, DEFAULT_TENANT_ID, query, ["doc_old"], 10, window=0, per_document=3
            ),
        )
        return [passage.chunk_indices for passage in passages]

    assert search("glacier melting") == [[0]]
    assert search("冰川") == [[1]]
    assert search("nothing") == [[2]]


# The reads that the answers' partial indexes (migration 0011) are for: a conversation's
# answers, deleting them, and a batch's (its ON DELETE CASCADE reads the same way).
ANSWER_READS = {
    "ix_answers_conversation_id": [
        "SELECT * FROM answers WHERE conversation_id = {p} ORDER BY id",
        "DELETE FROM answers WHERE conversation_id = {p}",
    ],
    "ix_answers_batch_id": ["SELECT id FROM answers WHERE batch_id = {p}"],
    # The streams a process relays, and those of processes gone (app/answers/live.py).
    "ix_answers_in_progress": [
        "SELECT id FROM answers WHERE status = 'in_progress' AND stream_owner = {p}",
        "UPDATE answers SET status = 'interrupted' WHERE status = 'in_progress' "
        "AND (stream_owner IS NULL OR stream_owner NOT IN "
        "(SELECT id FROM service_processes WHERE id = {p}))",
    ],
}


def test_a_conversations_and_a_batchs_answers_are_read_through_their_partial_indexes(
    scratch_url: str,
) -> None:
    # A database of its own, freshly migrated: the plans do not depend on what other tests left
    # in the answers table (after test_search.py's answers, the primary key's order won).
    fresh_database(scratch_url)
    command.upgrade(alembic_config(scratch_url), "head")

    async def plans() -> dict[str, list[str]]:
        engine = create_engine(scratch_url, poolclass=NullPool)
        found: dict[str, list[str]] = {}
        async with engine.connect() as connection:
            postgres = connection.dialect.name == "postgresql"
            if postgres:  # the plan for any value, as a prepared statement's, on a small table
                await connection.exec_driver_sql("SET enable_seqscan = off")
                await connection.exec_driver_sql("SET plan_cache_mode = force_generic_plan")
            for index, queries in ANSWER_READS.items():
                for number, query in enumerate(queries):
                    if postgres:
                        name = f"read_{index}_{number}"
                        prepared = query.format(p="$1")
                        await connection.exec_driver_sql(f"PREPARE {name}(varchar) AS {prepared}")
                        explain = f"EXPLAIN EXECUTE {name}('cnv_x')"
                    else:
                        explain = "EXPLAIN QUERY PLAN " + query.format(p="'cnv_x'")
                    rows = (await connection.exec_driver_sql(explain)).all()
                    found[query] = [" ".join(str(part) for part in row) for row in rows]
            await connection.rollback()  # the DELETE is only planned; nothing ran
        await engine.dispose()
        return found

    found = asyncio.run(plans())
    for index, queries in ANSWER_READS.items():
        for query in queries:
            assert any(index in line for line in found[query]), (query, found[query])


def test_the_answers_indexes_hold_only_the_answers_that_have_one(database_url: str) -> None:
    """What alembic's check does not compare: an index's WHERE, in the database the migrations
    made and in the models."""

    async def definitions() -> dict[str, str]:
        engine = create_engine(database_url, poolclass=NullPool)
        async with engine.connect() as connection:
            if connection.dialect.name == "postgresql":
                query = "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'answers'"
            else:
                query = (
                    "SELECT name, sql FROM sqlite_master "
                    "WHERE type = 'index' AND tbl_name = 'answers'"
                )
            rows: list[Any] = list((await connection.exec_driver_sql(query)).all())
        await engine.dispose()
        return {str(name): str(definition or "") for name, definition in rows}

    found = asyncio.run(definitions())
    assert "ix_answers_tenant_id" not in found
    model = {str(index.name): index for index in Base.metadata.tables["answers"].indexes}
    assert set(model) == set(ANSWER_READS)
    for column in ("conversation_id", "batch_id"):
        name = f"ix_answers_{column}"
        assert f"{column} IS NOT NULL" in found[name], found[name]
        for dialect in ("sqlite", "postgresql"):
            where = model[name].dialect_options[dialect]["where"]
            assert str(where) == f"{column} IS NOT NULL", (name, dialect)
    in_progress = "status = 'in_progress'"
    made = found["ix_answers_in_progress"]
    for noise in ('"', "(", ")", "::text"):  # as each database writes it back
        made = made.replace(noise, "")
    assert in_progress in made, found
    for dialect in ("sqlite", "postgresql"):
        where = model["ix_answers_in_progress"].dialect_options[dialect]["where"]
        assert str(where) == in_progress, dialect
