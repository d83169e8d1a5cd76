"""Which pages of a parsed PDF are read by OCR, and the document they make once read.

``pages_to_read`` picks the pages (none or garbage text layer; every page with ``force``),
``check_page_limit`` refuses too many before anything is stored, the OCR jobs
(``app.documents.ocr_jobs``) have them read from a temporary file (``pdf_file``) the workers
open, and ``with_pages_read`` puts their text in place of the pages' own: a pure function of the
parsed text layers and the pages read.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Protocol

from anyio import to_thread

from app.documents.kinds.base import ParsedDocument
from app.documents.kinds.pdf import PAGE_WARNINGS, PageRead, document_from_pages
from app.documents.ocr import OcrPage
from app.errors import ErrorCode, PayloadTooLarge


class JobQueue(Protocol):
    """Where a document stored with pages to read becomes a job (``app.documents.ocr_jobs``)."""

    def wake(self) -> None: ...


@dataclass(frozen=True, slots=True)
class OcrOptions:
    """The settings that decide what is read by OCR, and the jobs that read it."""

    mode: str  # "auto", "off", "force"
    languages: str
    max_pages: int
    jobs: JobQueue


def pages_to_read(parsed: ParsedDocument, mode: str) -> list[int]:
    """The 1-based pages OCR should read: none with ``off``, every page with ``force``, else
    those left without text (no text layer, or a garbage one)."""
    if parsed.pages is None or mode == "off":
        return []
    if mode == "force":
        return [page.number for page in parsed.pages]
    return [page.number for page in parsed.pages if page.text_source == "none"]


def check_page_limit(count: int, max_pages: int) -> None:
    if count > max_pages:
        raise PayloadTooLarge(
            f"The PDF has {count} pages to read by OCR; at most {max_pages} are read "
            "(CITEGATE_OCR_MAX_PAGES).",
            code=ErrorCode.OCR_PAGE_LIMIT_EXCEEDED,
        )


def page_texts(parsed: ParsedDocument) -> list[str]:
    """Each page's text in a parsed paged document."""
    assert parsed.pages is not None
    return [
        parsed.text[page.start_char : page.start_char + page.char_count] for page in parsed.pages
    ]


def page_read(ocr: OcrPage, warnings: Iterable[str] = ()) -> PageRead:
    """A page as OCR read it; a page on which OCR found nothing has no text."""
    kept = tuple(warnings)
    if not ocr.text.strip():
        return PageRead("", "none", (*kept, "ocr_found_no_text"), ocr.confidence)
    return PageRead(ocr.text, "ocr", kept, ocr.confidence, ocr.words)


def with_pages_read(parsed: ParsedDocument, read: Mapping[int, PageRead]) -> ParsedDocument:
    """The document with the pages in ``read`` (by number) as they were read."""
    assert parsed.pages is not None
    pages = []
    for facts, text in zip(parsed.pages, page_texts(parsed), strict=True):
        pages.append(
            read.get(facts.number)
            or PageRead(text, facts.text_source, facts.warnings, facts.ocr_confidence, facts.words)
        )
    document = document_from_pages(pages)
    # The warnings about pages are made again; the others (the fallback parser's) stay.
    document.warnings.extend(w for w in parsed.warnings if w not in PAGE_WARNINGS)
    return document


@asynccontextmanager
async def pdf_file() -> AsyncIterator[str]:
    """The path of a new empty temporary file, for the caller to write the PDF the OCR workers
    open; removed after."""
    handle, path = await to_thread.run_sync(tempfile.mkstemp, ".pdf", "citegate-ocr-")
    try:
        await to_thread.run_sync(os.close, handle)
        yield path
    finally:
        await to_thread.run_sync(_remove, path)


def _remove(path: str) -> None:
    with suppress(FileNotFoundError):
        os.unlink(path)
