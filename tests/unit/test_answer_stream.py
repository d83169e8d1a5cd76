"""AnswerStream keeps what arrived as the content blocks a whole answer has: a text block's
text is its start's text and every delta's, in order, however many deltas there are."""

from __future__ import annotations

from typing import Any

from app.answers.streaming import AnswerStream


def delta(index: int, text: str) -> dict[str, Any]:
    return {
        "type": "content_block_delta",
        "index": index,
        "delta": {"type": "text_delta", "text": text},
    }


def start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def test_a_text_block_is_its_deltas_joined_in_order() -> None:
    stream = AnswerStream([None])
    words = [f"word{n} " for n in range(20_000)]
    made = stream.feed(start(0, {"type": "text", "text": "Begun: "}))
    for word in words:
        made += stream.feed(delta(0, word))
    made += stream.feed({"type": "content_block_stop", "index": 0})
    assert stream.content() == [
        {"type": "text", "text": "Begun: " + "".join(words), "citations": []}
    ]
    deltas = [data["text"] for name, data in made if name == "text.delta"]
    assert deltas == ["Begun: ", *words]


def test_blocks_keep_their_own_text_and_order() -> None:
    stream = AnswerStream([None])
    stream.feed(start(1, {"type": "text", "text": ""}))
    stream.feed(start(0, {"type": "thinking", "thinking": "hm"}))
    stream.feed(delta(1, "second "))
    stream.feed(start(2, {"type": "text", "text": "third"}))
    stream.feed(delta(1, "block"))
    stream.feed(delta(2, "!"))
    assert stream.content() == [
        {"type": "thinking", "thinking": "hm"},
        {"type": "text", "text": "second block", "citations": []},
        {"type": "text", "text": "third!", "citations": []},
    ]
    stream.feed(delta(2, "?"))  # asked again, content has what arrived since
    assert stream.content()[2]["text"] == "third!?"
