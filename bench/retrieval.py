"""Retrieval: how well searchPassages finds the answer to real questions, and how fast it is
over a large library. Prints figures; asserts nothing.

    .venv/bin/python bench/retrieval.py quality [--database-url URL] [--misses]
    .venv/bin/python bench/retrieval.py scale [--database-url URL] [--documents N] [--queries N]
                                              [--reuse]

quality: the documents of tests/fixtures (help-centre articles, the Amazon letter, sample PDFs)
and the questions of bench/retrieval_questions.jsonl, each with the exact quote that answers it.
A question is answered at k when one of the first k passages contains its quote (whitespace
compared loosely: PDF text breaks lines with CRLF). Reports recall@5, recall@10 and MRR.

scale: N generated documents of 100 sentences (chunks) each, stored through the service code
in this process; ingestion once with the search index and once with it dropped (on the first
--compare-documents documents, each into an empty database); then `citegate serve` on the
full database answers searchPassages over one collection of all N documents, timed from the
client; then passages answers over that collection (POST /v1/answers, retrieval mode
"passages") against a fake Messages API that answers at once, each compared with the time the
same Messages request (as Citegate sent it) takes at the fake alone; then Citegate's peak RSS is
read. The database given (PostgreSQL: use one of your own) is emptied first, unless --reuse:
then it is the library of an earlier run with the same --documents, searched again as it is.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import orjson
from harness import Stack, peak_rss_mib, running
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.pool import NullPool

from app.collections.service import add_documents, create_collection
from app.db.engine import create_engine, run_in_session
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
LIBRARY = "everything"  # the scale part's collection
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
    # Statistics, as autovacuum keeps them: PostgreSQL estimates how common words are from them.
    await session.commit()
    await session.execute(text("ANALYZE"))
    await session.commit()
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
    run_in_session(url, lambda session: _quality(session, questions, misses))


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

    return run_in_session(url, work)


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


def build_library(
    database_url: str | None, documents: list[bytes], compare: int
) -> tuple[str, str]:
    """The library ingested (timed with and without the index) into one collection: the
    database's URL and the collection's id."""
    compare = min(compare, len(documents))
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
        counted = await create_collection(session, DEFAULT_TENANT_ID, LIBRARY, None, {})
        for start in range(0, len(ids), 1000):
            await add_documents(
                session, DEFAULT_TENANT_ID, counted.collection.id, ids[start : start + 1000]
            )
        return counted.collection.id

    collection_id = run_in_session(url, collect)
    settle(url)
    return url, collection_id


def library_of(url: str) -> str:
    """The collection of an earlier run's library."""

    async def find(session: AsyncSession) -> str:
        found = await session.scalar(
            text("SELECT id FROM collections WHERE name = :name"), {"name": LIBRARY}
        )
        assert found is not None, f"no collection {LIBRARY!r}: run without --reuse first"
        return str(found)

    return run_in_session(url, find)


def scale(database_url: str | None, count: int, compare: int, queries: int, reuse: bool) -> None:
    maker = TextMaker()
    started = time.perf_counter()
    documents = [maker.document(100).encode() for _ in range(count)]
    print(
        f"scale: {count} documents of 100 chunks ({sum(map(len, documents)) / 1e6:.0f} MB), "
        f"generated in {time.perf_counter() - started:.0f} s"
    )
    if reuse:
        assert database_url is not None, "--reuse needs --database-url"
        url, collection_id = database_url, library_of(database_url)
        print(f"database: {make_url(url).drivername}, the library of an earlier run")
    else:
        url, collection_id = build_library(database_url, documents, compare)
    rng = random.Random(5)
    asked = []
    for _ in range(queries):
        sentence = rng.choice(documents).decode().split(". ")[rng.randrange(99)]
        words = [w for w in sentence.lower().split() if w not in STOPWORDS]
        asked.append(" ".join(["what", "is", *rng.sample(words, min(3, len(words)))]))
    with (
        running(url, __file__) as stack,
        httpx.Client(base_url=stack.citegate, headers=stack.headers, timeout=60) as http,
    ):
        measure_search(http, collection_id, asked, count * 100)
        measure_passages_answers(http, stack, collection_id, asked)
        rss = peak_rss_mib(stack.pid)
    print(f"service peak RSS: {rss:.0f} MiB (target < 300)")


def measure_search(http: httpx.Client, collection_id: str, asked: list[str], chunks: int) -> None:
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
    print(
        f"searchPassages over a collection of {chunks // 100} documents ({chunks} chunks), "
        f"{len(asked)} queries ({found} found passages): "
        f"p50 {statistics.median(timings) * 1000:.1f} ms (target < 20), "
        f"p95 {percentile(timings, 0.95) * 1000:.1f} ms (target < 50), "
        f"max {max(timings) * 1000:.1f} ms"
    )


def measure_passages_answers(
    http: httpx.Client, stack: Stack, collection_id: str, asked: list[str]
) -> None:
    """Each question answered through Citegate, and its Messages request (as the fake received
    it from Citegate) sent to the fake alone: the difference is what Citegate adds."""
    assert stack.fake is not None
    body: dict[str, Any] = {"collection_id": collection_id, "retrieval": {"mode": "passages"}}
    sent = []
    for question in asked:  # warm-up, and the request Citegate sends upstream for each
        response = http.post("/v1/answers", json=body | {"question": question})
        assert response.status_code == 200, response.text[:300]
        sent.append(http.get(f"{stack.fake}/last").content)
    cited = 0
    through, alone = [], []
    for question, request in zip(asked, sent, strict=True):
        began = time.perf_counter()
        response = http.post(f"{stack.fake}/v1/messages", content=request)
        alone.append(time.perf_counter() - began)
        assert response.status_code == 200, response.text[:300]
        began = time.perf_counter()
        response = http.post("/v1/answers", json=body | {"question": question})
        through.append(time.perf_counter() - began)
        assert response.status_code == 200, response.text[:300]
        citations = [c for segment in response.json()["segments"] for c in segment["citations"]]
        cited += any(c.get("verified") for c in citations)
    passages = len(orjson.loads(sent[0])["messages"][-1]["content"]) - 1
    print(
        f"passages answers over that collection ({len(asked)} questions, {passages} passages "
        f"sent for the first, {cited} answers with a verified citation): added "
        f"p50 {(statistics.median(through) - statistics.median(alone)) * 1000:.1f} ms, "
        f"p95 {(percentile(through, 0.95) - percentile(alone, 0.95)) * 1000:.1f} ms "
        "(target < 50)\n"
        f"  through Citegate: p50 {statistics.median(through) * 1000:.1f} ms, "
        f"p95 {percentile(through, 0.95) * 1000:.1f} ms; the fake alone: "
        f"p50 {statistics.median(alone) * 1000:.1f} ms, p95 {percentile(alone, 0.95) * 1000:.1f} ms"
    )


def fake_reply(request: dict[str, Any]) -> dict[str, Any]:
    """An answer citing the first block of the first search result, as the real API would."""
    results = [
        block
        for message in request["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "search_result"
    ]
    content: list[dict[str, Any]] = [{"type": "text", "text": "According to the library, "}]
    if results:
        first = results[0]
        citation = {
            "type": "search_result_location",
            "cited_text": first["content"][0]["text"],
            "source": first["source"],
            "title": first.get("title"),
            "search_result_index": 0,
            "start_block_index": 0,
            "end_block_index": 1,
        }
        content.append({"type": "text", "text": "this.", "citations": [citation]})
    return {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": request["model"],
        "content": content,
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 30},
    }


def serve_fake(port: int) -> None:
    """A Messages API that answers at once, and tells the last request it was sent."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    last = [b"{}"]

    async def messages(request: Request) -> Response:
        last[0] = await request.body()
        reply = orjson.dumps(fake_reply(orjson.loads(last[0])))
        return Response(reply, media_type="application/json", headers={"request-id": "req_b"})

    async def last_request(request: Request) -> Response:
        return Response(last[0], media_type="application/json")

    async def alive(request: Request) -> Response:
        return Response(b"ok")

    routes = [
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/last", last_request),
        Route("/", alive),
    ]
    uvicorn.run(Starlette(routes=routes), host="127.0.0.1", port=port, log_level="warning")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("part", nargs="?", choices=["quality", "scale"])
    parser.add_argument("--database-url", help="default: a new SQLite file")
    parser.add_argument("--documents", type=int, default=10_000)
    parser.add_argument("--compare-documents", type=int, default=2_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--misses", action="store_true", help="print the questions missed")
    parser.add_argument("--reuse", action="store_true", help="search an earlier run's library")
    parser.add_argument("--serve-fake", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake:
        serve_fake(args.serve_fake)
    elif args.part == "quality":
        quality(args.database_url, args.misses)
    elif args.part == "scale":
        scale(args.database_url, args.documents, args.compare_documents, args.queries, args.reuse)
    else:
        parser.error("name a part: quality or scale")


if __name__ == "__main__":
    main()
