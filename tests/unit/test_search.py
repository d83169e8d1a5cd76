"""The pure half of search: a query's terms and their weights, the process's word counts, and
passages from ranked chunks."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.search.passages import Hit, StoredChunk, build_windows, candidate_hits, ranges_to_read
from app.search.service import WordCounts
from app.search.terms import (
    MAX_QUERY_TERMS,
    affordable_terms,
    fts5_match,
    indexed_text,
    query_terms,
    rarity,
    tsquery,
)


@given(st.text())
def test_any_query_is_words_of_letters_and_digits(query: str) -> None:
    terms = query_terms(query)
    assert len(terms) <= MAX_QUERY_TERMS
    assert len(set(terms)) == len(terms)
    for term in terms:
        assert term and all(character.isalnum() for character in term)
    assert fts5_match(terms).count('"') == 2 * len(terms)
    assert not set(tsquery(terms)) & set("&!():*<>'\\\"")


def test_syntax_is_dropped_and_common_words_only_when_there_is_more() -> None:
    assert query_terms('NEAR("return" AND policy*) -x: (y)') == [
        "near",
        "return",
        "policy",
        "x",
        "y",
    ]
    assert query_terms("what is the return policy") == ["return", "policy"]
    assert query_terms("the and") == ["the", "and"]
    assert query_terms("🙂 -- ;") == []


def test_chinese_and_japanese_become_bigrams_in_text_and_query() -> None:
    assert indexed_text("The grass is green.") is None
    assert indexed_text("东京都in Japan") == " 东京 京都 in Japan"
    assert indexed_text("日") == " 日 "
    assert query_terms("东京都") == ["东京", "京都"]
    assert query_terms("Токио — столица") == ["токио", "столица"]


def _document(pages: list[int]) -> dict[tuple[str, int], StoredChunk]:
    return {
        ("d", index): StoredChunk("d", index, f"c{index} ", index, index + 1, page)
        for index, page in enumerate(pages)
    }


@given(
    st.lists(st.integers(1, 3), min_size=1, max_size=40),
    st.lists(st.tuples(st.integers(0, 39), st.floats(0.1, 10)), min_size=1, max_size=15),
    st.integers(0, 3),
    st.integers(1, 4),
    st.integers(1, 10),
)
def test_passages_are_windows_on_one_page_disjoint_and_capped(
    pages: list[int],
    ranked: list[tuple[int, float]],
    window: int,
    per_document: int,
    limit: int,
) -> None:
    pages.sort()
    chunks = _document(pages)
    hits = [Hit("d", i, pages[i], score) for i, score in ranked if i < len(pages)]
    kept = candidate_hits(hits, limit, per_document, window)
    for chunk_range in ranges_to_read(kept, window):
        assert chunk_range.first <= chunk_range.last
    windows = build_windows(kept, chunks, limit=limit, window=window, per_document=per_document)
    assert len(windows) <= min(limit, per_document)
    assert [w.score for w in windows] == sorted((w.score for w in windows), reverse=True)
    covered: set[int] = set()
    for w in windows:
        indices = [chunk.chunk_index for chunk in w.chunks]
        assert indices == list(range(indices[0], indices[-1] + 1))
        assert len({chunk.page_number for chunk in w.chunks}) == 1
        assert not covered & set(indices)
        covered |= set(indices)
        inside = [hit for hit in kept if hit.chunk_index in indices]
        assert inside and max(hit.score for hit in inside) == w.score
    if kept:
        assert windows and windows[0].score == max(hit.score for hit in kept)


def test_a_missing_chunk_leaves_its_hit_out() -> None:
    chunks = _document([1, 1, 1])
    del chunks[("d", 1)]
    hits = [Hit("d", 1, 1, 5.0), Hit("d", 2, 1, 1.0)]
    windows = build_windows(hits, chunks, limit=5, window=1, per_document=3)
    assert [[c.chunk_index for c in w.chunks] for w in windows] == [[2]]


def test_the_rarest_terms_are_ranked_by_within_the_budget() -> None:
    terms = ["common", "rare", "none", "middling"]
    assert affordable_terms(terms, [900, 3, 0, 100], budget=200) == ["rare", "middling"]
    assert affordable_terms(terms, [900, 3, 0, 100], budget=2000) == ["common", "rare", "middling"]
    # The rarest that matches is kept even when it alone exceeds the budget.
    assert affordable_terms(terms, [900, 500, 0, 700], budget=100) == ["rare"]
    assert affordable_terms(terms, [0, 0, 0, 0], budget=100) == []


@given(st.integers(1, 10**7), st.integers(0, 10**7), st.integers(0, 10**7))
def test_a_rarer_word_weighs_more_and_every_word_weighs_something(
    total: int, count: int, other: int
) -> None:
    assert rarity(total, count) > 0
    if count < other <= total:
        assert rarity(total, count) > rarity(total, other)


def test_word_counts_are_kept_per_tenant_and_generation_and_bounded() -> None:
    counts = WordCounts(tenants=2, words=3)
    counts.learn("ten_a", 7, {"kuiper": 2, "fast": 13})
    assert counts.known("ten_a", 7) == {"kuiper": 2, "fast": 13}
    assert counts.known("ten_a", 8) == {}  # the tenant's chunks changed since
    assert counts.known("ten_b", 7) == {}
    counts.learn("ten_a", 7, {"orbit": 1})
    assert counts.known("ten_a", 7) == {"kuiper": 2, "fast": 13, "orbit": 1}
    counts.learn("ten_a", 7, {"launch": 4})  # a fourth word: the tenant's words start over
    assert counts.known("ten_a", 7) == {"launch": 4}
    counts.learn("ten_a", 8, {"fast": 14})  # a new generation replaces the old
    assert counts.known("ten_a", 8) == {"fast": 14} and counts.known("ten_a", 7) == {}
    counts.learn("ten_b", 1, {"x": 1})
    counts.known("ten_a", 8)  # ten_a searched last: ten_b is the one to go
    counts.learn("ten_c", 1, {"y": 1})
    assert counts.known("ten_b", 1) == {}
    assert counts.known("ten_a", 8) == {"fast": 14} and counts.known("ten_c", 1) == {"y": 1}
