"""From bytes to a document text and its index. Pure and synchronous: run it in a worker thread.

A document's text is what the Messages API sees and cites: the exact UTF-8 text of a text
document (a BOM dropped, nothing else touched), the PDFium page texts of a PDF joined with
nothing between them, or the texts of content blocks joined. Chunks tile that text, so chunk
offsets are offsets into it and joining the chunks gives the text back.
"""

from __future__ import annotations

import codecs
import hashlib
import json
from dataclasses import dataclass, field

from app.documents.chunking import split_sentences
from app.documents.pdf import PdfError, extract_pdf_text
from app.errors import InvalidDocument, UnsupportedMediaType

PDF_MEDIA_TYPE = "application/pdf"
TEXT_MEDIA_TYPE = "text/plain"
CONTENT_MEDIA_TYPE = "application/json"

# Magic numbers of common binary formats, so that e.g. an image gets 415 rather than 422.
_BINARY_SIGNATURES = (
    b"\x89PNG",
    b"\xff\xd8\xff",
    b"GIF8",
    b"PK\x03\x04",
    b"\x1f\x8b",
    b"II*\x00",
    b"MM\x00*",
    b"RIFF",
    b"\xd0\xcf\x11\xe0",
    b"\x7fELF",
)
_UTF16_32_BOMS = (
    codecs.BOM_UTF32_LE,
    codecs.BOM_UTF32_BE,
    codecs.BOM_UTF16_LE,
    codecs.BOM_UTF16_BE,
)


@dataclass(frozen=True, slots=True)
class ChunkSpan:
    start: int
    end: int
    page_number: int | None = None
    block_index: int | None = None


@dataclass(slots=True)
class ParsedDocument:
    kind: str  # "text" | "pdf" | "content"
    media_type: str
    text: str
    chunks: list[ChunkSpan]
    page_count: int | None = None
    citable: bool = True
    warnings: list[str] = field(default_factory=list)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sniff_kind(data: bytes) -> str:
    """``"pdf"`` or ``"text"``, from the bytes alone; refuse anything else."""
    if not data:
        raise InvalidDocument("The document is empty.", code="empty_document")
    # PDF readers accept the header anywhere in the first 1024 bytes.
    if b"%PDF-" in data[:1024]:
        return "pdf"
    if data.startswith(_UTF16_32_BOMS):
        raise InvalidDocument(
            "Text must be UTF-8; this looks like UTF-16 or UTF-32.", code="text_not_utf8"
        )
    if data.startswith(_BINARY_SIGNATURES) or b"\x00" in data:
        raise UnsupportedMediaType("Only PDF and UTF-8 plain text documents are supported.")
    return "text"


def parse_document(data: bytes, kind: str) -> ParsedDocument:
    """Parse bytes already sniffed as ``kind`` (``"pdf"`` or ``"text"``)."""
    return parse_pdf(data) if kind == "pdf" else parse_text(data)


def parse_text(data: bytes) -> ParsedDocument:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidDocument(
            f"The text is not valid UTF-8 (byte {exc.start}).", code="text_not_utf8"
        ) from exc
    text = text.removeprefix("\ufeff")
    if not text.strip():
        raise InvalidDocument("The document has no text.", code="empty_document")
    chunks = [ChunkSpan(start, end) for start, end in split_sentences(text)]
    return ParsedDocument("text", TEXT_MEDIA_TYPE, text, chunks)


def parse_pdf(data: bytes) -> ParsedDocument:
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
    return ParsedDocument(
        "pdf", PDF_MEDIA_TYPE, "".join(extracted.pages), chunks, page_count, citable, warnings
    )


def content_bytes(blocks: list[str]) -> bytes:
    """The stored form of a content document: its blocks as compact JSON."""
    payload = [{"type": "text", "text": block} for block in blocks]
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def parse_content(blocks: list[str]) -> ParsedDocument:
    """One chunk per block; the text is the blocks joined, as the API joins cited blocks."""
    chunks: list[ChunkSpan] = []
    offset = 0
    for index, block in enumerate(blocks):
        chunks.append(ChunkSpan(offset, offset + len(block), block_index=index))
        offset += len(block)
    return ParsedDocument("content", CONTENT_MEDIA_TYPE, "".join(blocks), chunks)
