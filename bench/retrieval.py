"""Retrieval: how well searchPassages finds the answer to real questions, and how fast it is
over a large library. Prints figures; asserts nothing.

    .venv/bin/python bench/retrieval.py quality [--database-url URL] [--misses]
    .venv/bin/python bench/retrieval.py scale [--database-url URL] [--documents N] [--queries N]

quality: the documents of tests/fixtures (help-centre articles, the Amazon letter, sample PDFs)
and the questions of bench/retrieval_questions.jsonl, each with the exact quote that answers it.
A question is answered at k when one of the first k passages contains its quote (whitespace
compared loosely: PDF text breaks lines with CRLF). Reports recall@5, recall@10 and MRR.

scale: N generated documents of 100 sentences (chunks) each, stored through the service code
in this process; ingestion once with the search index and once with it dropped (on the first
--compare-documents documents, each into an empty database); then `citegate serve` on the
full database answers searchPassages over one collection of all N documents, timed from the
client, and its peak RSS is read. The database given (PostgreSQL: use one of your own) is
emptied first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import re
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
from harness import peak_rss_mib, running
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.pool import NullPool

from app.collections.service import add_documents, create_collection
from app.db.engine import create_engine, create_session_factory
from app.db.migrations import upgrade_to_head
from app.db.models import DEFAULT_TENANT_ID
from app.documents.service import DocumentFields, store_bytes
from app.search.service import search_passages
from app.search.terms import STOPWORDS
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
QUESTIONS = Path(__file__).resolve().parent / "retrieval_questions.jsonl"
MAX_BYTES = 64 * 1024 * 1024
T = TypeVar("T")


def fresh_url(given: str | None, name: str) -> str:
    """The database to use, emptied and migrated: the given one, or a new SQLite file."""
    if given is None:
        return f"sqlite+aiosqlite:///{tempfile.mkdtemp(prefix='citegate-retrieval-')}/{name}.db"
    url = make_url(given)
    if url.drivername.startswith("sqlite"):
        assert url.database
        for suffix in ("", "-wal", "-shm"):
            Path(url.database + suffix).unlink(missing_ok=True)
        return given

    async def reset() -> None:
        engine = create_engine(given, poolclass=NullPool)
        async with engine.begin() as connection:
            await connection.execute(text("DROP SCHEMA public CASCADE"))
            await connection.execute(text("CREATE SCHEMA public"))
        await engine.dispose()

    asyncio.run(reset())
    return given


def prepared(given: str | None, name: str) -> str:
    url = fresh_url(given, name)
    upgrade_to_head(url)
    return url


def in_session(url: str, work: Callable[[AsyncSession], Awaitable[T]]) -> T:
    async def run() -> T:
        engine = create_engine(url)
        try:
            async with create_session_factory(engine)() as session:
                return await work(session)
        finally:
            await engine.dispose()

    return asyncio.run(run())


async def store(session: AsyncSession, data: bytes, title: str | None = None) -> str:
    stored = await store_bytes(
        session, DEFAULT_TENANT_ID, data, DocumentFields(title=title), max_bytes=MAX_BYTES
    )
    return stored.document.id


# --- quality -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Question:
    question: str
    document: str  # a path under tests/fixtures
    quote: str


def loose(value: str) -> str:
    return re.sub(r"\s+", " ", value).strip().lower()


def load_questions() -> list[Question]:
    return [Question(**json.loads(line)) for line in QUESTIONS.read_text().splitlines() if line]


async def _quality(session: AsyncSession, questions: list[Question], misses: bool) -> None:
    settings = Settings()
    paths = sorted({q.document for q in questions})
    ids = {path: await store(session, (FIXTURES / path).read_bytes()) for path in paths}
    texts: dict[str, str] = {}
    for path, document_id in ids.items():
        rows = await session.execute(
            text("SELECT text FROM document_chunks WHERE document_id = :d ORDER BY chunk_index"),
            {"d": document_id},
        )
        texts[path] = loose("".join(row[0] for row in rows))
    for q in questions:
        assert loose(q.quote) in texts[q.document], f"quote not in {q.document}: {q.quote!r}"
    library = list(ids.values())
    ranks: list[int | None] = []
    started = time.perf_counter()
    for q in questions:
        passages = await search_passages(
            session,
            DEFAULT_TENANT_ID,
            q.question,
            library,
            10,
            window=settings.search_window_chunks,
            per_document=settings.search_max_passages_per_document,
        )
        rank = next(
            (
                position
                for position, p in enumerate(passages, 1)
                if p.document_id == ids[q.document] and loose(q.quote) in loose(p.text)
            ),
            None,
        )
        ranks.append(rank)
        if misses and (rank is None or rank > 5):
            top = loose(passages[0].text)[:160] if passages else "-"
            print(f"  rank {rank}: {q.question!r} -> {q.quote!r}\n    top: {top}")
    elapsed = time.perf_counter() - started

    def recall(k: int) -> float:
        return sum(1 for r in ranks if r is not None and r <= k) / len(ranks)

    mrr = sum(1 / r for r in ranks if r is not None) / len(ranks)
    per_document: dict[str, list[int | None]] = {}
    for q, r in zip(questions, ranks, strict=True):
        per_document.setdefault(q.document, []).append(r)
    print(f"{len(questions)} questions over {len(paths)} documents")
    print(f"recall@5 {recall(5):.3f}  recall@10 {recall(10):.3f} (target >= 0.90)  MRR {mrr:.3f}")
    for path, found in sorted(per_document.items()):
        hits = sum(1 for r in found if r is not None and r <= 10)
        print(f"  {path}: recall@10 {hits}/{len(found)}")
    print(
        f"window {settings.search_window_chunks}, at most "
        f"{settings.search_max_passages_per_document} passages a document; "
        f"{elapsed / len(questions) * 1000:.1f} ms a search in process"
    )


def quality(database_url: str | None, misses: bool) -> None:
    url = prepared(database_url, "quality")
    print(f"quality, database: {make_url(url).drivername}")
    questions = load_questions()
    in_session(url, lambda session: _quality(session, questions, misses))


# --- scale ---------------------------------------------------------------------------------

SYLLABLES = "ka ri to mo na shi lu ve pe da zo fi gra bel tor min quo sar vin e o a u".split()
COMMON = "the of and to in is was for on that with as by at from it an be this which are".split()


def vocabulary(size: int, rng: random.Random) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


class TextMaker:
    """English-like sentences: content words drawn by Zipf's law from rank 100 on, as in
    English, where the first hundred ranks are function words, with function words between."""

    def __init__(self, seed: int = 11, words: int = 30_000) -> None:
        self.rng = random.Random(seed)
        self.words = vocabulary(words, self.rng)
        weights = [1 / (rank + 100) for rank in range(len(self.words))]
        self.cumulative = list(_accumulate(weights))

    def sentence(self) -> str:
        count = self.rng.randint(6, 14)
        rare = self.rng.choices(self.words, cum_weights=self.cumulative, k=count)
        common = self.rng.choices(COMMON, k=count // 2)
        mixed = rare + common
        self.rng.shuffle(mixed)
        return " ".join(mixed).capitalize() + ". "

    def document(self, sentences: int) -> str:
        return "".join(self.sentence() for _ in range(sentences))


def _accumulate(weights: list[float]) -> list[float]:
    total, out = 0.0, []
    for weight in weights:
        total += weight
        out.append(total)
    return out


def drop_index(url: str) -> None:
    """The schema without the search index. On SQLite the service still runs its statement
    that indexes a document: into a view that takes the rows and keeps nothing."""
    statements = (
        [
            "DROP TRIGGER document_chunks_search_delete",
            "DROP TRIGGER document_chunks_search_update",
            "DROP TABLE chunk_search",
            "CREATE VIEW chunk_search(rowid, terms) AS SELECT 0, '' WHERE 0",
            "CREATE TRIGGER chunk_search_nothing INSTEAD OF INSERT ON chunk_search BEGIN "
            "SELECT 1; END",
        ]
        if make_url(url).drivername.startswith("sqlite")
        else [
            "DROP INDEX ix_document_chunks_search_vector",
            "ALTER TABLE document_chunks DROP COLUMN search_vector",
        ]
    )

    async def run() -> None:
        engine = create_engine(url, poolclass=NullPool)
        async with engine.begin() as connection:
            for statement in statements:
                await connection.execute(text(statement))
        await engine.dispose()

    asyncio.run(run())


def ingest(url: str, documents: list[bytes], report_every: int = 0) -> tuple[list[str], float]:
    async def work(session: AsyncSession) -> tuple[list[str], float]:
        ids = []
        started = time.perf_counter()
        for number, data in enumerate(documents, 1):
            ids.append(await store(session, data))
            if report_every and number % report_every == 0:
                rate = number / (time.perf_counter() - started)
                print(f"  {number} documents, {rate:.0f}/s", flush=True)
        return ids, time.perf_counter() - started

    return in_session(url, work)


def settle(url: str) -> None:
    """What autovacuum does after a bulk load (statistics; on PostgreSQL the GIN index's pending
    entries merged), so that searches meet the database as it usually is."""
    postgres = not make_url(url).drivername.startswith("sqlite")

    async def run() -> None:
        engine = create_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
        async with engine.connect() as connection:
            await connection.execute(text("VACUUM ANALYZE" if postgres else "ANALYZE"))
        await engine.dispose()

    started = time.perf_counter()
    asyncio.run(run())
    print(f"{'VACUUM ANALYZE' if postgres else 'ANALYZE'} in {time.perf_counter() - started:.0f} s")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(fraction * len(ordered)) - 1)]


def scale(database_url: str | None, count: int, compare: int, queries: int) -> None:
    maker = TextMaker()
    started = time.perf_counter()
    documents = [maker.document(100).encode() for _ in range(count)]
    print(
        f"scale: {count} documents of 100 chunks ({sum(map(len, documents)) / 1e6:.0f} MB), "
        f"generated in {time.perf_counter() - started:.0f} s"
    )
    compare = min(compare, count)
    url = prepared(database_url, "without")
    drop_index(url)
    _, without = ingest(url, documents[:compare])
    url = prepared(database_url, "scale")
    print(f"database: {make_url(url).drivername}")
    ids, with_first = ingest(url, documents[:compare])
    rest, with_rest = ingest(url, documents[compare:], report_every=2000)
    ids += rest
    print(
        f"ingestion of {compare} documents: without the index {compare / without:.0f}/s, "
        f"with it {compare / with_first:.0f}/s = {without / with_first:.0%} as fast "
        "(target >= 80%)"
    )
    if rest:
        print(f"ingestion of the other {len(rest)}: {len(rest) / with_rest:.0f}/s")

    async def collect(session: AsyncSession) -> str:
        counted = await create_collection(session, DEFAULT_TENANT_ID, "everything", None, {})
        for start in range(0, len(ids), 1000):
            await add_documents(
                session, DEFAULT_TENANT_ID, counted.collection.id, ids[start : start + 1000]
            )
        return counted.collection.id

    collection_id = in_session(url, collect)
    settle(url)
    rng = random.Random(5)
    asked = []
    for _ in range(queries):
        sentence = rng.choice(documents).decode().split(". ")[rng.randrange(99)]
        words = [w for w in sentence.lower().split() if w not in STOPWORDS]
        asked.append(" ".join(["what", "is", *rng.sample(words, min(3, len(words)))]))
    with (
        running(url, None) as stack,
        httpx.Client(base_url=stack.citegate, headers=stack.headers, timeout=60) as http,
    ):
        body: dict[str, Any] = {"collection_id": collection_id, "limit": 10}
        for query in asked[:20]:  # warm-up: connections, caches
            http.post("/v1/search", json=body | {"query": query})
        timings, found = [], 0
        for query in asked:
            began = time.perf_counter()
            response = http.post("/v1/search", json=body | {"query": query})
            timings.append(time.perf_counter() - began)
            assert response.status_code == 200, response.text
            found += bool(response.json()["data"])
        rss = peak_rss_mib(stack.pid)
    chunks = count * 100
    print(
        f"searchPassages over a collection of {count} documents ({chunks} chunks), "
        f"{queries} queries ({found} found passages): "
        f"p50 {statistics.median(timings) * 1000:.1f} ms (target < 20), "
        f"p95 {percentile(timings, 0.95) * 1000:.1f} ms (target < 50), "
        f"max {max(timings) * 1000:.1f} ms"
    )
    print(f"service peak RSS: {rss:.0f} MiB (target < 300)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("part", choices=["quality", "scale"])
    parser.add_argument("--database-url", help="default: a new SQLite file")
    parser.add_argument("--documents", type=int, default=10_000)
    parser.add_argument("--compare-documents", type=int, default=2_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--misses", action="store_true", help="print the questions missed")
    args = parser.parse_args()
    if args.part == "quality":
        quality(args.database_url, args.misses)
    else:
        scale(args.database_url, args.documents, args.compare_documents, args.queries)


if __name__ == "__main__":
    main()
