"""PDF text extraction: pypdfium2 first, pypdf when PDFium refuses a file that is not encrypted.

Page text is kept exactly as PDFium gives it (``\\r\\n`` line breaks, U+FFFE at hyphenation
breaks): the Messages API's own extraction looks the same, so its ``cited_text`` is usually found
character for character. Both libraries' failures become one error type, ``PdfError``.
"""

from __future__ import annotations

import io
import logging
import threading
from dataclasses import dataclass

import pypdf
import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from app.errors import ErrorCode

log = logging.getLogger(__name__)

# A page whose text is shorter than this and that an image covers almost entirely is a scan:
# the few characters are a label or an artefact under the image, not a text layer.
_SCAN_MAX_CHARS = 32
_SCAN_MIN_IMAGE_COVERAGE = 0.8

# PDFium is not thread-safe, not even for different documents: only one call at a time in the
# process, or it crashes (pypdfium2's documentation; seen here as a segmentation fault when four
# uploads were parsed at once). Extraction runs in worker threads, so it takes this lock.
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
