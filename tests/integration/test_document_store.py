"""The document service against the real database: one transaction, all or nothing; a
document deleted while a question reads it; a document's bytes read back into a file a piece at
a time, exactly."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, event
from sqlalchemy.pool import NullPool

from app.db.blobs import blob_to_file
from app.db.engine import create_engine, create_session_factory
from app.db.models import DEFAULT_TENANT_ID, Document
from app.documents import service
from app.documents.sources import SourceCache, load_sources, request_limits
from app.errors import NotFound
from app.settings import Settings
from tests.conftest import count_rows
from tests.fixture_files import FIXTURES

NOTHING = {"documents": 0, "document_blobs": 0, "document_chunks": 0}


@pytest.fixture
def empty_store(client: Any) -> Iterator[None]:  # the client fixture empties the store
    yield


# A database fault under our code, after the blob and document rows were written: a trigger
# that refuses index rows (it fires for INSERT and for PostgreSQL's COPY alike).
FAILING_INDEX = {
    "sqlite": [
        "CREATE TRIGGER refuse_chunks BEFORE INSERT ON document_chunks "
        "BEGIN SELECT RAISE(ABORT, 'index refused'); END"
    ],
    "postgresql": [
        "CREATE FUNCTION refuse_chunks() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'index refused'; END $$",
        "CREATE TRIGGER refuse_chunks BEFORE INSERT ON document_chunks "
        "FOR EACH ROW EXECUTE FUNCTION refuse_chunks()",
    ],
}
WORKING_INDEX = {
    "sqlite": ["DROP TRIGGER refuse_chunks"],
    "postgresql": ["DROP TRIGGER refuse_chunks ON document_chunks", "DROP FUNCTION refuse_chunks"],
}


async def _run_ddl(database_url: str, statements: dict[str, list[str]]) -> None:
    engine = create_engine(database_url, poolclass=NullPool)
    async with engine.begin() as connection:
        for statement in statements[connection.dialect.name]:
            await connection.exec_driver_sql(statement)
    await engine.dispose()


def test_a_failure_while_writing_the_index_leaves_nothing(
    empty_store: None, database_url: str
) -> None:
    async def store() -> None:
        engine = create_engine(database_url, poolclass=NullPool)
        sessions = create_session_factory(engine)
        data = (FIXTURES / "help_center" / "help_center_0.txt").read_bytes()
        try:
            async with sessions() as session:
                await service.store_bytes(
                    session, DEFAULT_TENANT_ID, data, service.DocumentFields(), max_bytes=10**6
                )
        finally:
            await engine.dispose()

    asyncio.run(_run_ddl(database_url, FAILING_INDEX))
    try:
        # SQLAlchemy wraps the INSERT's error; COPY raises the driver's own.
        with pytest.raises(Exception, match="index refused"):
            asyncio.run(store())
    finally:
        asyncio.run(_run_ddl(database_url, WORKING_INDEX))
    assert count_rows(database_url) == NOTHING


def test_concurrent_identical_uploads_store_one_document(
    empty_store: None, database_url: str
) -> None:
    data = (FIXTURES / "amazon_2023_letter.pdf").read_bytes()

    async def race() -> list[service.StoredDocument]:
        engine = create_engine(database_url)
        sessions = create_session_factory(engine)

        async def store() -> service.StoredDocument:
            async with sessions() as session:
                return await service.store_bytes(
                    session, DEFAULT_TENANT_ID, data, service.DocumentFields(), max_bytes=10**7
                )

        try:
            return list(await asyncio.gather(*(store() for _ in range(4))))
        finally:
            await engine.dispose()

    results = asyncio.run(race())
    assert len({stored.document.id for stored in results}) == 1
    assert sum(stored.created for stored in results) == 1
    assert count_rows(database_url)["documents"] == 1


@pytest.mark.parametrize("data", [b"The grass is green.", "amazon_2023_letter.pdf"])
def test_a_document_deleted_while_a_question_reads_it_is_not_found(
    empty_store: None, database_url: str, data: bytes | str
) -> None:
    """A question finds the document, then reads its chunks and bytes in later statements; a
    delete that commits in between (each PostgreSQL statement sees the latest commit) gives
    404, not an empty document or a 500, and the cache does not keep it."""
    pdf = (FIXTURES / data).read_bytes() if isinstance(data, str) else data

    async def ask_while_deleting() -> None:
        engine = create_engine(database_url)
        sessions = create_session_factory(engine)
        try:
            async with sessions() as session:
                stored = await service.store_bytes(
                    session, DEFAULT_TENANT_ID, pdf, service.DocumentFields(), max_bytes=10**7
                )
            document_id = stored.document.id

            deleted: list[str] = []

            @event.listens_for(engine.sync_engine, "after_cursor_execute")
            def delete_after_lookup(connection: Any, _c: Any, statement: str, *_: Any) -> None:
                if statement.lstrip().startswith("SELECT documents.id") and not deleted:
                    deleted.append(document_id)
                    connection.execute(delete(Document).where(Document.id == document_id))

            cache = SourceCache(10**9, recheck_seconds=5)
            async with sessions() as session:
                with pytest.raises(NotFound) as refused:
                    await load_sources(
                        session, DEFAULT_TENANT_ID, [document_id], cache, request_limits(Settings())
                    )
            assert deleted == [document_id]
            assert refused.value.code == "document_not_found"
            assert cache.confirmed(document_id, cache.now()) is None
        finally:
            await engine.dispose()

    asyncio.run(ask_while_deleting())


def test_a_documents_bytes_are_written_to_a_file_a_piece_at_a_time_exactly(
    empty_store: None, database_url: str, tmp_path: Path
) -> None:
    """What an OCR job gives its workers (and parses once they are done): the stored bytes,
    read in pieces of any size (one byte short of the whole, the whole, more), never the
    bytes of another document; no file for a document that has none."""
    data = (FIXTURES / "amazon_2023_letter.pdf").read_bytes()
    pieces = [1000, 4096, len(data) - 1, len(data), len(data) + 1]

    async def store_and_read() -> tuple[list[bytes], bool]:
        engine = create_engine(database_url, poolclass=NullPool)
        sessions = create_session_factory(engine)
        try:
            async with sessions() as session:
                stored = await service.store_bytes(
                    session, DEFAULT_TENANT_ID, data, service.DocumentFields(), max_bytes=10**7
                )
                other = b"Another document, stored after it."
                await service.store_bytes(
                    session, DEFAULT_TENANT_ID, other, service.DocumentFields(), max_bytes=10**7
                )
            read = []
            for piece in pieces:
                path = tmp_path / f"{piece}.pdf"
                async with sessions() as session:
                    assert await blob_to_file(session, stored.document.id, str(path), piece=piece)
                read.append(path.read_bytes())
            async with sessions() as session:
                found = await blob_to_file(session, "doc_missing", str(tmp_path / "missing.pdf"))
            return read, found
        finally:
            await engine.dispose()

    read, found = asyncio.run(store_and_read())
    assert [len(copy) for copy in read] == [len(data)] * len(pieces)
    assert all(copy == data for copy in read)
    assert not found and not (tmp_path / "missing.pdf").exists()
