"""PDF: the text PDFium extracts per page, joined; sent upstream as the original bytes and
cited by pages, inside which the cited text is located."""

from __future__ import annotations

import base64
from typing import Any, ClassVar

from app.documents.chunking import split_sentences
from app.documents.index import DocumentIndex, locate
from app.documents.kinds.base import (
    DEFAULT_PARSE_OPTIONS,
    ChunkSpan,
    DocumentKind,
    ParsedDocument,
    ParseOptions,
    StoredParts,
)
from app.documents.pdf import PdfError, extract_pdf_text
from app.errors import ErrorCode, InvalidDocument


class PdfKind(DocumentKind):
    name = "pdf"
    media_type = "application/pdf"
    content_schema: ClassVar[dict[str, Any]] = {"type": "string", "format": "binary"}
    citation_type = "page_location"
    # PDF readers accept the header anywhere in the first 1024 bytes.
    signature = b"%PDF-"
    signature_within = 1024
    mismatch = ("The data is not a PDF (no %PDF- header).", ErrorCode.PDF_INVALID)
    sends_original = True
    has_page_images = True
    serial = True  # PDFium does one call at a time in the process (app.documents.pdf)

    # The upstream reads each page as its text and as an image.
    IMAGE_TOKENS_PER_PAGE: ClassVar[int] = 1_500

    def request_bytes(self, size_bytes: int, char_count: int) -> int:
        return 4 * -(-size_bytes // 3)  # sent as base64

    def estimated_tokens(self, char_count: int, page_count: int | None) -> int:
        return char_count // 4 + (page_count or 0) * self.IMAGE_TOKENS_PER_PAGE

    def parse(self, data: bytes, options: ParseOptions = DEFAULT_PARSE_OPTIONS) -> ParsedDocument:
        try:
            extracted = extract_pdf_text(data)
        except PdfError as exc:
            raise InvalidDocument(exc.detail, code=exc.code) from exc
        chunks: list[ChunkSpan] = []
        offset = 0
        for number, page_text in enumerate(extracted.pages, start=1):
            # Chunks never span two pages: each page is split on its own.
            chunks.extend(
                ChunkSpan(offset + start, offset + end, page_number=number)
                for start, end in split_sentences(page_text)
            )
            offset += len(page_text)
        page_count = len(extracted.pages)
        warnings = []
        citable = len(extracted.pages_without_text) < page_count
        if not citable:
            warnings.append("pdf_has_no_text_layer")
        elif extracted.pages_without_text:
            warnings.append("pdf_pages_without_text")
        if extracted.parser != "pdfium":
            warnings.append("pdf_text_from_fallback_parser")
        return ParsedDocument("".join(extracted.pages), chunks, page_count, citable, warnings)

    def upstream_source(self, parts: StoredParts) -> dict[str, Any]:
        assert parts.data is not None, "a PDF is sent as its original bytes"
        data = base64.b64encode(parts.data).decode("ascii")
        return {"type": "base64", "media_type": "application/pdf", "data": data}

    def locate(self, citation: dict[str, Any], index: DocumentIndex) -> tuple[int, int] | None:
        first, end = citation.get("start_page_number"), citation.get("end_page_number")
        if not isinstance(first, int) or not isinstance(end, int):
            return None
        pages = index.page_range(first, end - 1)
        if pages is None:
            return None
        return locate(index.text, str(citation.get("cited_text") or ""), pages, pages[0])
