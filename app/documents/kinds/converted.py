"""What converted kinds share: a document made of blocks (paragraphs, rows, slides), each
with its locator in the original.

Two ways to send one upstream, chosen per kind:

- as text (``ConvertedTextKind``: Word, HTML, Markdown): prose, cited sentence by sentence by
  character offsets into the stored text, as plain text is;
- as content blocks (``BlocksKind``: spreadsheets, slides): records whose unit is the block,
  cited by block index, which is the row or the slide itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from app.documents.chunking import split_sentences
from app.documents.kinds.base import ChunkSpan, ParsedDocument, SentAsBlocks, SentAsText
from app.errors import ErrorCode, InvalidDocument

Block = tuple[str, dict[str, Any]]  # a block's text and its locator
_BLOCK_SEPARATOR = "\n\n"


def no_text(what: str) -> InvalidDocument:
    return InvalidDocument(f"The {what} has no text.", code=ErrorCode.EMPTY_DOCUMENT)


def text_document(blocks: Iterable[Block], what: str) -> ParsedDocument:
    """Blocks as one text, a blank line after each; each block's sentences are its chunks, so
    no chunk spans two blocks and every chunk knows its block's locator."""
    parts: list[str] = []
    chunks: list[ChunkSpan] = []
    offset = 0
    for text, locator in blocks:
        block = text.strip()
        if not block:
            continue
        block += _BLOCK_SEPARATOR
        spans = split_sentences(block)
        for start, end in spans:
            chunks.append(ChunkSpan(offset + start, offset + end, locator=locator))
        parts.append(block)
        offset += len(block)
    if not chunks:
        raise no_text(what)
    return ParsedDocument("".join(parts), chunks)


def blocks_document(blocks: Iterable[Block], what: str) -> ParsedDocument:
    """Blocks as content blocks: one chunk each, the text their concatenation (as the upstream
    joins the blocks it cites)."""
    parts: list[str] = []
    chunks: list[ChunkSpan] = []
    offset = 0
    for text, locator in blocks:
        if not text.strip():
            continue  # the Messages API refuses an empty text block
        end = offset + len(text)
        chunks.append(ChunkSpan(offset, end, block_index=len(chunks), locator=locator))
        parts.append(text)
        offset += len(text)
    if not chunks:
        raise no_text(what)
    return ParsedDocument("".join(parts), chunks)


class ConvertedTextKind(SentAsText):
    """A kind converted to text and sent as it: cited by character offsets."""


class BlocksKind(SentAsBlocks):
    """A kind converted to blocks and sent as content blocks: cited by block index."""
