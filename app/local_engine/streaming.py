"""A finished message as the upstream streams it, event by event.

Order (as in the recorded real streams): ``message_start`` (the message with no content, stop
reason null, input usage), a ``ping``, then per block ``content_block_start`` (a cited block
starts with ``"citations": []``), its ``citations_delta`` events, then its text in a few
``text_delta`` events, ``content_block_stop``; then ``message_delta`` (stop reason, cumulative
usage) and ``message_stop``. Events are plain ``(name, data)`` pairs; the ASGI layer writes them.
"""

from __future__ import annotations

import math
import re
from typing import Any

from app.local_engine.api_error import ApiError
from app.local_engine.wire import Message

StreamEvent = tuple[str, dict[str, Any]]

PING: StreamEvent = ("ping", {"type": "ping"})
TEXT_DELTAS_PER_BLOCK = 3
MIN_TEXT_DELTA_CHARS = 8
_WORD_WITH_SPACE = re.compile(r"\s*\S+\s*|\s+")


def split_text_deltas(text: str, pieces: int = TEXT_DELTAS_PER_BLOCK) -> list[str]:
    """Cut a block's text at word boundaries into about ``pieces`` deltas that join back to it."""
    if not text:
        return []
    size = max(MIN_TEXT_DELTA_CHARS, math.ceil(len(text) / pieces))
    deltas: list[str] = []
    current = ""
    for word in _WORD_WITH_SPACE.findall(text):
        current += word
        if len(current) >= size:
            deltas.append(current)
            current = ""
    if current:
        deltas.append(current)
    return deltas


def message_events(
    message: Message, *, request_id: str, fail_after_blocks: int | None = None
) -> list[StreamEvent]:
    """Every event of the stream of ``message``.

    With ``fail_after_blocks``, the stream breaks off after that many content blocks with an
    ``overloaded_error`` event, as the upstream's can after HTTP 200 (a fault for clients' tests).
    """
    start = message.model_dump(mode="json")
    start.update(content=[], stop_reason=None, stop_sequence=None, stop_details=None)
    # The upstream counts the first output token in message_start; message_delta has the total.
    start["usage"]["output_tokens"] = 1
    events: list[StreamEvent] = [
        ("message_start", {"type": "message_start", "message": start}),
        PING,
    ]
    for index, block in enumerate(message.content):
        if fail_after_blocks is not None and index >= fail_after_blocks:
            overloaded = ApiError(529, "overloaded_error", "Overloaded")
            events.append(("error", overloaded.body(request_id)))
            return events
        opening: dict[str, Any] = {"type": "text", "text": ""}
        if block.citations is not None:
            opening["citations"] = []
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": opening},
            )
        )
        for citation in block.citations or ():
            delta = {"type": "citations_delta", "citation": citation.model_dump(mode="json")}
            events.append(_delta(index, delta))
        for piece in split_text_deltas(block.text):
            events.append(_delta(index, {"type": "text_delta", "text": piece}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    usage = message.usage
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": message.stop_reason,
                    "stop_sequence": message.stop_sequence,
                    "stop_details": None,
                },
                "usage": {
                    "input_tokens": usage.input_tokens,
                    "cache_creation_input_tokens": usage.cache_creation_input_tokens,
                    "cache_read_input_tokens": usage.cache_read_input_tokens,
                    "output_tokens": usage.output_tokens,
                },
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _delta(index: int, delta: dict[str, Any]) -> StreamEvent:
    return ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
