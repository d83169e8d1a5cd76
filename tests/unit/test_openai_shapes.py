"""What the OpenAI-compatible API shows of a resolved citation and of usage: the pure
renderings of app/compat/openai/shapes.py."""

from __future__ import annotations

from app.compat.openai.shapes import chat_usage, citegate_of, finish_reason, responses_usage

SPAN = {"start_char": 0, "end_char": 20, "start_page": None, "end_page": None, "chunk_indices": [0]}
CITATION = {
    "type": "char_location",
    "cited_text": "The grass is green. ",
    "document_index": 0,
    "start_char_index": 0,
    "end_char_index": 20,
    "document_id": "doc_1",
    "span": SPAN,
    "verified": True,
}


def test_citegate_keeps_the_resolution_and_support_when_the_citation_has_it() -> None:
    assert citegate_of(CITATION) == {
        "document_id": "doc_1",
        "cited_text": "The grass is green. ",
        "span": SPAN,
        "verified": True,
    }
    support = {"verdict": "supported", "reasons": ["lexical"]}
    assert citegate_of({**CITATION, "support": support})["support"] == support
    # A citation that could not be resolved says so.
    unresolved = {"type": "web_search_result_location", "cited_text": "x", "url": "https://a"}
    assert citegate_of(unresolved) == {
        "document_id": None,
        "cited_text": "x",
        "span": None,
        "verified": False,
    }


def test_usage_counts_every_input_token_and_names_the_cached_ones() -> None:
    usage = {
        "input_tokens": 25,
        "output_tokens": 40,
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": 900,
    }
    chat = chat_usage(usage)
    assert (chat["prompt_tokens"], chat["completion_tokens"], chat["total_tokens"]) == (
        1025,
        40,
        1065,
    )
    assert chat["prompt_tokens_details"]["cached_tokens"] == 900
    responses = responses_usage(usage)
    assert (responses["input_tokens"], responses["output_tokens"]) == (1025, 40)
    assert responses["input_tokens_details"] == {"cached_tokens": 900, "cache_write_tokens": 100}


def test_finish_reasons() -> None:
    assert [
        finish_reason(reason)
        for reason in (None, "end_turn", "stop_sequence", "max_tokens", "refusal", "tool_use")
    ] == ["stop", "stop", "stop", "length", "content_filter", "tool_calls"]
