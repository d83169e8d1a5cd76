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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import JSON, Float, Integer, String, bindparam, text
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
# How much the database's own rank (BM25 on SQLite, cover density on PostgreSQL), squashed into
# [0, 1), adds to a chunk's score: it only orders chunks that hold equally rare words.
TIE_WEIGHT = 0.001
# A tenant holding at least this share of all chunks (from the column's statistics, which
# ANALYZE and autovacuum keep) is searched by the words' rows, not the tenant's (see below).
LARGE_TENANT_SHARE = 0.5

# A chunk's score is the sum of the weights (app.search.terms.rarity) of the query's words it
# holds, however long it is, plus the database's own rank times TIE_WEIGHT.
#
# A search covers either some documents (a JSON array or an array parameter: one parameter
# however many) or a collection. Each statement is written out whole: only parameters vary.
#
# SQLite: each word is matched on its own (FTS5 cannot say which words of an OR matched a row),
# a JSON array of [match, weight] pairs joined to the index; a chunk's BM25 for the query is
# the sum of its BM25 for each word.
_SQLITE_RANKED = """
    WITH words AS (
        SELECT json_extract(value, '$[0]') AS match, json_extract(value, '$[1]') AS weight
        FROM json_each(:words)
    ), hits AS MATERIALIZED (
        SELECT chunk_search.rowid AS id, words.weight, bm25(chunk_search) AS bm25
        FROM words JOIN chunk_search ON chunk_search MATCH words.match
    ), scored AS MATERIALIZED (
        SELECT id, sum(weight) AS rarity, -sum(bm25) AS rank FROM hits GROUP BY id
    )
    SELECT c.document_id, c.chunk_index, c.page_number,
           s.rarity + :tie_weight * max(s.rank, 0) / (1 + max(s.rank, 0)) AS score
    FROM scored AS s JOIN document_chunks AS c ON c.rowid = s.id
    WHERE c.tenant_id = :tenant_id AND c.document_id IN ({scope})
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

# PostgreSQL. The GIN index finds the matching chunks; the wanted documents are a join, not a
# filter the planner may prefer to drive the scan with (it cannot tell how few of the
# documents' chunks match). Every chunk ranked is a heap row read, so at most RANKED_AT_MOST of
# those in scope are: more only when every word of the query is common (the service keeps the
# rarest word however common), and then they rank about alike anyway. The CTEs are read only as
# far as the LIMIT asks. Each chunk in scope is weighed by the words it holds (one ``@@`` a
# word), the best by weight (then ``ts_rank``) shortlisted, and only the shortlist ranked by
# cover density (``ts_rank_cd`` costs several times what ``ts_rank`` does a chunk).
#
# The index on (tenant_id, search_vector) (migration 0015) finds only the tenant's chunks, but
# intersects the words' chunks with all of the tenant's: cheap for a tenant among others, dear
# for one holding most of the chunks. For such a tenant the tenant is checked on the rows the
# words find instead (``OFFSET 0`` keeps it out of the index scan). Which plan only changes
# the time, never the rows.
_POSTGRES_MATCHING_BY_TENANT = """
        SELECT c.document_id, c.chunk_index, c.page_number, c.search_vector
        FROM document_chunks AS c
        WHERE c.search_vector @@ to_tsquery('english', :query) AND c.tenant_id = :tenant_id
"""
_POSTGRES_MATCHING_BY_WORDS = """
        SELECT found.document_id, found.chunk_index, found.page_number, found.search_vector
        FROM (
            SELECT c.tenant_id, c.document_id, c.chunk_index, c.page_number, c.search_vector
            FROM document_chunks AS c WHERE c.search_vector @@ to_tsquery('english', :query)
            OFFSET 0
        ) AS found
        WHERE found.tenant_id = :tenant_id
"""
_POSTGRES_RANKED = """
    WITH words AS MATERIALIZED (
        SELECT to_tsquery('english', w.term) AS q, w.weight
        FROM unnest(:terms, :weights) AS w(term, weight)
    ), matching AS MATERIALIZED ({matching}), in_scope AS MATERIALIZED (
        SELECT m.document_id, m.chunk_index, m.page_number, m.search_vector
        FROM matching AS m JOIN {scope} USING (document_id)
        LIMIT :ranked_at_most
    ), shortlist AS MATERIALIZED (
        SELECT i.document_id, i.chunk_index, i.page_number, i.search_vector,
               coalesce(
                   (SELECT sum(words.weight) FROM words WHERE i.search_vector @@ words.q), 0
               ) AS rarity
        FROM in_scope AS i
        ORDER BY rarity DESC, ts_rank(i.search_vector, to_tsquery('english', :query)) DESC,
                 i.document_id, i.chunk_index
        LIMIT :shortlist
    ), ranked AS MATERIALIZED (
        SELECT document_id, chunk_index, page_number, rarity,
               ts_rank_cd(search_vector, to_tsquery('english', :query)) AS rank
        FROM shortlist
    )
    SELECT document_id, chunk_index, page_number,
           rarity + :tie_weight * rank / (1 + rank) AS score
    FROM ranked
    ORDER BY score DESC, document_id, chunk_index
    LIMIT :limit
"""
_POSTGRES_IN_DOCUMENTS = "unnest(:document_ids) AS wanted(document_id)"
_POSTGRES_IN_COLLECTION = (
    "(SELECT document_id FROM collection_documents WHERE collection_id = :collection_id) AS wanted"
)
_POSTGRES_RANKED_STATEMENTS = {
    (large, in_collection): text(
        _POSTGRES_RANKED.format(
            matching=_POSTGRES_MATCHING_BY_WORDS if large else _POSTGRES_MATCHING_BY_TENANT,
            scope=_POSTGRES_IN_COLLECTION if in_collection else _POSTGRES_IN_DOCUMENTS,
        )
    ).bindparams(
        bindparam("terms", type_=ARRAY(String)),
        bindparam("weights", type_=ARRAY(Float)),
        *([] if in_collection else [bindparam("document_ids", type_=ARRAY(String))]),
    )
    for large in (False, True)
    for in_collection in (False, True)
}

# A tenant's statistics (migration 0019), sums over its rows (its shards): its chunks, the
# generation of its index (a tenant with no chunk yet has neither: 0 and 0), and on PostgreSQL
# whether it holds the most of all chunks (the plan choice above).
_SQLITE_STATISTICS = text(
    """
    SELECT coalesce(sum(chunk_count), 0), coalesce(sum(generation), 0), 0
    FROM search_statistics WHERE tenant_id = :tenant_id
    """
)
_POSTGRES_STATISTICS = text(
    """
    SELECT coalesce(sum(s.chunk_count), 0)::bigint, coalesce(sum(s.generation), 0)::bigint, (
        SELECT coalesce(max(common.share), 0)
        FROM pg_stats AS p,
             unnest(p.most_common_vals::text::text[], p.most_common_freqs) AS common(tenant, share)
        WHERE p.schemaname = current_schema() AND p.tablename = 'document_chunks'
          AND p.attname = 'tenant_id' AND common.tenant = :tenant_id
    )
    FROM search_statistics AS s WHERE s.tenant_id = :tenant_id
    """
)

# How many of the tenant's chunks match each term, counted up to a cap: the count stops there,
# so a common word costs no more than a rare one, and only the tenant's own chunks are counted
# (another tenant's never change which words a search ranks by, nor how much they weigh).
# PostgreSQL: all the terms in one statement, by either plan above (by the words' rows, a
# capped count stops after at most about cap / share rows). SQLite: FTS5 finds the matches of
# every tenant and the join keeps the tenant's.
_SQLITE_MATCH_COUNT = text(
    """
    SELECT count(*) FROM (
        SELECT 1 FROM chunk_search JOIN document_chunks AS c ON c.rowid = chunk_search.rowid
        WHERE chunk_search MATCH :match AND c.tenant_id = :tenant_id
        LIMIT :cap
    )
    """
)
_POSTGRES_MATCH_COUNTS = """
    WITH queries AS MATERIALIZED (
        SELECT t.position, to_tsquery('english', t.term) AS q
        FROM unnest(:terms) WITH ORDINALITY AS t(term, position)
    )
    SELECT (SELECT count(*) FROM ({matching} LIMIT :cap) AS matching)
    FROM queries
    ORDER BY queries.position
"""
_POSTGRES_COUNT_BY_TENANT = """
        SELECT 1 FROM document_chunks AS c
        WHERE c.tenant_id = :tenant_id AND c.search_vector @@ queries.q
"""
_POSTGRES_COUNT_BY_WORDS = """
        SELECT 1 FROM (
            SELECT c.tenant_id FROM document_chunks AS c WHERE c.search_vector @@ queries.q
            OFFSET 0
        ) AS found
        WHERE found.tenant_id = :tenant_id
"""
_POSTGRES_MATCH_COUNTS_STATEMENTS = {
    large: text(
        _POSTGRES_MATCH_COUNTS.format(
            matching=_POSTGRES_COUNT_BY_WORDS if large else _POSTGRES_COUNT_BY_TENANT
        )
    ).bindparams(bindparam("terms", type_=ARRAY(String)))
    for large in (False, True)
}


@dataclass(frozen=True, slots=True)
class Statistics:
    """A tenant's number of chunks, the generation of its index (it changes whenever the
    tenant's chunks do), and whether it holds the most of all chunks (PostgreSQL's plans)."""

    chunk_count: int
    generation: int
    large: bool


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


async def statistics(session: AsyncSession, tenant_id: str) -> Statistics:
    """The tenant's search statistics, as of now."""
    connection = await session.connection()
    postgres = connection.dialect.name == "postgresql"
    statement = _POSTGRES_STATISTICS if postgres else _SQLITE_STATISTICS
    row = (await session.execute(statement, {"tenant_id": tenant_id})).first()
    if row is None:
        return Statistics(0, 0, large=False)
    return Statistics(int(row[0]), int(row[1]), large=float(row[2]) >= LARGE_TENANT_SHARE)


async def match_counts(
    session: AsyncSession, tenant_id: str, terms: list[str], cap: int, *, large: bool = False
) -> list[int]:
    """For each term, how many of the tenant's chunks match it, counted up to ``cap``.
    ``large``: the tenant holds the most of all chunks (``Statistics.large``)."""
    if not terms:
        return []
    connection = await session.connection()
    if connection.dialect.name == "postgresql":
        parameters = {"tenant_id": tenant_id, "terms": terms, "cap": cap}
        rows = await session.execute(_POSTGRES_MATCH_COUNTS_STATEMENTS[large], parameters)
        return [int(row[0]) for row in rows.all()]
    counts = []
    for term in terms:
        parameters = {"tenant_id": tenant_id, "match": fts5_match([term]), "cap": cap}
        counts.append(int(await session.scalar(_SQLITE_MATCH_COUNT, parameters) or 0))
    return counts


async def ranked_chunks(
    session: AsyncSession,
    tenant_id: str,
    weights: Mapping[str, float],
    scope: Scope,
    limit: int,
    *,
    large: bool = False,
) -> list[Hit]:
    """The best ``limit`` of the tenant's chunks in scope for any of the terms (``weights``:
    each term's weight, app.search.terms.rarity), best first: a chunk scores the weights of
    the terms it holds, ties broken by the database's own rank. ``large``: as for
    ``match_counts``."""
    if not weights or (scope.collection_id is None and not scope.document_ids):
        return []
    terms = list(weights)
    connection = await session.connection()
    parameters: dict[str, Any] = {
        "tenant_id": tenant_id,
        "limit": limit,
        "tie_weight": TIE_WEIGHT,
    }
    if scope.collection_id is not None:
        parameters["collection_id"] = scope.collection_id
    if connection.dialect.name == "postgresql":
        parameters["query"] = tsquery(terms)
        parameters["terms"] = terms
        parameters["weights"] = [weights[term] for term in terms]
        parameters["shortlist"] = limit * SHORTLIST_FACTOR
        parameters["ranked_at_most"] = max(RANKED_AT_MOST, parameters["shortlist"])
        statement = _POSTGRES_RANKED_STATEMENTS[(large, scope.collection_id is not None)]
        if scope.collection_id is None:
            parameters["document_ids"] = list(scope.document_ids)
    else:
        words = [[fts5_match([term]), weight] for term, weight in weights.items()]
        parameters["words"] = orjson.dumps(words).decode()
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
