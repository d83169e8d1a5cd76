"""From the upstream's stream events to Citegate's: pure, one event at a time.

Citations are resolved the moment their ``citations_delta`` arrives. When their support is
checked, their events wait for the end of their segment's text (the claim they are checked
against) and go out just before ``segment.done``, each with its lexical verdict. What arrived is
kept as
content blocks of the same shape a non-streamed answer has, so that the stored answer is built
by the same code either way (``build_segments``) and comes out the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.answers.answer import USAGE_FIELDS, SupportMode
from app.answers.citations import resolve_citation, with_support
from app.documents.index import DocumentIndex
from app.documents.sources import PromptDocument
from app.search.passages import Passage

Event = tuple[str, dict[str, Any]]


class AnswerStream:
    """Feeds on upstream events; says which Citegate events each one makes."""

    def __init__(
        self,
        documents: Sequence[DocumentIndex | None],
        passages: Sequence[Passage] = (),
        sent: Sequence[PromptDocument] | None = None,
        support: SupportMode | None = None,
    ) -> None:
        self._documents = documents
        self._passages = passages
        self._sent = sent
        self._support = support  # None: citation events go out as they arrive, unchecked
        self._waiting: dict[int, list[dict[str, Any]]] = {}  # segment -> resolved citations
        self._blocks: dict[int, dict[str, Any]] = {}  # upstream block index -> block
        self._segments: dict[int, int] = {}  # upstream index of a text block -> segment index
        # A text block's text as it came, joined when asked for: a string grown by each delta
        # would be copied whole each time, quadratic in a long answer's deltas.
        self._texts: dict[int, list[str]] = {}
        self.message_id: str | None = None
        self.model: str | None = None
        self.stop_reason: str | None = None
        self.usage: dict[str, int] = dict.fromkeys(USAGE_FIELDS, 0)
        self.started = False
        self.finished = False
        self.changes = 0  # grows with each block, text and citation that arrives

    def feed(self, event: dict[str, Any]) -> list[Event]:
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message") or {}
            self.started = True
            self.message_id = message.get("id")
            self.model = message.get("model")
            self._take_usage(message.get("usage"))
        elif kind == "content_block_start":
            return self._start_block(event)
        elif kind == "content_block_delta":
            return self._delta(event)
        elif kind == "content_block_stop":
            index = event.get("index")
            if index in self._segments:
                segment = self._segments[index]
                events = self._checked(index, segment)
                events.append(("segment.done", {"segment_index": segment}))
                return events
        elif kind == "message_delta":
            self.stop_reason = (event.get("delta") or {}).get("stop_reason", self.stop_reason)
            self._take_usage(event.get("usage"))  # cumulative: the newest numbers win
        elif kind == "message_stop":
            self.finished = True
        return []  # unknown event types are skipped

    def content(self) -> list[dict[str, Any]]:
        """The content blocks that arrived, in order."""
        for index, parts in self._texts.items():
            self._blocks[index]["text"] = "".join(parts)
        return [self._blocks[index] for index in sorted(self._blocks)]

    def _start_block(self, event: dict[str, Any]) -> list[Event]:
        index, block = event.get("index"), dict(event.get("content_block") or {})
        if not isinstance(index, int):
            return []
        self._blocks[index] = block
        self.changes += 1
        if block.get("type") != "text":
            return []
        segment = self._segments[index] = len(self._segments)
        initial = list(block.get("citations") or [])
        text = str(block.get("text") or "")
        self._texts[index] = [text]  # the block's text, set from these by ``content``
        block["citations"] = []
        events: list[Event] = [("segment.started", {"segment_index": segment})]
        for citation in initial:
            events.extend(self._cite(block, segment, citation))
        if text:
            events.append(("text.delta", {"segment_index": segment, "text": text}))
        return events

    def _delta(self, event: dict[str, Any]) -> list[Event]:
        index, delta = event.get("index"), event.get("delta") or {}
        if index not in self._segments:
            return []
        block, segment = self._blocks[index], self._segments[index]
        self.changes += 1
        if delta.get("type") == "text_delta":
            text = str(delta.get("text") or "")
            self._texts[index].append(text)
            return [("text.delta", {"segment_index": segment, "text": text})]
        if delta.get("type") == "citations_delta" and isinstance(delta.get("citation"), dict):
            return self._cite(block, segment, delta["citation"])
        return []

    def _cite(self, block: dict[str, Any], segment: int, citation: dict[str, Any]) -> list[Event]:
        block["citations"].append(citation)
        resolved = resolve_citation(citation, self._documents, self._passages, self._sent)
        if self._support is not None:
            self._waiting.setdefault(segment, []).append(resolved)
            return []
        return [("citation", {"segment_index": segment, "citation": resolved})]

    def _checked(self, index: int, segment: int) -> list[Event]:
        """The segment's citations that waited for its text, with their support."""
        waiting = self._waiting.pop(segment, None)
        if not waiting or self._support is None:
            return []
        text = "".join(self._texts[index])
        return [
            ("citation", {"segment_index": segment, "citation": citation})
            for citation in with_support(text, waiting, self._support)
        ]

    def _take_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            for field in USAGE_FIELDS:
                if isinstance(usage.get(field), int):
                    self.usage[field] = usage[field]
