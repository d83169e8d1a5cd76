"""Ranking and answers: which passages the local engine cites, in the upstream's citation
shapes, and how max_tokens and stop sequences cut an answer."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from app.documents.pdf import extract_pdf_text
from app.local_engine import MODEL_NAME, LocalEngine
from app.local_engine.answering import (
    INTRO,
    NAME_WEIGHT,
    NO_DOCUMENTS_ANSWER,
    NOTHING_FOUND_ANSWER,
    build_answer,
    limit_answer,
    question_parts,
    question_weights,
    rank_chunks,
    refine,
    select_passages,
)
from app.local_engine.documents import (
    RequestDocument,
    chunk_pdf_pages,
    chunk_plain_text,
    upstream_page_text,
)
from app.local_engine.wire import CharLocation, ContentBlockLocation, PageLocation, TextBlock
from tests.fixture_files import AMAZON_PDF
from tests.unit.local_engine.request_bodies import (
    AMAZON_QUESTION,
    GRASS_SKY,
    GRASS_SKY_QUESTION,
    answer,
    body,
    cited_blocks,
    content_document,
    parse,
    pdf_document,
    text_document,
)

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


def test_a_question_is_cut_into_the_things_it_asks() -> None:
    assert question_parts("What color is the grass and sky?") == [
        "What color is the grass and sky?"
    ]
    assert question_parts("What is Project Kuiper, and how did advertising grow?") == [
        "What is Project Kuiper",
        "how did advertising grow?",
    ]
    assert question_parts("What was revenue? How fast is Kuiper?") == [
        "What was revenue?",
        "How fast is Kuiper?",
    ]


def test_names_and_numbers_of_a_question_weigh_more() -> None:
    assert set(question_weights("How fast is Kuiper?")) == {"kuiper"}
    assert set(question_weights("What was Amazon's total revenue in 2023?")) == {"amazon", "2023"}
    assert question_weights("What is the AWS margin?") == {"aws": NAME_WEIGHT}
    assert question_weights("what is it?") == {}


def test_prose_wrapped_with_commas_is_no_table() -> None:
    prose = (
        "The committee met on Monday, Tuesday, and again on Friday to discuss what the\n"
        "budget, the plan, and the staffing of the new office should look like next year\n"
        "when, as expected, the board, having read it, approves the proposals in full.\n"
    )
    document = RequestDocument(0, None, "text", True, chunk_plain_text(prose), (prose,))
    assert [kind for _, kind in refine(document)] == ["prose"]
    table = "region,quarter,sales\nNorth,Q1,100\nSouth,Q1,250\n"
    document = RequestDocument(0, None, "text", True, chunk_plain_text(table), (table,))
    assert [kind for _, kind in refine(document)] == ["row", "row", "row"]
