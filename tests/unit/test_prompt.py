"""Building the Messages request: order, citations on all, breakpoints within the limit."""

from __future__ import annotations

import pytest

from app.answers.prompt import PromptDocument, build_message_request, cache_breakpoints
from app.documents.kinds import CONTENT, PDF, TEXT, StoredParts


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
