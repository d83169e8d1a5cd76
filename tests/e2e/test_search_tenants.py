"""What another tenant stores never changes what a tenant's search finds: not the words of its
query that count, not the passages found, and on PostgreSQL not their order or scores either
(SQLite's FTS5 ranks by BM25 over the whole table's statistics, as the README says)."""

from __future__ import annotations

import math
from typing import Any

import httpx
from sqlalchemy import insert, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.engine import run_in_session
from app.db.models import Document, DocumentChunk, Tenant
from app.search.index import TIE_WEIGHT, index_document
from app.search.service import MATCH_BUDGET
from app.settings import Settings
from tests.e2e.test_auth import bearer, make_key

CROWD = 100_000  # chunks of the other tenant, each holding the words of the query


def passages(client: httpx.Client, headers: dict[str, str], **body: Any) -> list[dict[str, Any]]:
    response = client.post("/v1/search", json=body | {"limit": 20}, headers=headers)
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["data"]
    return found


def key(passage: dict[str, Any]) -> tuple[Any, ...]:
    return (passage["document_id"], passage["text"], tuple(passage["chunk_indices"]))


def levels(results: list[list[dict[str, Any]]]) -> list[list[set[tuple[Any, ...]]]]:
    """Each search's passages, in order, as sets of those of equal weight (scores within
    TIE_WEIGHT of each other: only the database's own rank tells them apart)."""
    grouped = []
    for result in results:
        groups: list[set[tuple[Any, ...]]] = []
        top = math.inf
        for passage in result:
            if passage["score"] <= top - TIE_WEIGHT:
                groups.append(set())
                top = passage["score"]
            groups[-1].add(key(passage))
        grouped.append(groups)
    return grouped


def store_crowd(database_url: str, tenant_name: str, chunks: int) -> None:
    """``chunks`` chunks of one document of the tenant's, straight into the tables (through the
    API it would take minutes), indexed as the service indexes a document."""

    async def store(session: AsyncSession) -> None:
        tenant_id = await session.scalar(select(Tenant.id).where(Tenant.name == tenant_name))
        sentence = "Alpha alpha zebra, number {n} of the crowd. "
        texts = [sentence.format(n=n) for n in range(chunks)]
        ends = [len(t) for t in texts]
        for n in range(1, chunks):
            ends[n] += ends[n - 1]
        await session.execute(
            insert(Document).values(
                id="doc_crowd",
                tenant_id=tenant_id,
                kind="text",
                media_type="text/plain",
                title="Crowd",
                sha256="0" * 64,
                size_bytes=ends[-1],
                char_count=ends[-1],
                chunk_count=chunks,
                citable=True,
            )
        )
        rows = [
            {
                "document_id": "doc_crowd",
                "chunk_index": n,
                "tenant_id": tenant_id,
                "text": texts[n],
                "start_char": ends[n] - len(texts[n]),
                "end_char": ends[n],
            }
            for n in range(chunks)
        ]
        connection = await session.connection()
        if connection.dialect.name == "postgresql":
            # COPY, as the service writes chunks there: migration 0019's trigger counting a
            # tenant's chunks runs once a statement, so once a row under executemany (90 s).
            raw = await connection.get_raw_connection()
            await raw.driver_connection.copy_records_to_table(  # type: ignore[union-attr]
                DocumentChunk.__tablename__,
                records=[tuple(row.values()) for row in rows],
                columns=list(rows[0]),
            )
        else:
            await session.execute(insert(DocumentChunk), rows)
        await index_document(session, "doc_crowd")
        await session.commit()
        # Statistics as autovacuum would keep them (PostgreSQL reads them to plan searches).
        await session.execute(text("ANALYZE"))
        await session.commit()

    run_in_session(database_url, store)


def test_another_tenants_chunks_change_nothing_a_tenant_finds(
    client: httpx.Client, database_url: str, settings: Settings
) -> None:
    _, a_key = make_key(database_url, "tenant-a")
    make_key(database_url, "tenant-b")
    a = bearer(a_key)
    # A's library: "alpha" in a few chunks, "zebra" in one. Ranked by both words, A finds
    # them all; were "alpha" counted over every tenant, B's crowd would make it too common
    # to rank by, and A would find only the zebra.
    texts = {
        "alpha-1.txt": b"An alpha release shipped in May. Nothing else happened.",
        "alpha-2.txt": b"The alpha particle is a helium nucleus. Physics notes.",
        "alpha-3.txt": b"Alpha and beta testers agreed. Alpha builds are nightly.",
        "zebra.txt": b"A zebra crossed the road. It was striped.",
        "other.txt": b"Nothing here matches the question at all.",
    }
    ids = []
    for name, data in texts.items():
        response = client.post("/v1/documents/upload", files={"file": (name, data)}, headers=a)
        assert response.status_code == 201, response.text
        ids.append(response.json()["id"])
    collection = client.post("/v1/collections", json={"name": "A"}, headers=a).json()["id"]
    added = client.post(
        f"/v1/collections/{collection}/documents", json={"document_ids": ids}, headers=a
    )
    assert added.status_code == 200, added.text
    questions = ["alpha zebra", "what about the alpha", "zebra", "alpha"]

    def everything_found() -> list[list[dict[str, Any]]]:
        return [
            *(passages(client, a, query=q, collection_id=collection) for q in questions),
            *(passages(client, a, query=q, document_ids=ids) for q in questions),
        ]

    before = everything_found()
    assert {p["document_id"] for p in before[0]} == set(ids[:4])  # both words ranked by
    # The rarer word's chunk first, then the others: levels an order check can see.
    assert before[0][0]["document_id"] == ids[3] and len(levels(before)[0]) >= 2

    assert CROWD > 10 * MATCH_BUDGET
    store_crowd(database_url, "tenant-b", CROWD)
    after = everything_found()

    if settings.database_url.startswith("sqlite"):
        # The same passages in the same order, but for chunks holding equally rare words,
        # which FTS5's BM25 orders by the whole table's statistics: scores within TIE_WEIGHT.
        assert levels(after) == levels(before)
        for result_after, result_before in zip(after, before, strict=True):
            scores = {key(p): p["score"] for p in result_before}
            for passage in result_after:
                assert abs(passage["score"] - scores[key(passage)]) < TIE_WEIGHT
    else:
        assert after == before
    # And B, searching, finds its own crowd: the chunks were stored and indexed.
    _, b_key = make_key(database_url, "tenant-b")
    crowd = passages(client, bearer(b_key), query="alpha zebra", document_ids=["doc_crowd"])
    assert crowd and all(p["document_id"] == "doc_crowd" for p in crowd)
