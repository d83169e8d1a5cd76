"""The citation resolver: pure, property-tested where offsets are involved."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.answers.citations import resolve_citation
from app.documents.chunking import split_sentences
from app.documents.index import DocumentIndex, IndexedChunk, normalize
from app.search.passages import Passage

WORDS = st.sampled_from(
    ["grass", "sky", "Ünïcödé", "naïve", "日本語", "emoji😀", "𝔘𝔫𝔦", "café", "straße", "x"]
)
SENTENCES = st.lists(
    st.lists(WORDS, min_size=1, max_size=6).map(lambda w: " ".join(w) + ". "),
    min_size=1,
    max_size=12,
)


def text_document(text: str) -> DocumentIndex:
    chunks = [IndexedChunk(s, e, None, None) for s, e in split_sentences(text)]
    return DocumentIndex("doc_t", "text", text, chunks)


def char_citation(text: str, start: int, end: int, **override: Any) -> dict[str, Any]:
    return {
        "type": "char_location",
        "cited_text": text[start:end],
        "document_index": 0,
        "document_title": None,
        "start_char_index": start,
        "end_char_index": end,
        **override,
    }


def utf16(text: str, index: int) -> int:
    return len(text[:index].encode("utf-16-le")) // 2


def utf8(text: str, index: int) -> int:
    return len(text[:index].encode("utf-8"))


@settings(max_examples=200)
@given(SENTENCES, st.data())
def test_sentence_spans_resolve_under_every_reading(sentences: list[str], data: Any) -> None:
    text = "".join(sentences)
    document = text_document(text)
    spans = split_sentences(text)
    first = data.draw(st.integers(0, len(spans) - 1))
    last = data.draw(st.integers(first, len(spans) - 1))
    start, end = spans[first][0], spans[last][1]
    expected = {"start_char": start, "end_char": end, "chunk_indices": list(range(first, last + 1))}
    cited = text[start:end]
    readings: tuple[Callable[[int], int], ...] = (
        lambda i: i,
        lambda i: utf16(text, i),
        lambda i: utf8(text, i),
    )
    for reading, convert in enumerate(readings):
        citation = char_citation(text, start, end)
        citation |= {"start_char_index": convert(start), "end_char_index": convert(end)}
        resolved = resolve_citation(citation, [document])
        assert resolved["verified"] is True
        span = resolved["span"]
        assert text[span["start_char"] : span["end_char"]] == cited
        # Offsets of another reading can slice out another copy of a repeated passage: that
        # copy is as good a match. With one copy, or read as code points, it is the one cited.
        if reading == 0 or text.count(cited) == 1:
            assert {k: span[k] for k in expected} == expected
        # Every upstream field is kept as it came.
        assert {k: resolved[k] for k in citation} == citation


@settings(max_examples=200)
@given(st.text(min_size=1, max_size=200), st.data())
def test_any_text_any_indices_never_raise(text: str, data: Any) -> None:
    document = text_document(text)
    start = data.draw(st.integers(-5, len(text) + 5))
    end = data.draw(st.integers(-5, len(text) + 5))
    cited = data.draw(st.text(max_size=20))
    for citation in (
        char_citation(text, 0, 0, start_char_index=start, end_char_index=end, cited_text=cited),
        {
            "type": "page_location",
            "cited_text": cited,
            "document_index": 0,
            "start_page_number": start,
            "end_page_number": end,
        },
        {
            "type": "content_block_location",
            "cited_text": cited,
            "document_index": 0,
            "start_block_index": start,
            "end_block_index": end,
        },
        {"type": "char_location", "document_index": "0", "start_char_index": None},
        {"type": "char_location"},
    ):
        resolved = resolve_citation(citation, [document])
        if resolved["span"] is not None:
            span = resolved["span"]
            assert 0 <= span["start_char"] <= span["end_char"] <= len(text)


def test_wrong_indices_are_found_by_searching_near_the_start() -> None:
    text = "Alpha is first. Beta is second. Alpha is first. Gamma is third."
    document = text_document(text)
    late = text.rindex("Alpha")
    citation = char_citation(text, late, late + 16) | {"start_char_index": late + 3}
    resolved = resolve_citation(citation, [document])
    assert resolved["verified"] and resolved["span"]["start_char"] == late  # the nearer one


def pdf_document(pages: list[str]) -> DocumentIndex:
    chunks = []
    offset = 0
    for number, page in enumerate(pages, start=1):
        for start, end in split_sentences(page):
            chunks.append(IndexedChunk(offset + start, offset + end, number, None))
        offset += len(page)
    return DocumentIndex("doc_p", "pdf", "".join(pages), chunks, len(pages))


def page_citation(cited: str, first: int, end: int) -> dict[str, Any]:
    return {
        "type": "page_location",
        "cited_text": cited,
        "document_index": 0,
        "start_page_number": first,
        "end_page_number": end,
    }


def test_page_citation_tolerates_the_other_extraction() -> None:
    ours = (
        "Title\r\nIn 2023, our self\ufffeimprovement grew “fast” with ﬁne\r\nresults.\r\nNext.\r\n"
    )
    theirs = 'In 2023, our self\u0002improvement grew "fast" with fine\nresults.\r\n'
    document = pdf_document(["Cover page.\r\n", ours])
    resolved = resolve_citation(page_citation(theirs, 2, 3), [document])
    assert resolved["verified"] is True
    cover = len("Cover page.\r\n")
    expected_start = cover + ours.index("In 2023")
    expected_end = cover + ours.index("results.") + len("results.")
    assert (resolved["span"]["start_char"], resolved["span"]["end_char"]) == (
        expected_start,
        expected_end,
    )
    assert resolved["span"]["start_page"] == resolved["span"]["end_page"] == 2


def test_a_passage_on_two_pages_resolves_inside_the_cited_one() -> None:
    page = "The same sentence appears twice. "
    document = pdf_document([page, "Filler text here. ", page])
    resolved = resolve_citation(page_citation(page, 3, 4), [document])
    assert resolved["span"]["start_page"] == 3
    assert resolved["span"]["start_char"] == len(page) + len("Filler text here. ")


def test_content_blocks() -> None:
    blocks = ["First block.", "Second block.", "Third."]
    chunks, offset = [], 0
    for index, block in enumerate(blocks):
        chunks.append(IndexedChunk(offset, offset + len(block), None, index))
        offset += len(block)
    document = DocumentIndex("doc_c", "content", "".join(blocks), chunks)
    citation = {
        "type": "content_block_location",
        "cited_text": "Second block.Third.",
        "document_index": 0,
        "start_block_index": 1,
        "end_block_index": 3,
    }
    resolved = resolve_citation(citation, [document])
    assert resolved["verified"] and resolved["span"]["chunk_indices"] == [1, 2]
    assert resolved["span"]["start_char"] == len("First block.")


@given(st.text(max_size=300))
def test_normalize_maps_back_into_the_text(text: str) -> None:
    normalized, starts, ends = normalize(text)
    assert len(normalized) == len(starts) == len(ends)
    assert all(0 <= s < e <= len(text) for s, e in zip(starts, ends, strict=True))
    assert starts == sorted(starts)


def test_a_search_result_citation_resolves_to_its_chunks() -> None:
    chunks = ["Intro. ", "\n", "The grass is green. ", "The sky is blue."]
    found = Passage(
        document_id="doc_r",
        title="Colours",
        text="".join(chunks),
        start_char=500,
        end_char=500 + len("".join(chunks)),
        start_page=4,
        end_page=4,
        chunk_indices=[7, 8, 9, 10],
        score=3.5,
        chunk_texts=chunks,
        chunk_locators=[{"sheet": "S", "rows": [n]} for n in (1, 2, 3, 4)],
    )
    citation = {
        "type": "search_result_location",
        "cited_text": "The grass is green. The sky is blue.",
        "source": "/v1/documents/doc_r#chars=500-544",
        "title": "Colours, page 4",
        "search_result_index": 1,
        "start_block_index": 1,  # blocks skip the blank chunk: 0 intro, 1 grass, 2 sky
        "end_block_index": 3,
    }
    resolved = resolve_citation(citation, [], [other_passage(), found])
    assert resolved["document_id"] == "doc_r" and resolved["verified"] is True
    assert resolved["span"] == {
        "start_char": 508,
        "end_char": 544,
        "start_page": 4,
        "end_page": 4,
        "chunk_indices": [9, 10],
        "locator": {"sheet": "S", "rows": [3, 4]},  # every row cited
    }
    assert {k: resolved[k] for k in citation} == citation  # every upstream field kept
    wrong = resolve_citation(
        {**citation, "cited_text": "Something else."}, [], [other_passage(), found]
    )
    assert wrong["span"] is not None and wrong["verified"] is False


@pytest.mark.parametrize(
    "change",
    [
        {"search_result_index": 5},
        {"search_result_index": -1},
        {"start_block_index": 0, "end_block_index": 0},
        {"end_block_index": 9},
        {"start_block_index": None},
    ],
)
def test_a_search_result_citation_out_of_range_is_unresolved(change: dict[str, Any]) -> None:
    citation = {
        "type": "search_result_location",
        "cited_text": "Other.",
        "source": "s",
        "search_result_index": 0,
        "start_block_index": 0,
        "end_block_index": 1,
        **change,
    }
    resolved = resolve_citation(citation, [], [other_passage()])
    assert resolved["span"] is None and resolved["verified"] is False


def other_passage() -> Passage:
    return Passage("doc_o", None, "Other.", 0, 6, None, None, [0], 1.0, ["Other."])
