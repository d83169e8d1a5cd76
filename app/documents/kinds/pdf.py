"""PDF: the text PDFium extracts per page, joined; sent upstream as the original bytes and
cited by pages, inside which the cited text is located. A PDF too long for one document block
is sent as consecutive page windows, sub-PDFs made from the stored one, whose citations
are mapped back to the original's pages."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from app.documents.chunking import split_sentences
from app.documents.index import DocumentIndex, locate
from app.documents.kinds.base import (
    DEFAULT_PARSE_OPTIONS,
    ChunkSpan,
    DocumentKind,
    PageFacts,
    PageWindow,
    ParsedDocument,
    ParseOptions,
    SentPart,
    StoredParts,
)
from app.documents.pdf import PdfError, extract_pdf_text, split_pdf
from app.documents.text_layer import Verdict
from app.errors import ErrorCode, InvalidDocument


class PdfKind(DocumentKind):
    name = "pdf"
    media_type = "application/pdf"
    content_schema: ClassVar[dict[str, Any]] = {"type": "string", "format": "binary"}
    citation_type = "page_location"
    # A PDF with pages read by OCR is sent as content blocks (its chunks): the upstream cannot
    # cite a page it only sees as a picture, so its text goes as text it can cite.
    also_cited_by: ClassVar[frozenset[str]] = frozenset({"content_block_location"})
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

    def parse(
        self, data: bytes | Path, options: ParseOptions = DEFAULT_PARSE_OPTIONS
    ) -> ParsedDocument:
        """The pages' text layers; a page whose layer is garbage is left without text. ``data``
        may be the path of a file holding the PDF: its bytes are then not all in memory."""
        try:
            extracted = extract_pdf_text(data)
        except PdfError as exc:
            raise InvalidDocument(exc.detail, code=exc.code) from exc
        pages = []
        for text, verdict in zip(extracted.pages, extracted.verdicts, strict=True):
            if verdict.verdict is Verdict.TEXT:
                pages.append(PageRead(text, "text_layer"))
            elif verdict.verdict is Verdict.GARBAGE:
                pages.append(PageRead("", "none", ("text_layer_garbage",)))
            else:
                pages.append(PageRead("", "none"))
        parsed = document_from_pages(pages)
        if extracted.parser != "pdfium":
            parsed.warnings.append("pdf_text_from_fallback_parser")
        return parsed

    def upstream_source(self, parts: StoredParts) -> dict[str, Any]:
        assert parts.data is not None, "a PDF is sent as its original bytes"
        return _base64_source(parts.data)

    def page_windows(
        self, page_count: int | None, size_bytes: int, max_pages: int, max_bytes: int
    ) -> list[PageWindow] | None:
        pages = page_count or 0
        if pages <= max_pages and self.request_bytes(size_bytes, 0) <= max_bytes:
            return None
        # Over the byte limit alone, the pages are made again all the same: a sub-PDF holds
        # only what its pages use (no unused objects, no earlier revisions), often much less.
        return [
            (first, min(first + max_pages - 1, pages)) for first in range(1, pages + 1, max_pages)
        ]

    def sent_parts(
        self, parts: StoredParts, windows: Sequence[PageWindow] | None
    ) -> list[SentPart]:
        if parts.read_by_ocr:
            blocks = [{"type": "text", "text": text} for text in parts.chunk_texts]
            return [SentPart({"type": "content", "content": blocks}, None, len(parts.text) * 4)]
        if windows is None:
            return [SentPart(self.upstream_source(parts))]
        assert parts.data is not None, "windows are made from the original bytes"
        return [
            SentPart(_base64_source(data), window, len(data))
            for window, data in zip(windows, split_pdf(parts.data, windows), strict=True)
        ]

    def from_window(self, citation: dict[str, Any], window: PageWindow) -> dict[str, Any] | None:
        first, end = citation.get("start_page_number"), citation.get("end_page_number")
        if not isinstance(first, int) or not isinstance(end, int):
            return citation  # unlocatable either way
        offset, last = window[0] - 1, window[1]
        if not 1 <= first < end <= last - offset + 1:
            return None
        return {**citation, "start_page_number": first + offset, "end_page_number": end + offset}

    def locate(self, citation: dict[str, Any], index: DocumentIndex) -> tuple[int, int] | None:
        if citation.get("type") == "content_block_location":  # sent as its chunks
            first_block, end_block = (
                citation.get("start_block_index"),
                citation.get("end_block_index"),
            )
            if not isinstance(first_block, int) or not isinstance(end_block, int):
                return None
            return index.block_range(first_block, end_block)
        first, end = citation.get("start_page_number"), citation.get("end_page_number")
        if not isinstance(first, int) or not isinstance(end, int):
            return None
        pages = index.page_range(first, end - 1)
        if pages is None:
            return None
        return locate(index.text, str(citation.get("cited_text") or ""), pages, pages[0])


# The document warnings ``document_from_pages`` makes from its pages.
PAGE_WARNINGS = frozenset(
    (
        "pdf_has_no_text_layer",
        "pdf_pages_without_text",
        "pdf_text_layer_garbage",
        "pdf_pages_read_by_ocr",
    )
)


@dataclass(frozen=True, slots=True)
class PageRead:
    """A page's text as it was read, and how (see ``PageFacts``)."""

    text: str
    text_source: str
    warnings: tuple[str, ...] = ()
    ocr_confidence: float | None = None
    words: tuple[tuple[int, int, float, float, float, float], ...] | None = None


def document_from_pages(pages: Sequence[PageRead]) -> ParsedDocument:
    """The document of these pages: their texts joined, each cut into sentence chunks (a chunk
    never spans two pages), the facts of each page, and the warnings the whole deserves."""
    chunks: list[ChunkSpan] = []
    facts: list[PageFacts] = []
    offset = 0
    for number, page in enumerate(pages, start=1):
        chunks.extend(
            ChunkSpan(offset + start, offset + end, page_number=number)
            for start, end in split_sentences(page.text)
        )
        facts.append(
            PageFacts(
                number,
                offset,
                len(page.text),
                page.text_source,
                page.warnings,
                page.ocr_confidence,
                page.words,
            )
        )
        offset += len(page.text)
    without_text = sum(1 for page in pages if page.text_source == "none")
    citable = without_text < len(pages)
    warnings = []
    if not citable:
        warnings.append("pdf_has_no_text_layer")
    elif without_text:
        warnings.append("pdf_pages_without_text")
    if any("text_layer_garbage" in page.warnings for page in pages):
        warnings.append("pdf_text_layer_garbage")
    if any(page.text_source == "ocr" for page in pages):
        warnings.append("pdf_pages_read_by_ocr")
    text = "".join(page.text for page in pages)
    return ParsedDocument(text, chunks, len(pages), citable, warnings, pages=facts)


def _base64_source(data: bytes) -> dict[str, Any]:
    encoded = base64.b64encode(data).decode("ascii")
    return {"type": "base64", "media_type": "application/pdf", "data": encoded}
