"""The full-text index of the chunks, in the database that holds them.

SQLite: ``chunk_search``, a contentless FTS5 table keyed by the chunk's rowid, written by
``index_document`` after the chunks and emptied by a trigger when they are deleted, ranked by
BM25. PostgreSQL: ``document_chunks.search_vector``,
a stored generated ``tsvector`` with a GIN index on ``(tenant_id, search_vector)`` (btree_gin),
ranked by ``ts_rank_cd``. Either way the index
is written in the transaction that writes the chunks: a document is searchable
once stored and never half-indexed, and the index goes with the chunks when they are deleted.
Both read ``coalesce(search_text, text)`` (see app.search.terms) and stem English.

Neither is described by the SQLAlchemy models (an FTS5 table, a computed column of one
dialect): ``is_index_object`` tells Alembic's comparison to leave them alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import JSON, Integer, String, bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncSession

from app.search.passages import ChunkRange, Hit, StoredChunk
from app.search.terms import fts5_match, tsquery

FTS_TABLE = "chunk_search"
VECTOR_COLUMN = "search_vector"
VECTOR_INDEX = "ix_document_chunks_search_vector"
# PostgreSQL: how many more chunks ``ts_rank`` shortlists than cover density ranks, and how
# many matching chunks it ranks at most (twice app.search.service.MATCH_BUDGET).
SHORTLIST_FACTOR = 4
RANKED_AT_MOST = 4000

# A search covers either some documents (a JSON array or an array parameter: one parameter
# however many) or a collection. Each statement is written out whole: only parameters vary.
_SQLITE_RANKED = """
    SELECT c.document_id, c.chunk_index, c.page_number, -bm25(chunk_search) AS score
    FROM chunk_search JOIN document_chunks AS c ON c.rowid = chunk_search.rowid
    WHERE chunk_search MATCH :match AND c.tenant_id = :tenant_id AND c.document_id IN ({scope})
    ORDER BY score DESC, c.document_id, c.chunk_index
    LIMIT :limit
"""
_SQLITE_RANKED_IN_DOCUMENTS = text(
    _SQLITE_RANKED.format(scope="SELECT value FROM json_each(:document_ids)")
)
_SQLITE_RANKED_IN_COLLECTION = text(
    _SQLITE_RANKED.format(
        scope="SELECT document_id FROM collection_documents WHERE collection_id = :collection_id"
    )
)

# The GIN index finds the matching chunks; the wanted documents are a join, not a filter the
# planner may prefer to drive the scan with (it cannot tell how few of the documents' chunks
# match). Every chunk ranked is a heap row read, so at most RANKED_AT_MOST of those in scope
# are: more only when every word of the query is common (the service keeps the rarest word
# however common), and then they rank about alike anyway. The CTEs are read only as far as
# the LIMIT asks. Cover density (``ts_rank_cd``) costs several times what ``ts_rank`` does a
# chunk, and for a query of OR-ed words both mostly count the query's words in the chunk:
# ``ts_rank`` shortlists, and only the shortlist is ranked by cover density.
_POSTGRES_RANKED = """
    WITH matching AS MATERIALIZED (
        SELECT c.document_id, c.chunk_index, c.page_number, c.search_vector, q
        FROM document_chunks AS c, to_tsquery('english', :query) AS q
        WHERE c.search_vector @@ q AND c.tenant_id = :tenant_id
    ), in_scope AS MATERIALIZED (
        SELECT m.document_id, m.chunk_index, m.page_number, m.search_vector, m.q
        FROM matching AS m JOIN {scope} USING (document_id)
        LIMIT :ranked_at_most
    ), shortlist AS MATERIALIZED (
        SELECT document_id, chunk_index, page_number, search_vector, q
        FROM in_scope
        ORDER BY ts_rank(search_vector, q) DESC, document_id, chunk_index
        LIMIT :shortlist
    )
    SELECT document_id, chunk_index, page_number, ts_rank_cd(search_vector, q) AS score
    FROM shortlist
    ORDER BY score DESC, document_id, chunk_index
    LIMIT :limit
"""
_POSTGRES_RANKED_IN_DOCUMENTS = text(
    _POSTGRES_RANKED.format(scope="unnest(:document_ids) AS wanted(document_id)")
).bindparams(bindparam("document_ids", type_=ARRAY(String)))
_POSTGRES_RANKED_IN_COLLECTION = text(
    _POSTGRES_RANKED.format(
        scope="(SELECT document_id FROM collection_documents "
        "WHERE collection_id = :collection_id) AS wanted"
    )
)

# How many of the tenant's chunks match each term, counted up to a cap: the count stops there,
# so a common word costs no more than a rare one, and only the tenant's own chunks are counted
# (another tenant's never change which words a search ranks by).
#
# PostgreSQL, all the terms in one statement, by one of two plans that count the same rows.
# The GIN index on (tenant_id, search_vector) (migration 0015) finds only the tenant's rows, but
# intersects each word's chunks with all of the tenant's: cheap for a tenant among others, dear
# for one holding most of the chunks. For such a tenant the tenant is checked on the rows the
# word finds instead (``OFFSET 0`` keeps it out of the index scan): a capped count then stops
# after at most about cap / share rows. The share is read from the column's statistics
# (ANALYZE, autovacuum); it only chooses the plan, never what is counted. No statistics: the
# index. SQLite: FTS5 finds the matches of every tenant and the join keeps the tenant's.
_SQLITE_MATCH_COUNT = text(
    """
    SELECT count(*) FROM (
        SELECT 1 FROM chunk_search JOIN document_chunks AS c ON c.rowid = chunk_search.rowid
        WHERE chunk_search MATCH :match AND c.tenant_id = :tenant_id
        LIMIT :cap
    )
    """
)
LARGE_TENANT_SHARE = 0.5
_POSTGRES_MATCH_COUNTS = text(
    """
    WITH share AS MATERIALIZED (
        SELECT coalesce(max(common.share), 0) AS share
        FROM pg_stats AS s,
             unnest(s.most_common_vals::text::text[], s.most_common_freqs) AS common(tenant, share)
        WHERE s.schemaname = current_schema() AND s.tablename = 'document_chunks'
          AND s.attname = 'tenant_id' AND common.tenant = :tenant_id
    ), queries AS MATERIALIZED (
        SELECT t.position, to_tsquery('english', t.term) AS q
        FROM unnest(:terms) WITH ORDINALITY AS t(term, position)
    )
    SELECT CASE WHEN share.share >= :large_share THEN (
        SELECT count(*) FROM (
            SELECT 1 FROM (
                SELECT c.tenant_id FROM document_chunks AS c WHERE c.search_vector @@ queries.q
                OFFSET 0
            ) AS found
            WHERE found.tenant_id = :tenant_id
            LIMIT :cap
        ) AS matching
    ) ELSE (
        SELECT count(*) FROM (
            SELECT 1 FROM document_chunks AS c
            WHERE c.tenant_id = :tenant_id AND c.search_vector @@ queries.q
            LIMIT :cap
        ) AS matching
    ) END
    FROM queries, share
    ORDER BY queries.position
    """
).bindparams(bindparam("terms", type_=ARRAY(String)))


@dataclass(frozen=True, slots=True)
class Scope:
    """What a search covers: these documents, or the documents of this collection."""

    document_ids: Sequence[str] = ()
    collection_id: str | None = None


_SQLITE_INDEX_DOCUMENT = text(
    """
    INSERT INTO chunk_search(rowid, terms)
    SELECT rowid, coalesce(search_text, text) FROM document_chunks WHERE document_id = :document_id
    """
)


async def index_document(session: AsyncSession, document_id: str) -> None:
    """Index the document's chunks, just stored in this transaction. One statement for them
    all: FTS5 writes a segment at the end of each statement. PostgreSQL computes the column."""
    connection = await session.connection()
    if connection.dialect.name == "sqlite":
        await session.execute(_SQLITE_INDEX_DOCUMENT, {"document_id": document_id})


# The ranges as one parameter (a JSON array, or arrays): one statement of one shape however
# many ranges, which each read the chunks' primary key.
_SQLITE_RANGES = text(
    """
    SELECT c.document_id, c.chunk_index, c.text, c.start_char, c.end_char, c.page_number,
           c.locator
    FROM json_each(:ranges) AS r JOIN document_chunks AS c
      ON c.document_id = json_extract(r.value, '$[0]')
     AND c.chunk_index BETWEEN json_extract(r.value, '$[1]') AND json_extract(r.value, '$[2]')
    """
).columns(locator=JSON)
_POSTGRES_RANGES = (
    text(
        """
    SELECT c.document_id, c.chunk_index, c.text, c.start_char, c.end_char, c.page_number,
           c.locator
    FROM unnest(:documents, :firsts, :lasts) AS r(document_id, first, last)
    JOIN document_chunks AS c
      ON c.document_id = r.document_id AND c.chunk_index BETWEEN r.first AND r.last
    """
    )
    .columns(locator=JSON)
    .bindparams(
        bindparam("documents", type_=ARRAY(String)),
        bindparam("firsts", type_=ARRAY(Integer)),
        bindparam("lasts", type_=ARRAY(Integer)),
    )
)


def is_index_object(name: str | None, type_: str) -> bool:
    """Whether Alembic sees a part of the search index (FTS5's tables, the tsvector column and
    its index), which the models do not describe."""
    if name is None:
        return False
    if type_ == "table":
        return name == FTS_TABLE or name.startswith(f"{FTS_TABLE}_")
    return name in (VECTOR_COLUMN, VECTOR_INDEX)


async def match_counts(
    session: AsyncSession, tenant_id: str, terms: list[str], cap: int
) -> list[int]:
    """For each term, how many of the tenant's chunks match it, counted up to ``cap``."""
    if not terms:
        return []
    connection = await session.connection()
    if connection.dialect.name == "postgresql":
        parameters = {
            "tenant_id": tenant_id,
            "terms": terms,
            "cap": cap,
            "large_share": LARGE_TENANT_SHARE,
        }
        rows = await session.execute(_POSTGRES_MATCH_COUNTS, parameters)
        return [int(row[0]) for row in rows.all()]
    counts = []
    for term in terms:
        parameters = {"tenant_id": tenant_id, "match": fts5_match([term]), "cap": cap}
        counts.append(int(await session.scalar(_SQLITE_MATCH_COUNT, parameters) or 0))
    return counts


async def ranked_chunks(
    session: AsyncSession, tenant_id: str, terms: list[str], scope: Scope, limit: int
) -> list[Hit]:
    """The best ``limit`` of the tenant's chunks in scope for any of the terms, best first."""
    if not terms or (scope.collection_id is None and not scope.document_ids):
        return []
    connection = await session.connection()
    parameters: dict[str, Any] = {"tenant_id": tenant_id, "limit": limit}
    if scope.collection_id is not None:
        parameters["collection_id"] = scope.collection_id
    if connection.dialect.name == "postgresql":
        parameters["query"] = tsquery(terms)
        parameters["shortlist"] = limit * SHORTLIST_FACTOR
        parameters["ranked_at_most"] = max(RANKED_AT_MOST, parameters["shortlist"])
        if scope.collection_id is not None:
            statement = _POSTGRES_RANKED_IN_COLLECTION
        else:
            statement = _POSTGRES_RANKED_IN_DOCUMENTS
            parameters["document_ids"] = list(scope.document_ids)
    else:
        parameters["match"] = fts5_match(terms)
        if scope.collection_id is not None:
            statement = _SQLITE_RANKED_IN_COLLECTION
        else:
            statement = _SQLITE_RANKED_IN_DOCUMENTS
            parameters["document_ids"] = orjson.dumps(list(scope.document_ids)).decode()
    rows = await session.execute(statement, parameters)
    return [Hit(row[0], row[1], row[2], float(row[3])) for row in rows.all()]


async def read_chunks(
    session: AsyncSession, ranges: Sequence[ChunkRange]
) -> dict[tuple[str, int], StoredChunk]:
    """The chunks in those ranges, by (document id, chunk index). The ranges come from hits of
    ``ranked_chunks``, which only finds the tenant's chunks. (A tenant condition here too would
    lead SQLite to read every chunk of the tenant by its tenant index.)"""
    if not ranges:
        return {}
    connection = await session.connection()
    if connection.dialect.name == "postgresql":
        statement = _POSTGRES_RANGES
        parameters: dict[str, Any] = {
            "documents": [r.document_id for r in ranges],
            "firsts": [r.first for r in ranges],
            "lasts": [r.last for r in ranges],
        }
    else:
        statement = _SQLITE_RANGES
        ranges_json = [[r.document_id, r.first, r.last] for r in ranges]
        parameters = {"ranges": orjson.dumps(ranges_json).decode()}
    rows = await session.execute(statement, parameters)
    return {(row[0], row[1]): StoredChunk(*row) for row in rows.all()}
