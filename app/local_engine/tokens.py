"""The token estimate, and the request as a sequence of prompt units for cache accounting.

Estimate: ``ceil(characters / 4)`` of each piece of text, summed; no overhead per message or
request. A text block counts its text; a document its title, its context and its text (a PDF
page by page, a content document block by block); a search result its source, its title and each
text block; a tool result each block of its content the same way (its string content as text);
an image a flat 1,600 (the upstream's cost of a ~1.15-megapixel image); a tool definition or any
other block its canonical JSON. The answer counts the same way: ``ceil(characters / 4)`` of all
its text.

Each unit also carries its canonical bytes (sorted-key JSON of the block without
``cache_control``, with its role and turn number) so that the prompt cache can recognise a prefix.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from app.local_engine.documents import RequestDocument
from app.local_engine.request_validation import ParsedRequest, block_cache_controls
from app.local_engine.wire import (
    Block,
    CacheControlParam,
    DocumentBlockParam,
    ImageBlockParam,
    SearchResultBlockParam,
    TextBlockParam,
    ToolResultBlockParam,
    UncitedTextBlockParam,
)

CHARS_PER_TOKEN = 4
IMAGE_TOKENS = 1_600


def estimate_tokens(text: str) -> int:
    """``ceil(len(text) / 4)``: 0 for ``""``, 1 for one to four characters."""
    return -(-len(text) // CHARS_PER_TOKEN)


@dataclass(frozen=True, slots=True)
class PromptUnit:
    """One block of the prompt: its canonical bytes, its tokens and its breakpoint, if any."""

    canonical: bytes
    tokens: int
    cache_control: CacheControlParam | None


def canonical_bytes(where: str, role: str, block: BaseModel | dict[str, Any]) -> bytes:
    """The bytes that identify a block at its place in the prompt (``cache_control`` left out,
    since moving a breakpoint does not change the prompt)."""
    data = (
        block.model_dump(mode="json", exclude_none=True) if isinstance(block, BaseModel) else block
    )
    payload = {"at": where, "role": role, "block": _without_cache_control(data)}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")


def _without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            key: _without_cache_control(item)
            for key, item in value.items()
            if key != "cache_control"
        }
    if isinstance(value, list):
        return [_without_cache_control(item) for item in value]
    return value


def document_tokens(block: DocumentBlockParam, document: RequestDocument) -> int:
    """The estimate for a document: title, context, and each part of its text."""
    return (
        estimate_tokens(block.title or "")
        + estimate_tokens(block.context or "")
        + sum(estimate_tokens(part) for part in document.text_parts)
    )


def search_result_tokens(block: SearchResultBlockParam) -> int:
    """The estimate for a search result: source, title, and each text block."""
    return (
        estimate_tokens(block.source)
        + estimate_tokens(block.title)
        + sum(estimate_tokens(item.text) for item in block.content)
    )


def _block_tokens(block: BaseModel, canonical: bytes, document: RequestDocument | None) -> int:
    if isinstance(block, TextBlockParam | UncitedTextBlockParam):
        return estimate_tokens(block.text)
    if isinstance(block, DocumentBlockParam) and document is not None:
        return document_tokens(block, document)
    if isinstance(block, SearchResultBlockParam):
        return search_result_tokens(block)
    if isinstance(block, ToolResultBlockParam):
        return sum(
            _block_tokens(item, canonical_bytes("", "", item), None) for item in block.content
        )
    if isinstance(block, ImageBlockParam):
        return IMAGE_TOKENS
    return -(-len(canonical) // CHARS_PER_TOKEN)


def _breakpoint(block: Block) -> CacheControlParam | None:
    # A breakpoint inside a block (on a content source's or a search result's last text block,
    # or on a search result inside a tool result) caches the prompt up to that block; the unit is
    # the whole block, so the block's own breakpoint, else the last one inside it, marks it.
    if block.cache_control is not None:
        return block.cache_control
    controls = list(block_cache_controls(block))
    return controls[-1] if controls else None


def prompt_units(request: ParsedRequest, documents: Sequence[RequestDocument]) -> list[PromptUnit]:
    """The request as the upstream reads it: tools, system, then every block of every turn.

    ``documents`` are the request's documents chunked, in request order. The top-level
    ``cache_control`` (automatic caching) becomes a breakpoint on the last block.
    """
    units: list[PromptUnit] = []
    for number, tool in enumerate(request.tools):
        canonical = canonical_bytes(f"tools.{number}", "tools", tool)
        units.append(
            PromptUnit(canonical, _block_tokens(tool, canonical, None), tool.cache_control)
        )
    for number, system_block in enumerate(request.system):
        canonical = canonical_bytes(f"system.{number}", "system", system_block)
        units.append(
            PromptUnit(canonical, estimate_tokens(system_block.text), system_block.cache_control)
        )
    # Search results are counted from their blocks; the chunked documents give the PDFs' text.
    remaining = iter(document for document in documents if document.kind != "search_result")
    for turn_number, turn in enumerate(request.turns):
        for block in turn.blocks:
            document = next(remaining) if isinstance(block, DocumentBlockParam) else None
            canonical = canonical_bytes(f"messages.{turn_number}", turn.role, block)
            tokens = _block_tokens(block, canonical, document)
            units.append(PromptUnit(canonical, tokens, _breakpoint(block)))
    automatic = request.automatic_cache_control
    if automatic is not None and units:
        last = units[-1]
        units[-1] = PromptUnit(last.canonical, last.tokens, last.cache_control or automatic)
    return units


def input_tokens(units: Sequence[PromptUnit]) -> int:
    """All the input tokens of a request, cached or not (what ``count_tokens`` answers)."""
    return sum(unit.tokens for unit in units)
