"""Content blocks: the caller's own chunking. Stored as the blocks' JSON; one chunk per block;
the text is the blocks joined, as the upstream joins the blocks it cites."""

from __future__ import annotations

from typing import Any, ClassVar

import orjson

from app.documents.kinds.base import (
    DEFAULT_PARSE_OPTIONS,
    ChunkSpan,
    ParsedDocument,
    ParseOptions,
    SentAsBlocks,
)


class ContentKind(SentAsBlocks):
    name = "content"
    media_type = "application/json"
    content_schema: ClassVar[dict[str, Any]] = {
        "type": "array",
        "items": {"$ref": "#/components/schemas/ContentBlock"},
    }

    @staticmethod
    def stored_form(blocks: list[str]) -> bytes:
        """The bytes a content document is stored as: its blocks as compact JSON."""
        return orjson.dumps([{"type": "text", "text": block} for block in blocks])

    def parse(self, data: bytes, options: ParseOptions = DEFAULT_PARSE_OPTIONS) -> ParsedDocument:
        # Only ever the bytes ``stored_form`` made: clients send blocks, never this form.
        blocks = [block["text"] for block in orjson.loads(data)]
        chunks: list[ChunkSpan] = []
        offset = 0
        for index, block in enumerate(blocks):
            chunks.append(ChunkSpan(offset, offset + len(block), block_index=index))
            offset += len(block)
        return ParsedDocument("".join(blocks), chunks)
