"""searchPassages through real HTTP, on the configured database: what a user finds, in which
language, with what query, and never a deleted document."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.collections.service import collection_document_ids
from app.db.engine import run_in_session
from app.db.models import DEFAULT_TENANT_ID
from app.search.index import RANKED_AT_MOST, TIE_WEIGHT
from app.search.service import MATCH_BUDGET, search_passages
from app.settings import Settings
from tests.e2e.test_documents import all_chunks, assert_problem, upload

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HELP_CENTER = sorted((FIXTURES / "anthropic" / "help_center").glob("*.txt"))
AMAZON = FIXTURES / "anthropic" / "amazon_2023_letter.pdf"
LOREM = FIXTURES / "pdf" / "pdflatex-4-pages.pdf"

HOSTILE = [
    '"unbalanced quote',
    "return AND",
    "AND OR NOT",
    "NEAR(return policy, 2)",
    "return*",
    "*",
    "-return -policy",
    "(return (policy",
    "title: return",
    "terms:policy",
    "🐶🐱 return 🙂",
    "🙂",
    "'; DROP TABLE document_chunks; --",
    "1' OR '1'='1",
    "return & policy | !refund <-> ok",
    "\\ \" ' ` ^ $ { } [ ] ~ @ # % + = ; , . ? /",
    "   ",
    "the of and",
    "x" * 5000,
]


def search(client: httpx.Client, **body: Any) -> list[dict[str, Any]]:
    response = client.post("/v1/search", json=body)
    assert response.status_code == 200, response.text
    passages: list[dict[str, Any]] = response.json()["data"]
    return passages


def add_collection(client: httpx.Client, document_ids: list[str]) -> str:
    collection = client.post("/v1/collections", json={"name": "Library"}).json()["id"]
    added = client.post(
        f"/v1/collections/{collection}/documents", json={"document_ids": document_ids}
    )
    assert added.status_code == 200, added.text
    return str(collection)


@pytest.fixture
def library(client: httpx.Client) -> dict[str, str]:
    """The help-centre articles and two PDFs in one collection: {name: document id}."""
    ids = {}
    for path in [*HELP_CENTER, AMAZON, LOREM]:
        response = upload(client, path.name, path.read_bytes())
        assert response.status_code == 201, response.text
        ids[path.stem] = response.json()["id"]
    ids["collection"] = add_collection(client, list(ids.values()))
    return ids


def test_questions_find_their_article_and_page(
    client: httpx.Client, library: dict[str, str]
) -> None:
    expectations = [
        ("how many days do I have to return something", "help_center_1", None),
        ("is there a discount when I buy in larger quantities", "help_center_5", None),
        ("how do I stop my subscription", "help_center_7", None),
        ("where is my package, tracking number", "help_center_3", None),
        ("AWS re:Invent Graviton chips", "amazon_2023_letter", None),
        ("regionalized fulfillment network in the US", "amazon_2023_letter", None),
    ]
    for question, name, _ in expectations:
        passages = search(client, query=question, collection_id=library["collection"], limit=5)
        assert passages, question
        assert passages[0]["document_id"] == library[name], (question, passages[0])
        assert passages[0]["title"] is None
    # A PDF passage is on one page, and its text is its chunks' texts.
    passages = search(
        client, query="Kuiper satellites", document_ids=[library["amazon_2023_letter"]]
    )
    assert passages
    chunks = {c["index"]: c for c in all_chunks(client, library["amazon_2023_letter"])}
    for passage in passages:
        run = [chunks[i] for i in passage["chunk_indices"]]
        assert passage["chunk_indices"] == list(range(run[0]["index"], run[-1]["index"] + 1))
        assert passage["text"] == "".join(c["text"] for c in run)
        assert (passage["start_char"], passage["end_char"]) == (
            run[0]["start_char"],
            run[-1]["end_char"],
        )
        assert passage["start_page"] == passage["end_page"]
        assert {c["page_number"] for c in run} == {passage["start_page"]}
    assert "kuiper" in passages[0]["text"].lower()


def test_the_readmes_example_finds_the_passage_with_the_rare_word_first(
    client: httpx.Client, library: dict[str, str]
) -> None:
    """README, "Collections and search": the letter of its quickstart in a collection, "How fast
    is Kuiper?". "fast" is in a dozen of the letter's chunks, some of them short sentences;
    "Kuiper" in two long ones, which hold no "fast": the rarer word wins, whatever the length."""
    letter = upload(
        client, "letter.pdf", AMAZON.read_bytes(), title="Amazon 2023 Shareholder Letter"
    ).json()["id"]
    handbook = client.post("/v1/collections", json={"name": "Handbook"}).json()["id"]
    added = client.post(f"/v1/collections/{handbook}/documents", json={"document_ids": [letter]})
    assert added.status_code == 200, added.text
    for scope in [{"collection_id": handbook}, {"collection_id": library["collection"]}]:
        passages = search(client, query="How fast is Kuiper?", limit=10, **scope)
        assert "Kuiper" in passages[0]["text"], [p["text"][:80] for p in passages]
        assert "fast" not in passages[0]["text"].lower().split()
        # The passages with "fast" but no "Kuiper" follow, a whole word's weight lower.
        assert any("Kuiper" not in p["text"] and "fast" in p["text"].lower() for p in passages[1:])
        assert all(p["score"] < passages[0]["score"] - 0.5 for p in passages[1:])


def test_a_words_weight_is_its_rarity_among_the_tenants_chunks_as_they_change(
    client: httpx.Client,
) -> None:
    """A chunk scores the inverse document frequency of the query's words it holds (BM25's,
    from the tenant's own counts: N chunks, n of them holding the word), whatever its length,
    and the counts follow the documents the tenant adds and deletes."""

    def store(name: str, text: str) -> str:
        response = upload(client, name, text.encode())
        assert response.status_code == 201, response.text
        assert response.json()["chunk_count"] == 1
        return str(response.json()["id"])

    kuiper = store(
        "kuiper.txt",
        "Project Kuiper is a low Earth orbit satellite initiative that aims to provide "
        "broadband connectivity to hundreds of millions of households who lack it today.",
    )
    fast = [store(f"fast-{n}.txt", f"Delivery {n} was fast.") for n in range(2)]
    others = [store(f"other-{n}.txt", f"Nothing to see {n}.") for n in range(3)]
    collection = add_collection(client, [kuiper, *fast])

    def idf(total: int, holding: int) -> float:
        return math.log(1 + (total - holding + 0.5) / (holding + 0.5))

    def found() -> list[tuple[str, float]]:
        passages = search(client, query="How fast is Kuiper?", collection_id=collection)
        return [(p["document_id"], p["score"]) for p in passages]

    def assert_scores(results: list[tuple[str, float]], expected: dict[str, float]) -> None:
        assert {document for document, _ in results} == set(expected)
        for document, score in results:
            assert expected[document] <= score < expected[document] + TIE_WEIGHT

    # 6 chunks: "kuiper" in one, "fast" in two. The long sentence first.
    first = found()
    assert first[0][0] == kuiper
    assert_scores(first, {kuiper: idf(6, 1), **dict.fromkeys(fast, idf(6, 2))})
    # Three more of the tenant's chunks hold "Kuiper" (outside the collection): it is now the
    # commoner word, and the short sentences come first.
    more = [store(f"more-{n}.txt", f"Kuiper note {n}.") for n in range(3)]
    second = found()
    assert second[-1][0] == kuiper
    assert_scores(second, {kuiper: idf(9, 4), **dict.fromkeys(fast, idf(9, 2))})
    # They are deleted, and others too: the counts follow.
    for document in [*more, *others]:
        assert client.delete(f"/v1/documents/{document}").status_code == 204
    third = found()
    assert third[0][0] == kuiper
    assert_scores(third, {kuiper: idf(3, 1), **dict.fromkeys(fast, idf(3, 2))})


def test_passages_stay_inside_their_page(client: httpx.Client, library: dict[str, str]) -> None:
    chunks = all_chunks(client, library["pdflatex-4-pages"])
    # The first chunk of each page after the first: its window would reach the page before.
    firsts = [
        c for before, c in itertools.pairwise(chunks) if c["page_number"] != before["page_number"]
    ]
    assert firsts
    for first in firsts:
        words = [w for w in first["text"].split() if len(w) > 3][:6]
        passages = search(
            client, query=" ".join(words), document_ids=[library["pdflatex-4-pages"]], limit=100
        )
        assert passages
        for passage in passages:
            pages = {chunks[i]["page_number"] for i in passage["chunk_indices"]}
            assert pages == {passage["start_page"]} == {passage["end_page"]}


def test_hostile_queries_are_words(client: httpx.Client, library: dict[str, str]) -> None:
    for query in HOSTILE:
        response = client.post(
            "/v1/search", json={"query": query, "collection_id": library["collection"]}
        )
        assert response.status_code == 200, (query, response.text)
    found = search(client, query="NEAR(return policy, 2)", collection_id=library["collection"])
    assert found and found[0]["document_id"] == library["help_center_1"]
    assert search(client, query="🙂 *", collection_id=library["collection"]) == []
    assert client.get(f"/v1/documents/{library['help_center_1']}").status_code == 200


def test_passages_are_widened_merged_and_capped(client: httpx.Client, settings: Settings) -> None:
    window, cap = settings.search_window_chunks, settings.search_max_passages_per_document
    assert (window, cap) == (2, 5), "the defaults this test is written for"
    sentences = [f"Filler sentence number {n} is here. " for n in range(60)]
    for n in (10, 12, 30, 36, 42, 48):
        sentences[n] = f"The zebra {n} crossed the road. "
    sentences[20] = "A zebra appeared once more, a zebra. "  # the best hit
    document = upload(client, "zebras.txt", "".join(sentences).encode()).json()["id"]
    passages = search(client, query="zebra", document_ids=[document], limit=10)
    # Each hit widens by two chunks a side; 10 and 12 (8-12, 10-14) merge into one: six
    # passages, of which the cap keeps five: the best, then the equals in document order.
    runs = [(p["chunk_indices"][0], p["chunk_indices"][-1]) for p in passages]
    assert runs == [(18, 22), (8, 14), (28, 32), (34, 38), (40, 44)]
    scores = [p["score"] for p in passages]
    assert scores == sorted(scores, reverse=True)
    assert len(search(client, query="zebra", document_ids=[document], limit=1)) == 1


@pytest.mark.parametrize(
    ("text", "query", "needle"),
    [
        (
            "The committee approved the budget. Researchers measured glacier melting rates "
            "across Greenland. The weather was fine.",
            "how fast are glaciers melting",
            "glacier",
        ),
        (
            "Die Sitzung begann pünktlich. Die Gletscher in den Alpen schmelzen schneller als "
            "erwartet. Danach gab es Kaffee.",
            "Wie schnell schmelzen die Gletscher?",
            "Gletscher",
        ),
        (
            "Заседание началось вовремя. Ледники в Альпах тают быстрее, чем ожидалось. "
            "Потом был кофе.",
            "Ледники тают",
            "Ледники",
        ),
        ("会议准时开始。阿尔卑斯山的冰川融化得比预期快。之后喝了咖啡。", "冰川融化", "冰川"),
        ("会議は時間通りに始まった。アルプスの氷河は予想より速く溶けている。", "氷河", "氷河"),
        ("東京は日本の首都です。大阪は食べ物で有名です。", "日本の首都はどこ", "東京"),
    ],
)
def test_every_language_retrieves(client: httpx.Client, text: str, query: str, needle: str) -> None:
    distractor = upload(client, "other.txt", b"Nothing to see here at all.").json()["id"]
    document = upload(client, "doc.txt", text.encode()).json()["id"]
    passages = search(client, query=query, document_ids=[distractor, document])
    assert passages and passages[0]["document_id"] == document
    assert needle in passages[0]["text"]


def test_a_deleted_document_is_never_retrieved(
    client: httpx.Client, library: dict[str, str], database_url: str
) -> None:
    article = library["help_center_1"]
    assert search(client, query="30-day return policy", document_ids=[article])
    assert client.delete(f"/v1/documents/{article}").status_code == 204
    found = search(client, query="30-day return policy", collection_id=library["collection"])
    assert article not in {p["document_id"] for p in found}
    assert_problem(
        client.post("/v1/search", json={"query": "return", "document_ids": [article]}),
        404,
        "document_not_found",
    )
    # Not even when a caller names it: the index holds nothing of it.
    passages = run_in_session(
        database_url,
        lambda session: search_passages(
            session,
            DEFAULT_TENANT_ID,
            "30-day return policy",
            [article],
            10,
            window=2,
            per_document=3,
        ),
    )
    assert passages == []
    ids = run_in_session(
        database_url,
        lambda session: collection_document_ids(session, DEFAULT_TENANT_ID, library["collection"]),
    )
    assert article not in ids and len(ids) == len(library) - 2


def test_a_word_in_more_chunks_than_a_search_ranks_leaves_the_ranking_to_rarer_ones(
    client: httpx.Client, database_url: str
) -> None:
    # Chunks full of "alpha" would outrank the one "zebra" if "alpha" were ranked by.
    common = "".join(
        f"Alpha alpha alpha, alpha number {n} of many. " for n in range(MATCH_BUDGET + 100)
    )
    crowd = upload(client, "alpha.txt", common.encode()).json()["id"]
    rare = upload(client, "zebra.txt", b"Nothing here. A zebra crossed the road.").json()["id"]
    assert len(all_chunks(client, crowd)) > MATCH_BUDGET
    collection = add_collection(client, [crowd, rare])

    def first_found() -> str:
        return str(search(client, query="alpha zebra", collection_id=collection)[0]["document_id"])

    assert first_found() == rare
    try:
        # And once the database has statistics (PostgreSQL estimates how common words are
        # from them), as autovacuum keeps them.
        run_in_session(database_url, analyze)
        assert first_found() == rare
        assert search(client, query="alpha", collection_id=collection)[0]["document_id"] == crowd
    finally:
        # Statistics of an empty table, for the tests after this one.
        for document in (crowd, rare):
            assert client.delete(f"/v1/documents/{document}").status_code == 204
        run_in_session(database_url, analyze)


def test_a_common_word_finds_its_chunks_in_scope_among_many_outside(client: httpx.Client) -> None:
    # More chunks than PostgreSQL ranks at most match, all but one outside the collection.
    outside = "".join(f"Alpha number {n} of many. " for n in range(RANKED_AT_MOST + 100))
    upload(client, "outside.txt", outside.encode())
    inside = upload(client, "inside.txt", b"Nothing here. One alpha, once.").json()["id"]
    collection = add_collection(client, [inside])
    found = search(client, query="alpha", collection_id=collection)
    assert [p["document_id"] for p in found] == [inside]


async def analyze(session: AsyncSession) -> None:
    await session.execute(text("ANALYZE"))
    await session.commit()


def test_the_body_names_exactly_one_scope(client: httpx.Client, library: dict[str, str]) -> None:
    both = {
        "query": "x",
        "collection_id": library["collection"],
        "document_ids": [library["help_center_1"]],
    }
    for body in [
        {"query": "x"},
        both,
        {"query": "x", "collection_id": library["collection"], "limit": 101},
        {"query": "", "collection_id": library["collection"]},
    ]:
        assert_problem(client.post("/v1/search", json=body), 422, "validation_error")
    assert_problem(
        client.post("/v1/search", json={"query": "x", "collection_id": "col_doesnotexist"}),
        404,
        "collection_not_found",
    )
    empty = add_collection(client, [library["help_center_1"]])
    assert (
        client.delete(f"/v1/collections/{empty}/documents/{library['help_center_1']}").status_code
        == 204
    )
    assert search(client, query="return", collection_id=empty) == []
