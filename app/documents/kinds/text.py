"""Plain text: stored exactly as sent (a UTF-8 BOM dropped), cited by character offsets."""

from __future__ import annotations

import codecs
from typing import Any, ClassVar

from app.documents.chunking import split_sentences
from app.documents.index import DocumentIndex, resolve_char_offsets
from app.documents.kinds.base import ChunkSpan, DocumentKind, ParsedDocument, StoredParts
from app.errors import ErrorCode, InvalidDocument

UTF16_32_BOMS = (
    codecs.BOM_UTF32_LE,
    codecs.BOM_UTF32_BE,
    codecs.BOM_UTF16_LE,
    codecs.BOM_UTF16_BE,
)


class TextKind(DocumentKind):
    name = "text"
    media_type = "text/plain"
    content_schema: ClassVar[dict[str, Any]] = {"type": "string"}
    citation_type = "char_location"

    def parse(self, data: bytes) -> ParsedDocument:
        if data.startswith(UTF16_32_BOMS):
            raise InvalidDocument(
                "Text must be UTF-8; this looks like UTF-16 or UTF-32.",
                code=ErrorCode.TEXT_NOT_UTF8,
            )
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidDocument(
                f"The text is not valid UTF-8 (byte {exc.start}).", code=ErrorCode.TEXT_NOT_UTF8
            ) from exc
        text = text.removeprefix("\ufeff")
        if not text.strip():
            raise InvalidDocument("The document has no text.", code=ErrorCode.EMPTY_DOCUMENT)
        return ParsedDocument(text, [ChunkSpan(start, end) for start, end in split_sentences(text)])

    def upstream_source(self, parts: StoredParts) -> dict[str, Any]:
        # The exact stored text, so the upstream's character offsets are offsets into ours.
        return {"type": "text", "media_type": "text/plain", "data": parts.text}

    def locate(self, citation: dict[str, Any], index: DocumentIndex) -> tuple[int, int] | None:
        return resolve_char_offsets(citation, index)
