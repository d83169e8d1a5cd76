"""Markdown (.md): stored and sent as its text, exactly, cited by character offsets. A
heading, a list item and a blank line each end a chunk, so no citation runs from a heading
into the paragraph under it; each chunk's locator is ``{"line": n}``, the line it starts on."""

from __future__ import annotations

import re
from typing import Any, ClassVar

from app.documents.chunking import split_sentences
from app.documents.kinds.base import (
    DEFAULT_PARSE_OPTIONS,
    ChunkSpan,
    ParsedDocument,
    ParseOptions,
)
from app.documents.kinds.converted import ConvertedTextKind, no_text
from app.documents.kinds.text import charset_media_type, decode_text

# A line that starts a chunk of its own: an ATX heading, a list item, a quote, a fence.
_STARTS_CHUNK = re.compile(r"[ \t]{0,3}(?:#{1,6}(?:[ \t]|$)|[-*+][ \t]|\d{1,9}[.)][ \t]|>|```|~~~)")
# A line after which the chunk ends: an ATX heading, or a setext heading's underline.
_ENDS_CHUNK = re.compile(r"[ \t]{0,3}(?:#{1,6}(?:[ \t]|$)|=+[ \t]*$|-+[ \t]*$)")


def _sections(text: str) -> list[tuple[int, int, int]]:
    """(start, end, first line) of each run of lines that belongs together; they tile the
    text (a blank line belongs to the run before it)."""
    sections: list[tuple[int, int, int]] = []
    start = offset = 0
    first_line = 1
    has_text = closed = False
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        if not line.strip():
            offset += len(line)
            closed = closed or has_text
            continue
        if has_text and (closed or _STARTS_CHUNK.match(line)):
            sections.append((start, offset, first_line))
            start, first_line = offset, number
        has_text, closed = True, False
        offset += len(line)
        if _ENDS_CHUNK.match(line):
            closed = True
    if start < len(text):
        sections.append((start, len(text), first_line))
    return sections


class MarkdownKind(ConvertedTextKind):
    name = "markdown"
    media_type = "text/markdown"
    hint_media_types = ("text/x-markdown",)
    extensions = (".md", ".markdown", ".mdown", ".mkd")
    trusts_declared_text = True
    content_schema: ClassVar[dict[str, Any]] = {"type": "string"}

    def parse(self, data: bytes, options: ParseOptions = DEFAULT_PARSE_OPTIONS) -> ParsedDocument:
        text, encoding = decode_text(data, options.charset)
        if not text.strip():
            raise no_text("Markdown document")
        chunks: list[ChunkSpan] = []
        for start, end, line in _sections(text):
            section = text[start:end]
            position = 0
            for s, e in split_sentences(section):
                line += section.count("\n", position, s)  # the line this chunk starts on
                position = s
                chunks.append(ChunkSpan(start + s, start + e, locator={"line": line}))
        return ParsedDocument(
            text, chunks, media_type=charset_media_type(self.media_type, encoding)
        )
