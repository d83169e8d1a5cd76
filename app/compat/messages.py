"""A Messages API request over stored documents, and its answer enriched. Pure functions.

The caller's body is kept as sent but for two things: each document block whose source is
``{"type": "file", "file_id": …}`` gets the stored document's source (and its title and
context, where the block has none), and documents get ``cache_control`` within what the
request leaves of the upstream's 4 breakpoints. Every other field passes through untouched,
including those Citegate does not know.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from app.answers.prompt import EPHEMERAL, cache_breakpoints
from app.answers.streaming import Event
from app.documents.sources import DocumentsTooLarge, SourceDocument
from app.upstream.stream import Frame
from app.upstream.wire import MAX_CACHE_BREAKPOINTS


class _MessageParam(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict[str, Any]]


class _CountTokensParams(BaseModel):
    """What Citegate reads of a request; the upstream checks the rest."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, max_length=200)
    messages: list[_MessageParam]
    stream: bool = False


class _CreateMessageParams(_CountTokensParams):
    max_tokens: int = Field(ge=1, lt=2**31)  # the stored answer's column is an integer


class InvalidBody(ValueError):
    """The body is not a JSON object."""


@dataclass(frozen=True, slots=True)
class MessagesRequest:
    body: dict[str, Any]  # as the caller sent it, changed in place by ``ground``
    documents: list[dict[str, Any]]  # every document block, in the order the API counts them
    stream: bool

    @property
    def file_ids(self) -> list[str | None]:
        """Each document block's file id; None for a block that names no file."""
        return [_file_id(block) for block in self.documents]

    @property
    def question(self) -> str:
        """The text of the last user turn, as the stored answer's question."""
        for message in reversed(self.body["messages"]):
            if message.get("role") == "user":
                content = message.get("content")
                if isinstance(content, str):
                    return content
                return "\n".join(
                    str(block.get("text") or "")
                    for block in content
                    if isinstance(block, dict) and block.get("type") == "text"
                )
        return ""


def parse_messages_request(raw: bytes, *, create: bool) -> MessagesRequest:
    """The request; ``InvalidBody`` for a body that is no JSON object, pydantic's
    ``ValidationError`` for one without what Citegate reads (model, messages, max_tokens)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidBody("The request body is not valid JSON.") from exc
    if not isinstance(body, dict):
        raise InvalidBody("The request body must be a JSON object.")
    return messages_request(body, create=create)


def messages_request(body: dict[str, Any], *, create: bool) -> MessagesRequest:
    """The request of a body already read (a batch request's ``params``); pydantic's
    ``ValidationError`` for one without what Citegate reads."""
    params = (_CreateMessageParams if create else _CountTokensParams).model_validate(body)
    return MessagesRequest(body, list(_document_blocks(body["messages"])), params.stream)


def _content_blocks(messages: Sequence[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every block of the turns in order, those inside a block's ``content`` (a tool result's)
    after it."""
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            yield from _nested(content)


def _nested(blocks: list[Any]) -> Iterator[dict[str, Any]]:
    for block in blocks:
        if isinstance(block, dict):
            yield block
            if block.get("type") != "document" and isinstance(block.get("content"), list):
                yield from _nested(block["content"])


def _document_blocks(messages: Sequence[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    return (block for block in _content_blocks(messages) if block.get("type") == "document")


def _file_id(block: dict[str, Any]) -> str | None:
    source = block.get("source")
    if isinstance(source, dict) and source.get("type") == "file":
        file_id = source.get("file_id")
        return file_id if isinstance(file_id, str) else None
    return None


def ground(request: MessagesRequest, sources: Sequence[SourceDocument | None]) -> None:
    """Give each file's document block its stored document, then add ``cache_control``.

    ``sources`` are the stored documents of ``request.documents``, in order (None for a
    block that names no file). A file is one document block: a PDF that only page windows
    could send (past the upstream's pages per document) is refused, as the upstream would.
    """
    for block, source in zip(request.documents, sources, strict=True):
        if source is None:
            continue
        if len(source.prompts) != 1:
            raise DocumentsTooLarge(
                f"File {source.document_id} has more pages than one document block takes; "
                "ask about it through /v1/answers, which sends it in page windows."
            )
        (prompt,) = source.prompts
        block["source"] = prompt.source
        for name, value in (("title", prompt.title), ("context", prompt.context)):
            if value is not None and block.get(name) is None:
                block[name] = value
    add_cache_control(request.body, request.documents)


def _marked(block: Any) -> bool:
    return isinstance(block, dict) and block.get("cache_control") is not None


def add_cache_control(body: dict[str, Any], documents: Sequence[dict[str, Any]]) -> None:
    """Mark documents for the prompt cache with the breakpoints the request leaves free.

    The rule of ``/v1/answers`` (``cache_breakpoints``: one on the last document, the rest
    spread over earlier ones), over the documents the caller did not mark; the caller's own
    breakpoints (tools, system, blocks, a top-level automatic one) count against the limit
    and are never changed. A breakpoint added before one of the caller's with a ``1h`` TTL
    gets ``1h`` too: the upstream refuses a ``1h`` breakpoint after a ``5m`` one.
    """
    blocks = list(_content_blocks(body["messages"]))
    used = sum(1 for block in blocks if _marked(block))
    used += 1 if body.get("cache_control") is not None else 0
    for listed in (body.get("tools"), body.get("system")):
        if isinstance(listed, list):
            used += sum(1 for block in listed if _marked(block))
    free = MAX_CACHE_BREAKPOINTS - used
    unmarked = [block for block in documents if not _marked(block)]
    chosen = [unmarked[n] for n in cache_breakpoints(len(unmarked), free)]
    if not chosen:
        return
    last_hour = _last_hour_position(body, blocks)
    positions = {id(block): position for position, block in enumerate(blocks)}
    for block in chosen:
        if positions[id(block)] < last_hour:
            block["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
        else:
            block["cache_control"] = dict(EPHEMERAL)


def _last_hour_position(body: dict[str, Any], blocks: Sequence[dict[str, Any]]) -> float:
    """Where the last of the caller's ``1h`` breakpoints in the turns is (-1 for none); a
    top-level automatic one with ``1h`` comes after every block."""

    def hour(control: Any) -> bool:
        return isinstance(control, dict) and control.get("ttl") == "1h"

    if hour(body.get("cache_control")):
        return float("inf")
    last = -1
    for position, block in enumerate(blocks):
        if hour(block.get("cache_control")):
            last = position
    return last


def citegate_of(resolved: dict[str, Any]) -> dict[str, Any]:
    """What a citation gains: where it points in the store. The span without its PDF
    ``boxes``, which are measured only once an answer is stored (after a stream's citations
    went out): whole or streamed, a message is then the same; ``getAnswer`` has them."""
    span = resolved["span"]
    if isinstance(span, dict) and "boxes" in span:
        span = {key: value for key, value in span.items() if key != "boxes"}
    found = {"document_id": resolved["document_id"], "span": span, "verified": resolved["verified"]}
    if "support" in resolved:  # a streamed citation goes out before its text: none yet
        found["support"] = resolved["support"]
    return found


def enrich_message(message: dict[str, Any], segments: Sequence[dict[str, Any]]) -> None:
    """Add ``citegate`` to every citation of the upstream's message, from the stored answer's
    segments: one per text block, in order, with the same citations resolved."""
    texts = [block for block in message.get("content") or [] if block.get("type") == "text"]
    for block, segment in zip(texts, segments, strict=True):
        for citation, resolved in zip(
            block.get("citations") or [], segment["citations"], strict=True
        ):
            citation["citegate"] = citegate_of(resolved)


class CitationRelay:
    """A stream's events as relayed: each its own bytes, but those carrying citations, which
    gain ``citegate``. A citation whose support is checked waits for its block's text (its
    claim): its ``citations_delta`` is held and sent, enriched, just before the block's
    ``content_block_stop``. (A block that starts with citations starts without them here, and
    they follow as deltas: the SDKs gather a block's citations either way.)"""

    def __init__(self) -> None:
        self._held: list[tuple[int, dict[str, Any]]] = []  # (block index, citation as sent)

    def relayed(self, frame: Frame, made: Sequence[Event]) -> list[tuple[str, str]]:
        """The events to send for this upstream event: name and data."""
        resolved = [data["citation"] for name, data in made if name == "citation"]
        event = frame.event
        kind = event.get("type")
        if kind == "content_block_delta" and event["delta"].get("type") == "citations_delta":
            if not resolved:  # held until its block's text is whole
                self._held.append((event["index"], event["delta"]["citation"]))
                return []
            cited = {**event["delta"]["citation"], "citegate": citegate_of(resolved[0])}
            event = {**event, "delta": {**event["delta"], "citation": cited}}
            return [(frame.name, orjson.dumps(event).decode())]
        if kind == "content_block_start" and (event["content_block"].get("citations") or []):
            block = event["content_block"]
            if not resolved:
                self._held.extend((event["index"], c) for c in block["citations"])
                event = {**event, "content_block": {**block, "citations": []}}
                return [(frame.name, orjson.dumps(event).decode())]
            citations = [
                {**citation, "citegate": citegate_of(found)}
                for citation, found in zip(block["citations"], resolved, strict=True)
            ]
            event = {**event, "content_block": {**block, "citations": citations}}
            return [(frame.name, orjson.dumps(event).decode())]
        if kind == "content_block_stop" and resolved:
            held, self._held = self._held, []
            deltas = [
                (
                    "content_block_delta",
                    orjson.dumps(
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {
                                "type": "citations_delta",
                                "citation": {**citation, "citegate": citegate_of(found)},
                            },
                        }
                    ).decode(),
                )
                for (index, citation), found in zip(held, resolved, strict=True)
            ]
            return [*deltas, (frame.name, frame.data)]
        return [(frame.name, frame.data)]
