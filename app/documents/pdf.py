"""PDF text extraction: pypdfium2 first, pypdf when PDFium refuses a file that is not encrypted.

Page text is kept as PDFium gives it (``\\r\\n`` line breaks included): the Messages API's own
extraction looks the same, so its ``cited_text`` is usually found character for character. Two
things are changed, both by ``page_text``: hyphenation marks inside words (PDFium's U+FFFE at a
line-end hyphen, soft hyphens) are left out, so the word is whole; and the values of the page's
filled form fields follow its text, one a line. Both libraries' failures become one error type,
``PdfError``.
"""

from __future__ import annotations

import ctypes
import hashlib
import io
import logging
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from app.documents.text_layer import LayerVerdict, Verdict, text_layer_verdict
from app.errors import ErrorCode

log = logging.getLogger(__name__)

# A page whose text is shorter than this and that an image covers almost entirely is a scan:
# the few characters are a label or an artefact under the image, not a text layer.
_SCAN_MAX_CHARS = 32
_SCAN_MIN_IMAGE_COVERAGE = 0.8

# PDFium keeps what it parsed of a document's pages (a scan's images among it) until the
# document is closed, not the page: a long scan's parse grew page by page to nearly its own
# size again. The document is closed and opened again (its cross-reference table read again) every
# PAGES_OPEN pages (docs/PERFORMANCE.md, "The OCR job's memory").
PAGES_OPEN = 10

# PDFium is not thread-safe, not even for different documents: only one call at a time in the
# process, or it corrupts memory and crashes (pypdfium2's documentation says so, and
# tests/unit/test_parsing.py extracts in four threads at once). Extraction runs in worker
# threads, so it takes this lock.
PDFIUM_LOCK = threading.Lock()


# Marks inside a word that are no part of it: PDFium's end-of-line hyphen (its text shows the
# character it holds as U+0002 as U+FFFE) and the soft hyphen.
HYPHENATION_MARKS = frozenset("\ufffe\u00ad")
# Form fields whose value is text a reader sees: text fields, combo boxes, list boxes.
_TEXT_FIELD_TYPES = frozenset(
    (
        pdfium_c.FPDF_FORMFIELD_TEXTFIELD,
        pdfium_c.FPDF_FORMFIELD_COMBOBOX,
        pdfium_c.FPDF_FORMFIELD_LISTBOX,
    )
)
# A rectangle in PDF user space: left, bottom, right, top (points, y upwards).
Rect = tuple[float, float, float, float]


@dataclass(frozen=True, slots=True)
class FormValue:
    """A filled form field's value on a page and the rectangle of its widget."""

    value: str
    rect: Rect


@dataclass(frozen=True, slots=True)
class PageText:
    """A page's stored text and where its characters came from.

    ``text`` is the text layer without hyphenation marks, then each form value after a line
    break. ``layer_indices[i]`` is the index in PDFium's text of the layer's character ``i``
    (None when nothing was left out: the same index); ``field_starts`` are the offsets in
    ``text`` where each of ``fields`` begins.
    """

    text: str
    layer_length: int
    layer_indices: list[int] | None
    fields: list[FormValue] = field(default_factory=list)
    field_starts: list[int] = field(default_factory=list)


def without_hyphenation(raw: str) -> tuple[str, list[int] | None]:
    """``raw`` without hyphenation marks, and the index in ``raw`` of each character kept (None
    when there was none to leave out)."""
    if not any(mark in raw for mark in HYPHENATION_MARKS):
        return raw, None
    kept = [index for index, char in enumerate(raw) if char not in HYPHENATION_MARKS]
    return "".join(raw[index] for index in kept), kept


def page_text(raw: str, fields: Sequence[FormValue] = ()) -> PageText:
    """The stored text of a page whose PDFium text is ``raw`` and whose filled form fields are
    ``fields``."""
    layer, indices = without_hyphenation(storable_text(raw))
    parts, starts, length = [layer], [], len(layer)
    for form_value in fields:
        separator = "\r\n" if length else ""
        starts.append(length + len(separator))
        value = storable_text(form_value.value)
        parts.append(separator + value)
        length += len(separator) + len(value)
    return PageText("".join(parts), len(layer), indices, list(fields), starts)


def init_forms(document: pdfium.PdfDocument) -> None:
    """Make the document's form fields readable (``form_values``). Call it before any page is
    loaded; a document with no form costs nothing."""
    if pdfium_c.FPDF_GetFormType(document.raw) != pdfium_c.FORMTYPE_NONE:
        document.init_forms()


def form_values(document: pdfium.PdfDocument, page: pdfium.PdfPage) -> list[FormValue]:
    """The page's filled text, combo and list fields, top to bottom then left to right."""
    formenv = document.formenv
    if formenv is None:
        return []
    found = []
    for index in range(pdfium_c.FPDFPage_GetAnnotCount(page.raw)):
        annot = pdfium_c.FPDFPage_GetAnnot(page.raw, index)
        if not annot:
            continue
        try:
            if pdfium_c.FPDFAnnot_GetFormFieldType(formenv.raw, annot) not in _TEXT_FIELD_TYPES:
                continue
            size = pdfium_c.FPDFAnnot_GetFormFieldValue(formenv.raw, annot, None, 0)
            if size <= 2:
                continue
            buffer = (ctypes.c_ushort * (size // 2))()
            pdfium_c.FPDFAnnot_GetFormFieldValue(formenv.raw, annot, buffer, size)
            value = bytes(buffer)[: size - 2].decode("utf-16-le", "replace").strip()
            rect = pdfium_c.FS_RECTF()
            pdfium_c.FPDFAnnot_GetRect(annot, rect)
        finally:
            pdfium_c.FPDFPage_CloseAnnot(annot)
        if value:
            found.append(FormValue(value, (rect.left, rect.bottom, rect.right, rect.top)))
    found.sort(key=lambda item: (-round(item.rect[3]), item.rect[0]))
    return found


def read_page(document: pdfium.PdfDocument, page: pdfium.PdfPage) -> tuple[str, PageText]:
    """PDFium's text of the page and the page's stored text (``init_forms`` done first)."""
    textpage = page.get_textpage()
    try:
        raw = textpage.get_text_range()
    finally:
        textpage.close()
    return raw, page_text(raw, form_values(document, page))


class PdfError(Exception):
    """The PDF cannot be read. ``code`` says why: ``pdf_encrypted`` or ``pdf_invalid``."""

    def __init__(self, code: ErrorCode, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


@dataclass(frozen=True, slots=True)
class PdfText:
    """The text of each page (index 0 is page 1) and the verdict on each page's text layer."""

    pages: list[str]
    verdicts: list[LayerVerdict]
    parser: str

    @property
    def pages_without_text(self) -> list[int]:
        """1-based numbers of the pages whose text layer is missing or garbage."""
        return [n for n, v in enumerate(self.verdicts, 1) if v.verdict is not Verdict.TEXT]


def extract_pdf_text(data: bytes | Path, *, as_pdfium_gives: bool = False) -> PdfText:
    """Extract every page's stored text (``page_text``), or with ``as_pdfium_gives`` PDFium's
    text as it is (hyphenation marks kept, no form values: what the upstream reads, for the
    local engine). Raises ``PdfError`` for encrypted or unreadable files. ``data`` is the PDF's
    bytes, or the path of a file holding them (read by the parser as it needs them, not held
    whole in memory).

    Safe to call from several threads at once: PDFium work takes ``PDFIUM_LOCK`` in turn.
    """
    with PDFIUM_LOCK:
        extracted = _extract_with_pdfium(data, as_pdfium_gives)
    return extracted if extracted is not None else _extract_with_pypdf(data)


def _extract_with_pdfium(data: bytes | Path, as_pdfium_gives: bool = False) -> PdfText | None:
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
        verdicts: list[LayerVerdict] = []
        for index in range(len(document)):
            if index and index % PAGES_OPEN == 0:
                document.close()
                document = pdfium.PdfDocument(data)
            if index % PAGES_OPEN == 0 and not as_pdfium_gives:
                init_forms(document)
            page = document[index]
            raw, text = read_page(document, page)
            verdicts.append(text_layer_verdict(text.text, covered_by_image=_scanned(text, page)))
            page.close()
            pages.append(storable_text(raw) if as_pdfium_gives else text.text)
        return PdfText(pages, verdicts, "pdfium")
    finally:
        document.close()  # and its pages, if an error left any open: under the lock


def _scanned(text: PageText, page: pdfium.PdfPage) -> bool:
    """Whether an image covers almost all of a page with little text (a scan's label)."""
    visible = len("".join(text.text.split()))
    if visible == 0 or visible >= _SCAN_MAX_CHARS:
        return False
    width, height = page.get_size()
    area = width * height or 1.0
    for image in page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE], max_depth=3):
        left, bottom, right, top = image.get_bounds()
        if (right - left) * (top - bottom) / area >= _SCAN_MIN_IMAGE_COVERAGE:
            return True
    return False


def _extract_with_pypdf(data: bytes | Path) -> PdfText:
    import pypdf  # a fallback, imported when first needed: see LAZY_LIBRARIES

    try:
        reader = pypdf.PdfReader(data if isinstance(data, Path) else io.BytesIO(data))
        if reader.is_encrypted:
            raise PdfError(ErrorCode.PDF_ENCRYPTED, "The PDF is encrypted.")
        pages = [
            page_text(page.extract_text() or "", _pypdf_form_values(page)).text
            for page in reader.pages
        ]
    except PdfError:
        raise
    except Exception as exc:  # pypdf raises many types on damaged files
        raise PdfError(
            ErrorCode.PDF_INVALID, "The PDF is damaged or truncated and cannot be read."
        ) from exc
    if not pages:
        raise PdfError(ErrorCode.PDF_INVALID, "The PDF has no pages.")
    return PdfText(pages, [text_layer_verdict(text) for text in pages], "pypdf")


# pypdf's names of the form field types whose value is text a reader sees (``_TEXT_FIELD_TYPES``).
_PYPDF_TEXT_FIELD_TYPES = frozenset(("/Tx", "/Ch"))


def _pypdf_form_values(page: Any) -> list[FormValue]:
    """The page's filled text, combo and list fields as pypdf reads them, in the order
    ``form_values`` gives PDFium's: what the fallback parser keeps of a filled form."""
    found = []
    for reference in page.get("/Annots") or ():
        annot = reference.get_object()
        if annot.get("/Subtype") != "/Widget":
            continue
        kind, value = _inherited(annot, "/FT"), _inherited(annot, "/V")
        if kind not in _PYPDF_TEXT_FIELD_TYPES or value is None:
            continue
        values = value if isinstance(value, list) else [value]
        text = ", ".join(str(item) for item in values).strip()
        if text:
            x0, y0, x1, y1 = (float(number) for number in annot["/Rect"])
            rect = (min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1))  # corners in any order
            found.append(FormValue(text, rect))
    found.sort(key=lambda item: (-round(item.rect[3]), item.rect[0]))
    return found


def _inherited(node: Any, key: str, depth: int = 32) -> Any:
    """A field's entry, or its nearest ancestor's (a widget's field type and value may be its
    parent field's); None when none has it."""
    while node is not None and depth > 0:
        if key in node:
            return node[key].get_object() if hasattr(node[key], "get_object") else node[key]
        parent = node.get("/Parent")
        node = parent.get_object() if parent is not None else None
        depth -= 1
    return None


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
