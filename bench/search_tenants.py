"""Search statistics per tenant on PostgreSQL: what counting each query word among the tenant's
own chunks costs, and a whole search, for a tenant holding a large library and for a small one
beside it; and what the search index costs ingestion, by index. Prints figures; asserts nothing.

    .venv/bin/python bench/search_tenants.py --database-url URL [--chunks N] [--queries N]
                                             [--reuse] [--inserts N]

The library is written straight into the tables (COPY; the service's code would take an hour
for a million chunks): a large tenant's N chunks (documents of 100 generated sentences, as
bench/retrieval.py's scale part makes them) and a small tenant's 1,000, each tenant's documents
in a collection, then VACUUM ANALYZE. The database given is emptied and migrated first, unless
--reuse (a library an earlier run left). Then, in this process, for each tenant: app.search's
``statistics`` and ``match_counts`` alone, then ``search_collection_passages`` (10 passages)
twice: first with the process's word counts emptied (every word counted, as after a change of
the tenant's chunks), then again (the words' counts known), over queries of three words of the
tenant's own sentences, p50 / p95 / max.

Ingestion: N chunks inserted 100 to a transaction (a document each) into a scratch table with
the search column and no index, the GIN index on the column alone (before migration 0014), the
one on (tenant_id, search_vector) (after), or both; the server process's CPU (user + system)
per variant, alternated three times, least of the three; the last variant adds migration 0019's
trigger that counts the tenant's chunks. The rest of ingestion (parsing,
splitting, the Python side) is the same for all.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import math
import os
import random
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
from retrieval import TextMaker
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.engine import create_engine
from app.db.migrations import upgrade_to_head
from app.search import index
from app.search.service import MATCH_BUDGET, search_collection_passages, word_counts
from app.search.terms import STOPWORDS, query_terms

TENANTS = {"ten_bench_large": "col_bench_large", "ten_bench_small": "col_bench_small"}
SMALL_CHUNKS = 1_000
DOCUMENT_COLUMNS = [
    "id", "tenant_id", "kind", "media_type", "title", "metadata", "sha256", "size_bytes",
    "char_count", "chunk_count", "citable", "warnings", "created_at",
]  # fmt: skip
CHUNK_COLUMNS = ["document_id", "chunk_index", "tenant_id", "text", "start_char", "end_char"]


def plain_dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def reset(dsn: str) -> None:
    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    finally:
        await connection.close()


async def load(dsn: str, large_chunks: int) -> None:
    maker = TextMaker()
    now = datetime.now(UTC)
    connection = await asyncpg.connect(dsn)
    try:
        for tenant, collection in TENANTS.items():
            await connection.execute(
                "INSERT INTO tenants (id, name, created_at) VALUES ($1, $1, $2)", tenant, now
            )
            await connection.execute(
                "INSERT INTO collections (id, tenant_id, name, metadata, created_at) "
                "VALUES ($1, $2, 'library', '{}', $3)",
                collection,
                tenant,
                now,
            )
            chunks = large_chunks if tenant == "ten_bench_large" else SMALL_CHUNKS
            documents, rows = [], []
            for number in range(chunks // 100):
                document_id = f"doc_{tenant}_{number}"
                position = 0
                for chunk_index in range(100):
                    sentence = maker.sentence()
                    end = position + len(sentence)
                    rows.append((document_id, chunk_index, tenant, sentence, position, end))
                    position = end
                digest = hashlib.sha256(document_id.encode()).hexdigest()
                documents.append(
                    (document_id, tenant, "text", "text/plain", document_id, "{}", digest,
                     position, position, 100, True, "[]", now)
                )  # fmt: skip
                if len(rows) >= 100_000 or number == chunks // 100 - 1:
                    await connection.copy_records_to_table(
                        "documents", records=documents, columns=DOCUMENT_COLUMNS
                    )
                    await connection.copy_records_to_table(
                        "document_chunks", records=rows, columns=CHUNK_COLUMNS
                    )
                    await connection.execute(
                        "INSERT INTO collection_documents "
                        "SELECT $1, d, $2, $3 FROM unnest($4::text[]) AS d",
                        collection,
                        tenant,
                        now,
                        [row[0] for row in documents],
                    )
                    documents, rows = [], []
        await connection.execute("VACUUM ANALYZE")
    finally:
        await connection.close()


def percentiles(timings: list[float]) -> str:
    ordered = sorted(timings)
    p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
    return (
        f"p50 {statistics.median(ordered) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms, "
        f"max {ordered[-1] * 1000:.1f} ms"
    )


async def measure(url: str, queries: int) -> None:
    engine = create_engine(url)
    rng = random.Random(5)
    try:
        async with AsyncSession(engine) as session:
            for tenant, collection in TENANTS.items():
                sample = await session.execute(
                    text(
                        "SELECT text FROM document_chunks WHERE tenant_id = :tenant "
                        "ORDER BY md5(document_id || chunk_index) LIMIT :n"
                    ),
                    {"tenant": tenant, "n": queries + 20},
                )
                asked = []
                for sentence in sample.scalars():
                    words = [w.strip(".").lower() for w in sentence.split()]
                    words = [w for w in words if w not in STOPWORDS]
                    asked.append(" ".join(["what", "is", *rng.sample(words, min(3, len(words)))]))
                counts, first, repeated, found = [], [], [], 0
                for number, query in enumerate(asked):
                    word_counts.clear()
                    asking = time.perf_counter()
                    statistics = await index.statistics(session, tenant)
                    await index.match_counts(
                        session, tenant, query_terms(query), MATCH_BUDGET + 1,
                        large=statistics.large,
                    )  # fmt: skip
                    counted = time.perf_counter()
                    await session.rollback()
                    timings = []
                    for _ in range(2):  # words counted first, then known to the process
                        began = time.perf_counter()
                        passages = await search_collection_passages(
                            session, tenant, query, collection, 10, window=1, per_document=3
                        )
                        timings.append(time.perf_counter() - began)
                        await session.rollback()
                    if number >= 20:  # the first 20 warm the connection and the caches
                        counts.append(counted - asking)
                        first.append(timings[0])
                        repeated.append(timings[1])
                        found += bool(passages)
                chunks = await session.scalar(
                    text("SELECT count(*) FROM document_chunks WHERE tenant_id = :tenant"),
                    {"tenant": tenant},
                )
                print(f"{tenant} ({chunks} chunks), {len(counts)} queries, {found} found:")
                print(f"  statistics + match_counts: {percentiles(counts)}")
                print(f"  searchPassages in process, words not counted yet: {percentiles(first)}")
                print(f"  searchPassages in process, words known: {percentiles(repeated)}")
    finally:
        await engine.dispose()


SCRATCH = (
    "CREATE TABLE bench_scratch (document_id varchar(40), chunk_index int, "
    "tenant_id varchar(40), text text, search_vector tsvector GENERATED ALWAYS AS "
    "(to_tsvector('english', text)) STORED) WITH (autovacuum_enabled = false)"
)
INDEXES = {
    "no index": [],
    "gin (search_vector)": ["CREATE INDEX ON bench_scratch USING gin (search_vector)"],
    "gin (tenant_id, search_vector)": [
        "CREATE INDEX ON bench_scratch USING gin (tenant_id, search_vector)"
    ],
    "both": [
        "CREATE INDEX ON bench_scratch USING gin (search_vector)",
        "CREATE INDEX ON bench_scratch USING gin (tenant_id, search_vector)",
    ],
    # Migration 0019's trigger, counting the tenant's chunks (into the library's own
    # statistics, which are counted again afterwards).
    "gin (tenant_id, search_vector) + statistics trigger": [
        "CREATE INDEX ON bench_scratch USING gin (tenant_id, search_vector)",
        "CREATE TRIGGER bench_statistics AFTER INSERT ON bench_scratch "
        "REFERENCING NEW TABLE AS new_rows "
        "FOR EACH STATEMENT EXECUTE FUNCTION search_statistics_count()",
    ],
}
RECOUNT = (
    "DELETE FROM search_statistics; "
    "INSERT INTO search_statistics (tenant_id, shard, chunk_count, generation) "
    "SELECT tenant_id, 0, count(*), floor(random() * 1e15)::bigint + 1 "
    "FROM document_chunks GROUP BY tenant_id"
)


def backend_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def ingestion(dsn: str, chunks: int) -> None:
    """Needs the server on this machine (its process's CPU is read from /proc)."""
    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute(
            "DROP TABLE IF EXISTS bench_staging; CREATE TABLE bench_staging AS "
            "SELECT (row_number() OVER () - 1) / 100 AS document, document_id, chunk_index, "
            "tenant_id, text FROM document_chunks WHERE tenant_id = 'ten_bench_large' "
            f"LIMIT {chunks}; CREATE INDEX ON bench_staging (document)"
        )
        pid = await connection.fetchval("SELECT pg_backend_pid()")
        spent: dict[str, list[float]] = {}
        for _ in range(3):
            for name, statements in INDEXES.items():
                await connection.execute("DROP TABLE IF EXISTS bench_scratch")
                await connection.execute(SCRATCH)
                for statement in statements:
                    await connection.execute(statement)
                before = backend_cpu(pid)
                for document in range(chunks // 100):
                    await connection.execute(
                        "INSERT INTO bench_scratch SELECT document_id, chunk_index, tenant_id, "
                        "text FROM bench_staging WHERE document = $1",
                        document,
                    )
                spent.setdefault(name, []).append(backend_cpu(pid) - before)
        print(f"ingestion: {chunks} chunks, 100 a transaction, PostgreSQL's CPU (least of 3):")
        for name, seconds in spent.items():
            print(f"  {name}: {min(seconds):.2f} s")
        await connection.execute("DROP TABLE bench_scratch; DROP TABLE bench_staging")
        await connection.execute(RECOUNT)
    finally:
        await connection.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", required=True, help="a PostgreSQL database of yours")
    parser.add_argument("--chunks", type=int, default=1_000_000, help="the large tenant's")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--inserts", type=int, default=100_000, help="chunks; 0: skip")
    parser.add_argument("--reuse", action="store_true", help="an earlier run's library")
    args = parser.parse_args()
    dsn = plain_dsn(args.database_url)
    if not args.reuse:
        started = time.perf_counter()
        asyncio.run(reset(dsn))
        upgrade_to_head(args.database_url)
        asyncio.run(load(dsn, args.chunks))
        print(f"library of {args.chunks + SMALL_CHUNKS} chunks written in "
              f"{time.perf_counter() - started:.0f} s")  # fmt: skip
    asyncio.run(measure(args.database_url, args.queries))
    if args.inserts:
        asyncio.run(ingestion(dsn, args.inserts))


if __name__ == "__main__":
    main()
