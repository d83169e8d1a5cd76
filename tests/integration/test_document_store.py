"""The document service against the real database: one transaction, all or nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.pool import NullPool

from app.db.engine import create_engine, create_session_factory
from app.db.models import DEFAULT_TENANT_ID
from app.documents import service
from tests.conftest import FIXTURES, count_rows

NOTHING = {"documents": 0, "document_blobs": 0, "document_chunks": 0}


class ChunkInsertFails(Exception):
    pass


@pytest.fixture
def empty_store(client: Any) -> Iterator[None]:  # the client fixture empties the store
    yield


def test_a_failure_while_writing_the_index_leaves_nothing(
    empty_store: None, database_url: str
) -> None:
    async def store_with_failing_index() -> None:
        engine = create_engine(database_url, poolclass=NullPool)

        # A database fault injected under our code, after blob and document rows were written.
        @event.listens_for(engine.sync_engine, "before_cursor_execute")
        def fail_on_chunks(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
            if statement.lstrip().upper().startswith("INSERT INTO DOCUMENT_CHUNKS"):
                raise ChunkInsertFails

        sessions = create_session_factory(engine)
        data = (FIXTURES / "help_center" / "help_center_0.txt").read_bytes()
        try:
            async with sessions() as session:
                await service.store_bytes(
                    session, DEFAULT_TENANT_ID, data, service.DocumentFields(), max_bytes=10**6
                )
        finally:
            await engine.dispose()

    with pytest.raises(ChunkInsertFails):
        asyncio.run(store_with_failing_index())
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
