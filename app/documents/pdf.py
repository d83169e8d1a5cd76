"""PDF text extraction: pypdfium2 first, pypdf when PDFium refuses a file that is not encrypted.

Page text is kept exactly as PDFium gives it (``\\r\\n`` line breaks, U+FFFE at hyphenation
breaks): the Messages API's own extraction looks the same, so its ``cited_text`` is usually found
character for character. Both libraries' failures become one error type, ``PdfError``.
"""

from __future__ import annotations

import hashlib
import io
import logging
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from app.errors import ErrorCode

log = logging.getLogger(__name__)

# A page whose text is shorter than this and that an image covers almost entirely is a scan:
# the few characters are a label or an artefact under the image, not a text layer.
_SCAN_MAX_CHARS = 32
_SCAN_MIN_IMAGE_COVERAGE = 0.8

# PDFium is not thread-safe, not even for different documents: only one call at a time in the
# process, or it corrupts memory and crashes (pypdfium2's documentation says so, and
# tests/unit/test_parsing.py extracts in four threads at once). Extraction runs in worker
# threads, so it takes this lock.
PDFIUM_LOCK = threading.Lock()


class PdfError(Exception):
    """The PDF cannot be read. ``code`` says why: ``pdf_encrypted`` or ``pdf_invalid``."""

    def __init__(self, code: ErrorCode, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


@dataclass(frozen=True, slots=True)
class PdfText:
    """The text of each page (index 0 is page 1) and which pages carry no text layer."""

    pages: list[str]
    pages_without_text: list[int]  # 1-based page numbers
    parser: str


def extract_pdf_text(data: bytes) -> PdfText:
    """Extract every page's text. Raises ``PdfError`` for encrypted or unreadable files.

    Safe to call from several threads at once: PDFium work takes ``PDFIUM_LOCK`` in turn.
    """
    with PDFIUM_LOCK:
        extracted = _extract_with_pdfium(data)
    return extracted if extracted is not None else _extract_with_pypdf(data)


def _extract_with_pdfium(data: bytes) -> PdfText | None:
    """None when PDFium refuses a file that is not encrypted. Call it holding ``PDFIUM_LOCK``."""
    try:
        document = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        if exc.err_code == pdfium_c.FPDF_ERR_PASSWORD:
            raise PdfError(ErrorCode.PDF_ENCRYPTED, "The PDF is encrypted.") from exc
        log.info("PDFium refused the file (%s); trying pypdf", exc)
        return None
    try:
        # The upstream refuses encrypted PDFs, even those that open without a password.
        if pdfium_c.FPDF_GetSecurityHandlerRevision(document.raw) != -1:
            raise PdfError(ErrorCode.PDF_ENCRYPTED, "The PDF is encrypted.")
        pages: list[str] = []
        without_text: list[int] = []
        for number, page in enumerate(document, start=1):
            textpage = page.get_textpage()
            text = textpage.get_text_range()
            textpage.close()
            if _is_textless(text, page):
                without_text.append(number)
            page.close()
            pages.append(storable_text(text))
        return PdfText(pages, without_text, "pdfium")
    finally:
        document.close()  # and its pages, if an error left any open: under the lock


def _is_textless(text: str, page: pdfium.PdfPage) -> bool:
    visible = len("".join(text.split()))
    if visible == 0:
        return True
    if visible >= _SCAN_MAX_CHARS:
        return False
    width, height = page.get_size()
    area = width * height or 1.0
    for image in page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE], max_depth=3):
        left, bottom, right, top = image.get_bounds()
        if (right - left) * (top - bottom) / area >= _SCAN_MIN_IMAGE_COVERAGE:
            return True
    return False


def _extract_with_pypdf(data: bytes) -> PdfText:
    import pypdf  # a fallback, imported when first needed: see LAZY_LIBRARIES

    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise PdfError(ErrorCode.PDF_ENCRYPTED, "The PDF is encrypted.")
        pages = [storable_text(page.extract_text() or "") for page in reader.pages]
    except PdfError:
        raise
    except Exception as exc:  # pypdf raises many types on damaged files
        raise PdfError(
            ErrorCode.PDF_INVALID, "The PDF is damaged or truncated and cannot be read."
        ) from exc
    if not pages:
        raise PdfError(ErrorCode.PDF_INVALID, "The PDF has no pages.")
    without_text = [number for number, text in enumerate(pages, 1) if not text.strip()]
    return PdfText(pages, without_text, "pypdf")


def storable_text(text: str) -> str:
    # PostgreSQL text cannot hold NUL; it carries no meaning in extracted text.
    return text.replace("\x00", "\ufffd")


def split_pdf(data: bytes, windows: Sequence[tuple[int, int]]) -> list[bytes]:
    """A PDF of each window's pages (``(first, last)``, 1-based, inclusive), made by PDFium's
    page import from ``data``: the pages' content and resources are copied, nothing rendered,
    so each page's text extracts as it does from the original. A PDF that only pypdf reads is
    split by pypdf.

    Safe to call from several threads at once: PDFium work takes ``PDFIUM_LOCK`` in turn.
    """
    with PDFIUM_LOCK:
        parts = _split_with_pdfium(data, windows)
    return parts if parts is not None else _split_with_pypdf(data, windows)


def _split_with_pdfium(data: bytes, windows: Sequence[tuple[int, int]]) -> list[bytes] | None:
    """None when PDFium refuses the file. Call it holding ``PDFIUM_LOCK``."""
    try:
        source = pdfium.PdfDocument(data)
    except pdfium.PdfiumError:
        return None
    parts = []
    try:
        for first, last in windows:
            window = pdfium.PdfDocument.new()
            try:
                window.import_pages(source, list(range(first - 1, last)))
                buffer = io.BytesIO()
                window.save(buffer)
            finally:
                window.close()
            parts.append(_stable_id(buffer.getvalue()))
    finally:
        source.close()
    return parts


def _split_with_pypdf(data: bytes, windows: Sequence[tuple[int, int]]) -> list[bytes]:
    import pypdf  # a fallback, imported when first needed: see LAZY_LIBRARIES

    reader = pypdf.PdfReader(io.BytesIO(data))
    parts = []
    for first, last in windows:
        writer = pypdf.PdfWriter()
        for number in range(first - 1, last):
            writer.add_page(reader.pages[number])
        buffer = io.BytesIO()
        writer.write(buffer)
        parts.append(buffer.getvalue())
    return parts


_TRAILER_ID = re.compile(rb"/ID\s*\[\s*<([0-9A-Fa-f]{1,64})>\s*<([0-9A-Fa-f]{1,64})>")


def _stable_id(data: bytes) -> bytes:
    """The PDF with its trailer's file identifier made from its content (PDFium writes a random
    one): the same pages make the same bytes in every process, so the upstream's prompt cache
    knows a window made again. The identifier keeps its length, so no offset moves."""
    trailer = data.rfind(b"trailer")
    found = _TRAILER_ID.search(data, trailer) if trailer != -1 else None
    if found is None:
        return data
    digest = hashlib.sha256(memoryview(data)[:trailer]).hexdigest().upper().encode()
    first, second = found.span(1), found.span(2)
    return b"".join(
        (
            data[: first[0]],
            digest[: first[1] - first[0]],
            data[first[1] : second[0]],
            digest[: second[1] - second[0]],
            data[second[1] :],
        )
    )
