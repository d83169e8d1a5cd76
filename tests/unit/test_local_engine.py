"""The local engine's pure parts (chunking, ranking, answers, token estimate, prompt cache,
stream events) and its request validation, the last through the ASGI app in process."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import math
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pypdf import PdfWriter

from app.documents.pdf import extract_pdf_text
from app.local_engine import MODEL_NAME, LocalEngine, create_local_engine_app
from app.local_engine.answering import (
    INTRO,
    NO_DOCUMENTS_ANSWER,
    NOTHING_FOUND_ANSWER,
    build_answer,
    limit_answer,
    rank_chunks,
    select_passages,
)
from app.local_engine.api_error import ApiError
from app.local_engine.bm25 import Bm25, stem, tokenize
from app.local_engine.documents import (
    RequestDocument,
    chunk_content_blocks,
    chunk_pdf_pages,
    chunk_plain_text,
    upstream_page_text,
)
from app.local_engine.pdf_cache import ParsedPdfCache
from app.local_engine.prompt_cache import PromptCache
from app.local_engine.request_validation import ParsedRequest, parse_create_request
from app.local_engine.streaming import message_events, split_text_deltas
from app.local_engine.tokens import estimate_tokens, prompt_units
from app.local_engine.wire import (
    CharLocation,
    ContentBlockLocation,
    ContentSource,
    Message,
    PageLocation,
    TextBlock,
)
from tests.fixture_files import AMAZON_PDF, CORPUS

AMAZON_QUESTION = "What was Amazon's total revenue in 2023 and how much did it grow year-over-year?"
GRASS_SKY = "The grass is green. The sky is blue."
GRASS_SKY_QUESTION = "What color is the grass and sky?"
VERSION = "2026-10-21"


class FakeClock:
    """A monotonic clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def text_document(
    data: str,
    *,
    title: str | None = "My Document",
    citations: bool | None = True,
    cache_control: dict[str, Any] | None = None,
) -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": data},
    }
    if title is not None:
        block["title"] = title
    if citations is not None:
        block["citations"] = {"enabled": citations}
    if cache_control is not None:
        block["cache_control"] = cache_control
    return block


def pdf_document(data: bytes, *, title: str | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": "document",
        "source": {
            "type": "base64",
            "media_type": "application/pdf",
            "data": base64.b64encode(data).decode(),
        },
        "citations": {"enabled": True},
    }
    if title is not None:
        block["title"] = title
    return block


def content_document(texts: list[str], *, title: str | None = None) -> dict[str, Any]:
    return {
        "type": "document",
        "source": {"type": "content", "content": [{"type": "text", "text": t} for t in texts]},
        "title": title,
        "citations": {"enabled": True},
    }


def body(*blocks: dict[str, Any], question: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-5",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": [*blocks, {"type": "text", "text": question}]}],
        **extra,
    }


def parse(data: dict[str, Any], version: str = VERSION) -> ParsedRequest:
    return parse_create_request(json.dumps(data).encode(), version)


def answer(engine: LocalEngine, data: dict[str, Any]) -> Message:
    return engine.create_message_blocking(parse(data))


def cited_blocks(message: Message) -> list[TextBlock]:
    return [block for block in message.content if block.citations]


@pytest.fixture
def engine() -> LocalEngine:
    return LocalEngine(min_cacheable_tokens=0)


# --- tokenizer and BM25 ----------------------------------------------------------------------


def test_tokenize_drops_function_words_and_folds_plurals() -> None:
    assert tokenize("What color is the grass and sky?") == ["color", "grass", "sky"]
    assert tokenize("Amazon’s REVENUES grew") == ["amazon", "revenue", "grew"]
    assert [stem(word) for word in ("stories", "grass", "bus", "colors")] == [
        "story",
        "grass",
        "bus",
        "color",
    ]


def test_bm25_score_matches_the_formula_on_a_hand_computed_case() -> None:
    # N=2, the term is in one document: idf = ln(1 + 1.5/1.5) = ln 2; the document has the
    # average length, so its score is idf * (k1 + 1) / (1 + k1) = ln 2.
    index = Bm25([["grass", "green"], ["sky", "blue"]])
    assert index.scores(["grass"]) == [pytest.approx(math.log(2)), 0.0]
    assert index.idf("grass") == pytest.approx(math.log(2))
    assert index.idf("absent") == 0.0


def test_bm25_saturates_term_frequency_and_prefers_shorter_documents() -> None:
    once, twice, long_once = ["cat", "x"], ["cat", "cat"], ["cat", "x", "y", "z", "w", "v"]
    scores = Bm25([once, twice, long_once, ["dog", "x"]]).scores(["cat"])
    assert scores[0] < scores[1] < 2 * scores[0]
    assert scores[2] < scores[0]
    assert scores[3] == 0.0


def test_bm25_counts_a_repeated_query_word_once() -> None:
    index = Bm25([["year", "growth"], ["cost"]])
    assert index.scores(["year", "year"]) == index.scores(["year"])


# --- chunking --------------------------------------------------------------------------------


def test_plain_text_chunks_are_sentences_with_their_trailing_space() -> None:
    chunks = chunk_plain_text(GRASS_SKY)
    assert [(c.start, c.end, c.text) for c in chunks] == [
        (0, 20, "The grass is green. "),
        (20, 36, "The sky is blue."),
    ]


def test_pdf_chunks_tile_each_page_of_the_upstream_page_text() -> None:
    pdfium_pages = extract_pdf_text(AMAZON_PDF.read_bytes()).pages
    pdf = chunk_pdf_pages(pdfium_pages)
    assert len(pdf.pages) == 11
    for number, page in enumerate(pdf.pages, start=1):
        on_page = [chunk for chunk in pdf.chunks if chunk.start == number]
        assert all(chunk.end == number + 1 for chunk in on_page)
        assert "".join(chunk.text for chunk in on_page) == page
    # PDFium's U+FFFE at a hyphenation break is U+0002 in the upstream's text, as in its
    # cited_text ("self\u0002improvement").
    assert "\ufffe" in "".join(pdfium_pages)
    assert "\ufffe" not in "".join(pdf.pages)
    assert upstream_page_text("self\ufffeimprovement") == "self\u0002improvement"


def test_content_chunks_are_the_text_blocks_with_their_indices() -> None:
    source = ContentSource.model_validate(
        {
            "type": "content",
            "content": [
                {"type": "text", "text": "First block."},
                {"type": "image", "source": {"type": "url", "url": "https://example.test/a"}},
                {"type": "text", "text": "Third block."},
            ],
        }
    )
    chunks = chunk_content_blocks(source)
    assert [(c.position, c.start, c.end, c.text) for c in chunks] == [
        (0, 0, 1, "First block."),
        (1, 2, 3, "Third block."),
    ]


# --- ranking and answers ---------------------------------------------------------------------

LOYALTY = (
    "PetWorld offers a loyalty program where customers earn 1 point for every dollar spent. "
    "Once you accumulate 100 points, you'll receive a $5 reward that can be used on your next "
    "purchase. Points expire 12 months after they are earned. You can check your point balance "
    "in your account dashboard or by asking customer service."
)


def test_ranking_puts_the_sentence_that_answers_first(engine: LocalEngine) -> None:
    documents = engine.documents(parse(body(text_document(LOYALTY), question="x")))
    ranked = rank_chunks("When do points expire?", documents)
    assert ranked[0].chunk.text == "Points expire 12 months after they are earned. "
    assert ranked[0].terms == {"point", "expire"}
    assert all(item.score > 0 for item in ranked)


def test_grass_and_sky_get_a_citation_each_as_the_upstream_gives(engine: LocalEngine) -> None:
    message = answer(engine, body(text_document(GRASS_SKY), question=GRASS_SKY_QUESTION))
    assert message.model == MODEL_NAME
    assert message.content[0] == TextBlock(text=INTRO)
    citations = [citation for block in cited_blocks(message) for citation in block.citations or ()]
    assert citations == [
        CharLocation(
            cited_text="The grass is green. ",
            document_index=0,
            document_title="My Document",
            start_char_index=0,
            end_char_index=20,
        ),
        CharLocation(
            cited_text="The sky is blue.",
            document_index=0,
            document_title="My Document",
            start_char_index=20,
            end_char_index=36,
        ),
    ]
    assert [block.text for block in cited_blocks(message)] == [
        "The grass is green. ",
        "The sky is blue.",
    ]


def test_consecutive_sentences_on_one_point_merge_into_one_citation(engine: LocalEngine) -> None:
    data = "Cats purr when they are happy. Cats also purr when they are hurt. Dogs bark loudly."
    message = answer(engine, body(text_document(data), question="Why do cats purr?"))
    [block] = cited_blocks(message)
    [citation] = block.citations or []
    assert isinstance(citation, CharLocation)
    assert (citation.start_char_index, citation.end_char_index) == (0, 66)
    assert (
        citation.cited_text == "Cats purr when they are happy. Cats also purr when they are hurt. "
    )


def test_pdf_sentences_do_not_merge_across_pages() -> None:
    pdf = chunk_pdf_pages(["Cats purr when happy. ", "Cats purr when hurt. "])
    document = RequestDocument(0, None, "pdf", True, pdf.chunks, pdf.pages)
    passages = select_passages("Why do cats purr?", [document])
    assert [(p.chunks[0].start, p.chunks[-1].end) for p in passages] == [(1, 2), (2, 3)]


def test_document_index_counts_every_document_across_turns(engine: LocalEngine) -> None:
    data = {
        "model": "m",
        "max_tokens": 500,
        "messages": [
            {
                "role": "user",
                "content": [
                    text_document("Bananas are yellow.", title="Fruit"),
                    {"type": "text", "text": "Tell me about bananas."},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "text",
                        "text": "Bananas are yellow.",
                        "citations": [
                            {
                                "type": "char_location",
                                "cited_text": "Bananas are yellow.",
                                "document_index": 0,
                                "document_title": "Fruit",
                                "start_char_index": 0,
                                "end_char_index": 19,
                            }
                        ],
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    text_document("Penguins live in Antarctica.", title=None),
                    {"type": "text", "text": "Where do penguins live?"},
                ],
            },
        ],
    }
    [block] = cited_blocks(answer(engine, data))
    assert block.citations == [
        CharLocation(
            cited_text="Penguins live in Antarctica.",
            document_index=1,
            document_title=None,
            start_char_index=0,
            end_char_index=28,
        )
    ]


def test_pdf_answer_cites_the_revenue_sentence_on_page_1(engine: LocalEngine) -> None:
    data = body(
        pdf_document(AMAZON_PDF.read_bytes(), title="Amazon 2023 Shareholder Letter"),
        question=AMAZON_QUESTION,
    )
    message = answer(engine, data)
    pages = [upstream_page_text(p) for p in extract_pdf_text(AMAZON_PDF.read_bytes()).pages]
    citations = [c for block in cited_blocks(message) for c in block.citations or ()]
    assert citations
    for citation in citations:
        assert isinstance(citation, PageLocation)
        covered = "".join(pages[citation.start_page_number - 1 : citation.end_page_number - 1])
        assert citation.cited_text in covered
    first = citations[0]
    assert isinstance(first, PageLocation)
    assert (first.start_page_number, first.end_page_number) == (1, 2)
    # The very sentence the real API cited for this question (fixture pdf_page_location_amazon).
    assert first.cited_text == (
        "In 2023, Amazon’s total revenue grew 12% year-over-year (“YoY”) from $514B to $575B. "
    )


def test_content_answer_cites_blocks_whose_text_joins_to_cited_text(engine: LocalEngine) -> None:
    texts = ["Feed cats twice a day.", "Walk dogs every morning.", "Brush cats weekly."]
    message = answer(engine, body(content_document(texts), question="How often to brush cats?"))
    citations = [c for block in cited_blocks(message) for c in block.citations or ()]
    assert citations
    for citation in citations:
        assert isinstance(citation, ContentBlockLocation)
        assert citation.end_block_index == citation.start_block_index + 1
        joined = "".join(texts[citation.start_block_index : citation.end_block_index])
        assert citation.cited_text == joined
    assert isinstance(citations[0], ContentBlockLocation)
    assert citations[0].start_block_index == 2


_WORDS = st.sampled_from(
    ["cats", "dogs", "purr", "bark", "green", "grass", "blue", "sky", "rain", "sun", "the", "is"]
)
_SENTENCES = st.lists(_WORDS, min_size=1, max_size=6).map(lambda words: " ".join(words) + ".")


@settings(max_examples=60, deadline=None)
@given(
    sentences=st.lists(_SENTENCES, min_size=1, max_size=8),
    question=st.lists(_WORDS, min_size=1, max_size=4),
)
def test_every_char_citation_slices_back_to_its_cited_text(
    sentences: list[str], question: list[str]
) -> None:
    data = "  ".join(s.capitalize() for s in sentences)
    message = answer(
        LocalEngine(min_cacheable_tokens=0),
        body(text_document(data), question=" ".join(question) + "?"),
    )
    for block in cited_blocks(message):
        for citation in block.citations or ():
            assert isinstance(citation, CharLocation)
            assert citation.cited_text == data[citation.start_char_index : citation.end_char_index]
            assert citation.cited_text


def test_answers_are_deterministic(engine: LocalEngine) -> None:
    data = body(text_document(LOYALTY), question="How does the loyalty program work?")
    first, second = answer(engine, data), answer(LocalEngine(min_cacheable_tokens=0), data)
    assert first.content == second.content
    assert first.id != second.id


def test_no_documents_or_nothing_relevant_answers_plain_text(engine: LocalEngine) -> None:
    plain = answer(
        engine, {"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": "Hi"}]}
    )
    assert plain.content == [TextBlock(text=NO_DOCUMENTS_ANSWER)]
    nothing = answer(engine, body(text_document(GRASS_SKY), question="Who won the election?"))
    assert nothing.content == [TextBlock(text=NOTHING_FOUND_ANSWER)]
    assert nothing.stop_reason == "end_turn"


def test_documents_without_citations_get_an_uncited_answer(engine: LocalEngine) -> None:
    message = answer(
        engine, body(text_document(GRASS_SKY, citations=None), question=GRASS_SKY_QUESTION)
    )
    assert message.content == [TextBlock(text=INTRO + "The grass is green. The sky is blue.")]


def test_max_tokens_cuts_the_answer(engine: LocalEngine) -> None:
    full = answer(engine, body(text_document(GRASS_SKY), question=GRASS_SKY_QUESTION))
    full_text = "".join(block.text for block in full.content)
    assert full.stop_reason == "end_turn"
    assert full.usage.output_tokens == math.ceil(len(full_text) / 4)

    cut = answer(engine, body(text_document(GRASS_SKY), question=GRASS_SKY_QUESTION, max_tokens=8))
    cut_text = "".join(block.text for block in cut.content)
    assert cut.stop_reason == "max_tokens"
    assert cut_text == full_text[:32]
    assert cut.usage.output_tokens == 8
    # The block cut in the middle keeps its citation; the next block is gone.
    assert len(cut.content) == 2
    assert cut.content[1].text == "The gras"  # 32 characters in all, the intro being 24
    assert cut.content[1].citations == full.content[1].citations


def test_stop_sequence_cuts_before_the_sequence() -> None:
    blocks = [TextBlock(text="Based on: "), TextBlock(text="The sky is blue.")]
    limited = limit_answer(blocks, max_tokens=100, stop_sequences=["blue", "sky"])
    assert limited.stop_reason == "stop_sequence"
    assert limited.stop_sequence == "sky"
    assert [block.text for block in limited.content] == ["Based on: ", "The "]


def test_build_answer_with_no_documents_is_one_uncited_block() -> None:
    assert build_answer("anything", []) == [TextBlock(text=NO_DOCUMENTS_ANSWER)]


# --- token estimate --------------------------------------------------------------------------


def test_estimate_is_a_quarter_of_the_characters_rounded_up() -> None:
    assert [estimate_tokens(text) for text in ("", "a", "abcd", "abcde")] == [0, 1, 1, 2]


def test_request_tokens_count_title_data_and_question(engine: LocalEngine) -> None:
    request = parse(body(text_document(GRASS_SKY), question=GRASS_SKY_QUESTION))
    # title "My Document" 11 chars -> 3, data 36 -> 9, question 32 -> 8
    assert engine.count_tokens_blocking(request) == 3 + 9 + 8


def test_pdf_tokens_are_counted_page_by_page(engine: LocalEngine) -> None:
    request = parse(body(pdf_document(AMAZON_PDF.read_bytes()), question="Revenue?"))
    pages = [upstream_page_text(p) for p in extract_pdf_text(AMAZON_PDF.read_bytes()).pages]
    expected = sum(math.ceil(len(page) / 4) for page in pages) + estimate_tokens("Revenue?")
    assert engine.count_tokens_blocking(request) == expected


def test_system_string_and_blocks_are_the_same_prompt(engine: LocalEngine) -> None:
    as_string = parse(body(question="Hi", system="Be brief."))
    as_blocks = parse(body(question="Hi", system=[{"type": "text", "text": "Be brief."}]))
    units = prompt_units(as_string, [])
    assert units == prompt_units(as_blocks, [])
    assert engine.count_tokens_blocking(as_string) == 3 + 1


# --- prompt cache ----------------------------------------------------------------------------

BIG = " ".join(f"Sentence number {n} talks about topic {n % 7}." for n in range(400))


def cached_request(ttl: str | None = None) -> dict[str, Any]:
    control = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    return body(text_document(BIG, cache_control=control), question="What about topic 3?")


def test_cache_first_request_writes_second_reads_and_ttl_expires() -> None:
    clock = FakeClock()
    engine = LocalEngine(clock=clock)
    request = parse(cached_request())
    total = engine.count_tokens_blocking(request)
    document_tokens = total - estimate_tokens("What about topic 3?")
    assert document_tokens >= 1024

    first = engine.create_message_blocking(request).usage
    assert (first.cache_creation_input_tokens, first.cache_read_input_tokens) == (
        document_tokens,
        0,
    )
    assert first.cache_creation.ephemeral_5m_input_tokens == document_tokens
    assert first.input_tokens == total - document_tokens

    clock.advance(200)
    second = engine.create_message_blocking(request).usage
    assert (second.cache_creation_input_tokens, second.cache_read_input_tokens) == (
        0,
        document_tokens,
    )
    assert second.input_tokens == first.input_tokens

    clock.advance(299)  # the read at t=200 started the 5 minutes again
    assert engine.create_message_blocking(request).usage.cache_read_input_tokens == document_tokens

    clock.advance(301)
    expired = engine.create_message_blocking(request).usage
    assert (expired.cache_creation_input_tokens, expired.cache_read_input_tokens) == (
        document_tokens,
        0,
    )


def test_cache_one_hour_ttl() -> None:
    clock = FakeClock()
    engine = LocalEngine(clock=clock)
    request = parse(cached_request("1h"))
    first = engine.create_message_blocking(request).usage
    assert first.cache_creation.ephemeral_1h_input_tokens == first.cache_creation_input_tokens > 0
    assert first.cache_creation.ephemeral_5m_input_tokens == 0
    clock.advance(3_000)
    assert engine.create_message_blocking(request).usage.cache_read_input_tokens > 0
    clock.advance(3_601)
    assert engine.create_message_blocking(request).usage.cache_read_input_tokens == 0


def test_cache_ignores_prefixes_below_the_minimum() -> None:
    engine = LocalEngine(clock=FakeClock())  # 1,024 tokens, as on Sonnet models
    small = body(text_document(GRASS_SKY, cache_control={"type": "ephemeral"}), question="Sky?")
    for _ in range(2):
        usage = engine.create_message_blocking(parse(small)).usage
        assert (usage.cache_creation_input_tokens, usage.cache_read_input_tokens) == (0, 0)
        assert usage.input_tokens == engine.count_tokens_blocking(parse(small))


def test_cache_reads_an_earlier_prefix_through_the_lookback() -> None:
    engine = LocalEngine(clock=FakeClock())
    first_turn = cached_request()
    first = engine.create_message_blocking(parse(first_turn)).usage
    follow_up = {
        **first_turn,
        "messages": [
            first_turn["messages"][0],
            {"role": "assistant", "content": "Topic 3 comes up often."},
            {
                "role": "user",
                "content": [
                    {
                        "type": "text",
                        "text": "And topic 4?",
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
            },
        ],
    }
    request = parse(follow_up)
    usage = engine.create_message_blocking(request).usage
    assert usage.cache_read_input_tokens == first.cache_creation_input_tokens
    after_document = engine.count_tokens_blocking(request) - usage.cache_read_input_tokens
    assert usage.cache_creation_input_tokens == after_document
    assert usage.input_tokens == 0


def test_cache_splits_creation_by_ttl_and_counts_automatic_breakpoint() -> None:
    engine = LocalEngine(clock=FakeClock(), min_cacheable_tokens=0)
    data = body(
        text_document(GRASS_SKY, cache_control={"type": "ephemeral", "ttl": "1h"}),
        question=GRASS_SKY_QUESTION,
        cache_control={"type": "ephemeral"},
    )
    usage = engine.create_message_blocking(parse(data)).usage
    # document (3 + 9) under 1h, the question (8) under the automatic 5m breakpoint
    assert usage.cache_creation.ephemeral_1h_input_tokens == 12
    assert usage.cache_creation.ephemeral_5m_input_tokens == 8
    assert usage.input_tokens == 0


def test_cache_is_bounded_and_evicts_the_oldest_prefix() -> None:
    cache_engine = LocalEngine(clock=FakeClock(), min_cacheable_tokens=0, prompt_cache_entries=2)
    requests = [
        parse(body(text_document(f"Fact {n}.", cache_control={"type": "ephemeral"}), question="?x"))
        for n in range(3)
    ]
    for request in requests:
        cache_engine.create_message_blocking(request)
    assert len(cache_engine.prompt_cache) == 2
    assert cache_engine.create_message_blocking(requests[2]).usage.cache_read_input_tokens > 0
    assert cache_engine.create_message_blocking(requests[0]).usage.cache_read_input_tokens == 0


def test_cache_key_includes_the_model_and_every_earlier_block() -> None:
    engine = LocalEngine(clock=FakeClock(), min_cacheable_tokens=0)
    control = {"type": "ephemeral"}
    base = body(text_document(GRASS_SKY, cache_control=control), question="Sky?")
    engine.create_message_blocking(parse(base))
    other_model = {**base, "model": "claude-opus-5"}
    with_system = {**base, "system": "Be brief."}
    for variant in (other_model, with_system):
        assert engine.create_message_blocking(parse(variant)).usage.cache_read_input_tokens == 0
    assert engine.create_message_blocking(parse(base)).usage.cache_read_input_tokens == 12


async def test_concurrent_identical_requests_write_the_cache_once() -> None:
    engine = LocalEngine(clock=FakeClock())
    request = parse(cached_request())
    messages = await asyncio.gather(*(engine.create_message(request) for _ in range(8)))
    writes = [m.usage.cache_creation_input_tokens for m in messages]
    reads = [m.usage.cache_read_input_tokens for m in messages]
    assert sum(1 for tokens in writes if tokens) == 1
    assert sorted(reads) == [0] + [max(writes)] * 7


async def test_engine_work_runs_off_the_event_loop_thread() -> None:
    threads: list[threading.Thread] = []

    def clock() -> float:
        threads.append(threading.current_thread())
        return 0.0

    engine = LocalEngine(clock=clock)
    await engine.create_message(parse(cached_request()))
    assert threads
    assert all(thread is not threading.current_thread() for thread in threads)


def test_prompt_cache_refuses_a_size_of_zero() -> None:
    with pytest.raises(ValueError, match="max_entries"):
        PromptCache(max_entries=0)


# --- PDF cache -------------------------------------------------------------------------------


def small_pdf(width: int) -> bytes:
    writer = PdfWriter()
    writer.add_blank_page(width=width, height=200)
    with io.BytesIO() as out:
        writer.write(out)
        return out.getvalue()


def test_pdf_cache_parses_each_pdf_once_and_is_bounded() -> None:
    cache = ParsedPdfCache(max_entries=2)
    amazon = base64.b64encode(AMAZON_PDF.read_bytes()).decode()
    first = cache.load(amazon)
    assert cache.load(amazon) is first
    assert cache.parses == 1
    for width in (100, 120):
        cache.load(base64.b64encode(small_pdf(width)).decode())
    assert len(cache) == 2
    cache.load(amazon)
    assert cache.parses == 4


def test_repeated_questions_on_one_pdf_parse_it_once(engine: LocalEngine) -> None:
    data = body(pdf_document(AMAZON_PDF.read_bytes()), question=AMAZON_QUESTION)
    answer(engine, data)
    answer(engine, data)
    engine.count_tokens_blocking(parse(data))
    assert engine.pdf_cache.parses == 1


# --- stream events ---------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(st.text(min_size=1, max_size=300))
def test_text_deltas_join_back_to_the_text(text: str) -> None:
    deltas = split_text_deltas(text)
    assert "".join(deltas) == text
    assert all(deltas)


def test_text_deltas_are_a_few_per_block() -> None:
    deltas = split_text_deltas("In 2023, Amazon's total revenue grew 12% year-over-year. ")
    assert 2 <= len(deltas) <= 4


def test_stream_events_follow_the_upstream_order(engine: LocalEngine) -> None:
    message = answer(engine, body(text_document(GRASS_SKY), question=GRASS_SKY_QUESTION))
    events = message_events(message, request_id="req_test")
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "ping"]
    assert events[1][1] == {"type": "ping"}
    assert names[-2:] == ["message_delta", "message_stop"]
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["input_tokens"] == message.usage.input_tokens
    for index, block in enumerate(message.content):
        own = [data for _, data in events if data.get("index") == index]
        assert own[0]["type"] == "content_block_start"
        assert own[-1]["type"] == "content_block_stop"
        deltas = [data["delta"] for data in own[1:-1]]
        kinds = [delta["type"] for delta in deltas]
        if block.citations:
            assert own[0]["content_block"] == {"type": "text", "text": "", "citations": []}
            assert kinds.index("text_delta") == len(block.citations)
            assert [d["citation"] for d in deltas if d["type"] == "citations_delta"] == [
                citation.model_dump(mode="json") for citation in block.citations
            ]
        else:
            assert own[0]["content_block"] == {"type": "text", "text": ""}
            assert "citations_delta" not in kinds
        assert "".join(d["text"] for d in deltas if d["type"] == "text_delta") == block.text
    final = events[-2][1]
    assert final["delta"]["stop_reason"] == "end_turn"
    assert final["usage"]["output_tokens"] == message.usage.output_tokens


def test_stream_fault_breaks_off_with_an_overloaded_error(engine: LocalEngine) -> None:
    message = answer(engine, body(text_document(GRASS_SKY), question=GRASS_SKY_QUESTION))
    events = message_events(message, request_id="req_test", fail_after_blocks=1)
    assert events[-1] == (
        "error",
        {
            "type": "error",
            "error": {"type": "overloaded_error", "message": "Overloaded"},
            "request_id": "req_test",
        },
    )
    assert [name for name, _ in events].count("content_block_stop") == 1
    assert "message_stop" not in [name for name, _ in events]


# --- HTTP: validation errors, headers, SSE ---------------------------------------------------


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    app = create_local_engine_app(LocalEngine(min_cacheable_tokens=0))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://engine") as client:
        yield client


HEADERS = {"anthropic-version": VERSION, "x-api-key": "anything"}


def _with(data: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    copy = json.loads(json.dumps(data))
    change(copy)
    return copy


GOOD = body(text_document(GRASS_SKY), question=GRASS_SKY_QUESTION)
FIVE_CACHED = body(
    *(text_document(f"Doc {n}.", cache_control={"type": "ephemeral"}) for n in range(5)),
    question="?",
)


def _user_content(data: dict[str, Any]) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = data["messages"][0]["content"]
    return content


INVALID_REQUESTS: list[tuple[str, dict[str, Any] | bytes, str]] = [
    (
        "mixed citations",
        body(text_document("A."), text_document("B.", citations=False), question="?"),
        "citations must be enabled on all or none of the documents within a request",
    ),
    (
        "five cache_control blocks",
        FIVE_CACHED,
        "A maximum of 4 blocks with cache_control may be provided. Found 5.",
    ),
    (
        "six cache_control blocks, one at the top level",
        {**FIVE_CACHED, "cache_control": {"type": "ephemeral"}},
        "A maximum of 4 blocks with cache_control may be provided. Found 6.",
    ),
    (
        "1h after 5m",
        body(
            text_document("A.", cache_control={"type": "ephemeral"}),
            text_document("B.", cache_control={"type": "ephemeral", "ttl": "1h"}),
            question="?",
        ),
        "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block",
    ),
    ("temperature", {**GOOD, "temperature": 1.0}, "temperature: Extra inputs are not permitted"),
    ("top_p", {**GOOD, "top_p": 0.9}, "top_p: Extra inputs are not permitted"),
    ("top_k", {**GOOD, "top_k": 5}, "top_k: Extra inputs are not permitted"),
    (
        "empty text block",
        body(question=""),
        "messages: text content blocks must be non-empty",
    ),
    (
        "blank text block",
        body(question="  \n"),
        "messages: text content blocks must contain non-whitespace text",
    ),
    (
        "empty system block",
        {**GOOD, "system": [{"type": "text", "text": ""}]},
        "system: text content blocks must be non-empty",
    ),
    (
        "empty message",
        {**GOOD, "messages": [{"role": "user", "content": []}]},
        "messages.0: all messages must have non-empty content except for the optional final "
        "assistant message",
    ),
    (
        "document in an assistant turn",
        {
            **GOOD,
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": [text_document("A.")]},
                {"role": "user", "content": "And?"},
            ],
        },
        "messages.1.content.0: Input tag 'document' found using 'type' does not match any of the "
        "expected tags: 'image', 'text', 'bash_code_execution_tool_result', "
        "'code_execution_tool_result', 'container_upload', 'redacted_thinking', 'search_result', "
        "'server_tool_use', 'text_editor_code_execution_tool_result', 'thinking', 'tool_result', "
        "'tool_search_tool_result', 'tool_use', 'web_fetch_tool_result', 'web_search_tool_result'",
    ),
    (
        "citations on a user text block",
        _with(GOOD, lambda d: _user_content(d)[1].update(citations=[])),
        "messages.0.content.1.text.citations: Extra inputs are not permitted",
    ),
    (
        "unknown citation config key",
        _with(GOOD, lambda d: _user_content(d)[0].update(citations={"enabled": True, "x": 1})),
        "messages.0.content.0.document.citations.x: Extra inputs are not permitted",
    ),
    (
        "citation config that is not a boolean",
        _with(GOOD, lambda d: _user_content(d)[0].update(citations={"enabled": "yes"})),
        "messages.0.content.0.document.citations.enabled: Input should be a valid boolean",
    ),
    (
        "empty citation config",
        _with(GOOD, lambda d: _user_content(d)[0].update(citations={})),
        "messages.0.content.0.document.citations.enabled: Field required",
    ),
    ("missing model", _with(GOOD, lambda d: d.pop("model")), "model: Field required"),
    (
        "missing max_tokens",
        _with(GOOD, lambda d: d.pop("max_tokens")),
        "max_tokens: Field required",
    ),
    ("missing messages", _with(GOOD, lambda d: d.pop("messages")), "messages: Field required"),
    ("no messages", {**GOOD, "messages": []}, "messages: at least one message is required"),
    (
        "max_tokens of 0",
        {**GOOD, "max_tokens": 0},
        "max_tokens: Input should be greater than or equal to 1",
    ),
    (
        "unknown field",
        {**GOOD, "colour": "blue"},
        "colour: Extra inputs are not permitted",
    ),
    (
        "bad JSON",
        b"{not json",
        "The request body is not valid JSON: Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)",
    ),
    (
        "JSON that is not an object",
        b"[]",
        "Input should be a valid dictionary or object to extract fields from",
    ),
    (
        "PDF that is not base64",
        body(
            {
                "type": "document",
                "source": {"type": "base64", "media_type": "application/pdf", "data": "%%%"},
            },
            question="?",
        ),
        "The PDF specified was not valid.",
    ),
    (
        "encrypted PDF",
        body(pdf_document((CORPUS / "libreoffice-writer-password.pdf").read_bytes()), question="?"),
        "The PDF specified is password protected.",
    ),
    (
        "URL source",
        body(
            {"type": "document", "source": {"type": "url", "url": "https://example.test/a.pdf"}},
            question="?",
        ),
        "messages.0.content.0.document.source: the local engine cannot read 'url' sources; "
        "send the document itself (text, base64 PDF or content)",
    ),
]


@pytest.mark.parametrize(
    ("payload", "message"),
    [(payload, message) for _, payload, message in INVALID_REQUESTS],
    ids=[name for name, _, _ in INVALID_REQUESTS],
)
async def test_invalid_requests_get_the_upstream_error_shape(
    http: httpx.AsyncClient, payload: dict[str, Any] | bytes, message: str
) -> None:
    content = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    response = await http.post("/v1/messages", content=content, headers=HEADERS)
    assert response.status_code == 400
    request_id = response.headers["request-id"]
    assert request_id.startswith("req_")
    assert response.json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": message},
        "request_id": request_id,
    }


async def test_count_tokens_validates_the_same_way(http: httpx.AsyncClient) -> None:
    data = _with(FIVE_CACHED, lambda d: d.pop("max_tokens"))
    response = await http.post("/v1/messages/count_tokens", json=data, headers=HEADERS)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "A maximum of 4 blocks with cache_control may be provided. Found 5."
    )
    with_max_tokens = await http.post("/v1/messages/count_tokens", json=GOOD, headers=HEADERS)
    assert with_max_tokens.json()["error"]["message"] == (
        "max_tokens: Extra inputs are not permitted"
    )


async def test_missing_version_header_is_refused(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/messages", json=GOOD)
    assert response.status_code == 400
    assert response.json()["error"] == {
        "type": "invalid_request_error",
        "message": "anthropic-version: header is required",
    }


async def test_older_version_accepts_sampling_and_user_citations(http: httpx.AsyncClient) -> None:
    data = _with(GOOD, lambda d: _user_content(d)[1].update(citations=[]))
    data.update(temperature=0.0, top_p=1.0, top_k=5)
    headers = {**HEADERS, "anthropic-version": "2023-06-01"}
    response = await http.post("/v1/messages", json=data, headers=headers)
    assert response.status_code == 200
    assert response.json()["model"] == MODEL_NAME


async def test_bearer_auth_and_no_key_are_both_fine(http: httpx.AsyncClient) -> None:
    for headers in (
        {"anthropic-version": VERSION, "authorization": "Bearer sk-dummy"},
        {"anthropic-version": VERSION},
    ):
        response = await http.post("/v1/messages", json=GOOD, headers=headers)
        assert response.status_code == 200
        assert response.headers["request-id"].startswith("req_")


async def test_oversized_body_is_refused(http: httpx.AsyncClient) -> None:
    response = await http.post(
        "/v1/messages", content=b" " * (32 * 1024 * 1024 + 1), headers=HEADERS
    )
    assert response.status_code == 413
    assert response.json()["error"] == {
        "type": "request_too_large",
        "message": "Request exceeds the maximum allowed number of bytes.",
    }


async def test_unknown_path_is_a_not_found_error(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/complete", json={}, headers=HEADERS)
    assert response.status_code == 404
    assert response.json() == {
        "type": "error",
        "error": {"type": "not_found_error", "message": "Not Found"},
        "request_id": response.headers["request-id"],
    }


async def test_json_answer_has_the_upstream_message_shape(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/messages", json=GOOD, headers=HEADERS)
    assert response.status_code == 200
    data = response.json()
    assert list(data) == [
        "id",
        "type",
        "role",
        "model",
        "content",
        "stop_reason",
        "stop_sequence",
        "stop_details",
        "usage",
    ]
    assert data["id"].startswith("msg_01") and len(data["id"]) == 28
    assert data["content"][0] == {"type": "text", "text": INTRO}  # uncited: no citations key
    assert data["usage"] == {
        "input_tokens": 20,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "output_tokens": data["usage"]["output_tokens"],
        "service_tier": "standard",
    }


def parse_sse(raw: str) -> list[tuple[str, str]]:
    """(event, data) pairs of an SSE body, by the spec's line rules."""
    events = []
    for chunk in raw.split("\n\n"):
        if not chunk.strip():
            continue
        fields = dict(line.split(": ", 1) for line in chunk.split("\n"))
        events.append((fields["event"], fields["data"]))
    return events


async def test_stream_over_http_is_the_upstream_wire_format(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/messages", json={**GOOD, "stream": True}, headers=HEADERS)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert response.headers["request-id"].startswith("req_")
    assert "\r" not in response.text
    events = parse_sse(response.text)
    assert events[1] == ("ping", '{"type": "ping"}')
    assert (events[0][0], events[-1][0]) == ("message_start", "message_stop")
    for name, data in events:
        assert json.loads(data)["type"] == name


async def test_stream_lines_survive_a_client_that_splits_on_unicode_line_breaks(
    http: httpx.AsyncClient,
) -> None:
    data = "The grass is green.\u2028Really green. The sky is blue."
    request = body(text_document(data), question="Is the grass green?", stream=True)
    response = await http.post("/v1/messages", json=request, headers=HEADERS)
    # httpx's iter_lines splits like str.splitlines(), U+2028 included.
    lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    events = [json.loads(line.removeprefix("data: ")) for line in lines]
    cited = [
        event["delta"]["citation"]["cited_text"]
        for event in events
        if event["type"] == "content_block_delta" and event["delta"]["type"] == "citations_delta"
    ]
    assert cited == ["The grass is green.\u2028"]


async def test_stream_fault_arrives_as_an_error_event_after_200() -> None:
    app = create_local_engine_app(LocalEngine(fail_streams_after_blocks=2))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://engine") as client:
        response = await client.post("/v1/messages", json={**GOOD, "stream": True}, headers=HEADERS)
    assert response.status_code == 200
    name, data = parse_sse(response.text)[-1]
    assert name == "error"
    assert json.loads(data) == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
        "request_id": response.headers["request-id"],
    }


def test_api_error_body_is_the_upstream_shape() -> None:
    assert ApiError(529, "overloaded_error", "Overloaded").body("req_x") == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
        "request_id": "req_x",
    }
