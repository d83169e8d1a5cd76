"""Request bodies and small tools the local engine's unit tests share: documents of each kind,
a Messages API body around them, parsing it as the engine does, and a clock moved by hand."""

from __future__ import annotations

import base64
import json
from typing import Any

from app.local_engine import LocalEngine
from app.local_engine.request_validation import ParsedRequest, parse_create_request
from app.local_engine.wire import Message, TextBlock

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
    message = engine.create_message_blocking(parse(data))
    assert isinstance(message, Message)  # no judge's request here
    return message


def cited_blocks(message: Message) -> list[TextBlock]:
    return [block for block in message.content if block.citations]


HEADERS = {"anthropic-version": VERSION, "x-api-key": "anything"}


GOOD = body(text_document(GRASS_SKY), question=GRASS_SKY_QUESTION)
