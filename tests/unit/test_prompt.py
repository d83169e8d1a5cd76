"""Building the Messages request: order, citations on all, breakpoints within the limit."""

from __future__ import annotations

import pytest

from app.answers.prompt import (
    Turn,
    assistant_blocks,
    build_message_request,
    cache_breakpoints,
    passage_blocks,
)
from app.documents.kinds import CONTENT, PDF, TEXT, StoredParts
from app.documents.sources import PromptDocument
from app.search.passages import Passage


def text_document(text: str, title: str | None = None) -> PromptDocument:
    return PromptDocument(title, None, TEXT.upstream_source(StoredParts(text, [text])))


@pytest.mark.parametrize("count", range(1, 41))
def test_breakpoints_stay_within_four_and_cover_the_last_document(count: int) -> None:
    marked = cache_breakpoints(count)
    assert 1 <= len(marked) <= 4
    assert marked[-1] == count - 1
    assert marked == sorted(set(marked)) and marked[0] >= 0
    gaps = [b - a for a, b in zip([-1, *marked], marked, strict=False)]
    assert max(gaps) <= -(-count // len(marked))  # spread evenly


def test_request_shape() -> None:
    documents = [
        text_document("Alpha.\r\n", title="A"),
        PromptDocument(None, "ctx", PDF.upstream_source(StoredParts("", [], b"%PDF-"))),
        PromptDocument(
            "C", None, CONTENT.upstream_source(StoredParts("One.Two.", ["One.", "Two."]))
        ),
    ]
    request = build_message_request(documents, "Why?", model="m", max_tokens=9, system="Be brief.")
    assert (
        request["model"] == "m" and request["max_tokens"] == 9 and request["system"] == "Be brief."
    )
    assert not {"temperature", "top_p", "top_k"} & set(request)
    (turn,) = request["messages"]
    blocks = turn["content"]
    assert turn["role"] == "user" and blocks[-1] == {"type": "text", "text": "Why?"}
    assert blocks[0]["source"] == {"type": "text", "media_type": "text/plain", "data": "Alpha.\r\n"}
    assert blocks[1]["source"] == {
        "type": "base64",
        "media_type": "application/pdf",
        "data": "JVBERi0=",
    }
    assert blocks[1]["context"] == "ctx" and "title" not in blocks[1]
    assert blocks[2]["source"]["content"] == [
        {"type": "text", "text": "One."},
        {"type": "text", "text": "Two."},
    ]
    assert all(block["citations"] == {"enabled": True} for block in blocks[:3])
    assert [("cache_control" in block) for block in blocks] == [True, True, True, False]


def test_seven_documents() -> None:
    documents = [text_document(f"Doc {n}.") for n in range(7)]
    blocks = build_message_request(documents, "Q?", model="m", max_tokens=1)["messages"][0][
        "content"
    ]
    marked = [i for i, block in enumerate(blocks) if "cache_control" in block]
    assert len(marked) == 4 and marked[-1] == 6
    assert [block["source"]["data"] for block in blocks[:7]] == [f"Doc {n}." for n in range(7)]


def passage(
    document_id: str, chunks: list[str], start: int = 0, page: int | None = None
) -> Passage:
    return Passage(
        document_id=document_id,
        title="Guide" if page is None else "Report",
        text="".join(chunks),
        start_char=start,
        end_char=start + len("".join(chunks)),
        start_page=page,
        end_page=page,
        chunk_indices=list(range(10, 10 + len(chunks))),
        score=1.0,
        chunk_texts=chunks,
    )


def test_passages_are_citable_search_results_before_the_question() -> None:
    found = [passage("doc_a", ["One. ", "Two. "]), passage("doc_b", ["Three."], 40, page=3)]
    request = build_message_request([], "Q?", model="m", max_tokens=1, passages=found)
    (turn,) = request["messages"]
    first, second, question = turn["content"]
    assert first == {
        "type": "search_result",
        "source": "/v1/documents/doc_a#chars=0-10",
        "title": "Guide",
        "content": [{"type": "text", "text": "One. "}, {"type": "text", "text": "Two. "}],
        "citations": {"enabled": True},
    }
    assert second["title"] == "Report, page 3" and second["cache_control"] == {"type": "ephemeral"}
    assert question == {"type": "text", "text": "Q?"}


def test_blank_chunks_are_not_blocks_but_keep_the_offsets() -> None:
    blocks = passage_blocks(passage("doc_a", ["One. ", "\r\n", "Two."], start=100))
    assert [(b.chunk_index, b.start_char, b.end_char, b.text) for b in blocks] == [
        (10, 100, 105, "One. "),
        (12, 107, 111, "Two."),
    ]


def test_earlier_passages_are_sent_again_where_they_were() -> None:
    earlier = passage("doc_a", ["Old. "])
    answer = [{"text": "Old news.", "citations": []}]
    history = [Turn("First?", answer, [earlier])]
    now = passage("doc_b", ["New. "])
    request = build_message_request(
        [], "Second?", model="m", max_tokens=1, passages=[now], history=history
    )
    user, assistant, follow_up = request["messages"]
    assert [b["type"] for b in user["content"]] == ["search_result", "text"]
    assert user["content"][0]["content"] == [{"type": "text", "text": "Old. "}]
    assert assistant["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert [b["type"] for b in follow_up["content"]] == ["search_result", "text"]
    controls = [
        block
        for message in request["messages"]
        for block in message["content"]
        if "cache_control" in block
    ]
    assert len(controls) == 2


def test_blank_segments_are_not_sent_back() -> None:
    """The upstream refuses empty and whitespace-only text blocks in any turn."""
    segments = [{"text": "\n\n", "citations": []}, {"text": "Green.", "citations": []}]
    assert assistant_blocks(segments) == [{"type": "text", "text": "Green."}]
    assert assistant_blocks([{"text": " ", "citations": []}]) == []
