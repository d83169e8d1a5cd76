"""PDF pages as pictures, and where a span's characters sit on them. PDFium does both: it is
the extractor the stored text came from, so its character indices are the stored offsets.

A PDF page's stored text is PDFium's ``get_text_range()`` of the page without hyphenation marks,
then its filled form values (``app.documents.pdf.page_text``), and the document text is the
pages' texts joined. A span's offsets are therefore page-local offsets into that text once the
page's start is known; ``PageText`` maps them to PDFium's text (a form value's characters to its
widget's rectangle), whose indices are PDFium's character indices, except where PDFium holds a
character that its text leaves out (a control character in some Arabic fonts): the two are
aligned once per page then.

Opening a PDF costs more than rendering a page of it, so a few opened documents are kept
(least recently used), and rendered pages too, bounded by their bytes; ``PdfPages.close``
closes the documents still open when the service stops. Everything here runs in worker threads
and takes ``PDFIUM_LOCK``: PDFium does one call at a time in the process.
"""

from __future__ import annotations

import ctypes
import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
from cachetools import LRUCache

from app.documents.pdf import PDFIUM_LOCK, PageText, Rect, init_forms, read_page
from app.documents.png import encode_png

# Two characters are on one line when their heights overlap by this share of the smaller one.
_SAME_LINE_OVERLAP = 0.5
# A horizontal jump wider than this many line heights starts a new box: another column.
_COLUMN_GAP_HEIGHTS = 2.0
# PDFium's hyphenation mark as its characters hold it, and as its text shows it.
_HYPHEN_CHAR, _HYPHEN_TEXT = "\x02", "\ufffe"
# PageToDevice answers whole device pixels: a large device makes them fine fractions.
_DEVICE = 1_000_000


def merge_lines(chars: Sequence[Rect]) -> list[Rect]:
    """Character boxes, in text order, merged into one rectangle per line.

    A character joins the current line when it overlaps the line's height by half (or its
    middle lies inside the line, as a comma's does) and stands
    within a couple of line heights of it sideways (right to left as well: Arabic and Hebrew
    run that way); anything else starts a new line, as the next line of a paragraph or the top
    of the next column does.
    """
    lines: list[list[float]] = []
    for left, bottom, right, top in chars:
        if right <= left or top <= bottom:
            continue  # spaces and line breaks have no ink
        if lines:
            line = lines[-1]
            overlap = min(top, line[3]) - max(bottom, line[1])
            smaller = min(top - bottom, line[3] - line[1])
            gap = max(left - line[2], line[0] - right, 0.0)
            height = max(top - bottom, line[3] - line[1])
            centred = line[1] <= (bottom + top) / 2 <= line[3]  # a comma, a full stop
            same_line = centred or overlap >= _SAME_LINE_OVERLAP * smaller
            if same_line and gap <= _COLUMN_GAP_HEIGHTS * height:
                line[0], line[1] = min(line[0], left), min(line[1], bottom)
                line[2], line[3] = max(line[2], right), max(line[3], top)
                continue
        lines.append([left, bottom, right, top])
    return [(a, b, c, d) for a, b, c, d in lines]


@dataclass(frozen=True, slots=True)
class Box:
    """A rectangle on a displayed page, as fractions of its width and height, origin top left."""

    page: int
    x0: float
    y0: float
    x1: float
    y1: float

    def as_dict(self) -> dict[str, float | int]:
        return {
            "page": self.page,
            "x0": round(self.x0, 5),
            "y0": round(self.y0, 5),
            "x1": round(self.x1, 5),
            "y1": round(self.y1, 5),
        }


@dataclass(frozen=True, slots=True)
class PageLayout:
    """Where a page's stored text starts in the document text and where it came from
    (``document_pages``): PDFium's text layer gives boxes by its characters, OCR by its
    words ((start, end, x0, y0, x1, y1), page-local offsets, fractions), nothing none."""

    start_char: int
    char_count: int
    text_source: str
    words: Sequence[Sequence[float]] | None = None


class PdfUnavailable(Exception):
    """PDFium cannot open the stored PDF (its text came from the fallback parser)."""


@dataclass
class _Opened:
    document: pdfium.PdfDocument
    data: bytes  # PDFium reads from it for as long as the document is open
    page_starts: list[int] = field(default_factory=lambda: [0])  # known so far

    def page_start(self, number: int) -> int:
        """The offset of page ``number`` (1-based) in the stored document text."""
        while len(self.page_starts) < number:
            page = self.document[len(self.page_starts) - 1]
            try:
                length = len(read_page(self.document, page)[1].text)
            finally:
                page.close()
            self.page_starts.append(self.page_starts[-1] + length)
        return self.page_starts[number - 1]


class _OpenDocuments(LRUCache[str, _Opened]):
    def popitem(self) -> tuple[str, _Opened]:
        # LRUCache makes room through popitem: the document it drops is closed here.
        key, opened = super().popitem()
        opened.document.close()  # the caller holds PDFIUM_LOCK
        return key, opened


class PdfPages:
    """Rendered pages and highlight boxes of stored PDFs, keyed by the PDF's SHA-256.

    Every method may be called from any thread; give ``data`` (the PDF's bytes) when
    ``is_open`` said no, or it raises ``KeyError``. ``close`` closes the open documents.
    """

    def __init__(self, max_documents: int = 8, max_image_bytes: int = 64 * 1024 * 1024) -> None:
        self._open = _OpenDocuments(max_documents)
        self._images: LRUCache[tuple[str, int, int], bytes] = LRUCache(
            max_image_bytes, getsizeof=len
        )

    def close(self) -> None:
        """Close every open document, so that none is left for PDFium to close at exit. The
        pages stay usable: a document asked for again is opened again from its ``data``."""
        with PDFIUM_LOCK:
            while self._open:
                self._open.popitem()

    def cached_image(self, key: str, page: int, width: int) -> bytes | None:
        with PDFIUM_LOCK:
            return self._images.get((key, page, width))

    def is_open(self, key: str) -> bool:
        with PDFIUM_LOCK:
            return key in self._open

    def image(self, key: str, data: bytes | None, page: int, width: int) -> bytes:
        """Page ``page`` (1-based, which must exist) as a PNG ``width`` pixels wide."""
        with PDFIUM_LOCK:
            png = self._images.get((key, page, width))
            if png is not None:
                return png
            opened = self._opened(key, data)
            pdf_page = opened.document[page - 1]
            try:
                page_width = pdf_page.get_width() or 1.0
                bitmap = pdf_page.render(scale=width / page_width, rev_byteorder=True)
                try:
                    # render's bitmap is native (its buffer is Python's memory): closing it
                    # releases PDFium's handle only, and the picture keeps its pixels.
                    picture = bitmap.to_pil()
                finally:
                    bitmap.close()
            finally:
                pdf_page.close()
        # Encoding the PNG needs no PDFium: other threads may render meanwhile.
        png = encode_png(picture)
        with PDFIUM_LOCK:
            self._images[(key, page, width)] = png
        return png

    def boxes(
        self,
        key: str,
        data: bytes | None,
        spans: Sequence[tuple[int, int, int, int]],
        layout: Sequence[PageLayout] | None = None,
    ) -> list[list[Box]]:
        """For each span (start_char, end_char, start_page, end_page), its boxes per line.
        ``layout`` is each page's (from page 1) when the document recorded it; without it
        every page's text is taken to be its text layer."""
        with PDFIUM_LOCK:
            opened = self._opened(key, data)
            return [self._span_boxes(opened, *span, layout=layout) for span in spans]

    def _opened(self, key: str, data: bytes | None) -> _Opened:
        opened = self._open.get(key)
        if opened is None:
            if data is None:
                raise KeyError(key)
            try:
                document = pdfium.PdfDocument(data)
                init_forms(document)
            except pdfium.PdfiumError as exc:
                raise PdfUnavailable(str(exc)) from exc
            opened = self._open[key] = _Opened(document, data)
        return opened

    def _span_boxes(
        self,
        opened: _Opened,
        start: int,
        end: int,
        first_page: int,
        last_page: int,
        layout: Sequence[PageLayout] | None = None,
    ) -> list[Box]:
        boxes: list[Box] = []
        last_page = min(last_page, len(opened.document))
        if layout is not None:
            last_page = min(last_page, len(layout))
        for number in range(max(first_page, 1), last_page + 1):
            if layout is not None:
                facts = layout[number - 1]
                page_start, page_end = facts.start_char, facts.start_char + facts.char_count
            else:
                facts = None
                page_start, page_end = opened.page_start(number), opened.page_start(number + 1)
            lo, hi = max(start, page_start) - page_start, min(end, page_end) - page_start
            if lo >= hi:
                continue
            if facts is not None and facts.text_source != "text_layer":
                boxes.extend(word_boxes(facts.words or (), number, lo, hi))
                continue
            page = opened.document[number - 1]
            try:
                boxes.extend(_page_boxes(opened.document, page, number, lo, hi))
            finally:
                page.close()
        return boxes


def word_boxes(words: Sequence[Sequence[float]], number: int, lo: int, hi: int) -> list[Box]:
    """The boxes of an OCR'd page's text ``[lo, hi)``: its words' boxes there, merged per line
    as PDFium's characters are (fractions, top left origin: y grows downwards)."""
    rects = [(x0, -y1, x1, -y0) for start, end, x0, y0, x1, y1 in words if start < hi and lo < end]
    return [Box(number, a, -d, c, -b) for a, b, c, d in merge_lines(rects)]


def _page_boxes(
    document: pdfium.PdfDocument, page: pdfium.PdfPage, number: int, lo: int, hi: int
) -> list[Box]:
    """The boxes of the page's stored text ``[lo, hi)``, as fractions of the displayed page."""
    raw, stored = read_page(document, page)
    textpage = page.get_textpage()
    try:
        indices = _char_indices(textpage, raw, _raw_range(stored, lo, hi))
        chars = [textpage.get_charbox(index) for index in indices]
    finally:
        textpage.close()
    to_display = _display_transform(page)
    rects = merge_lines(chars) + _field_rects(stored, lo, hi)
    boxes = []
    for left, bottom, right, top in rects:
        (xa, ya), (xb, yb) = to_display(left, bottom), to_display(right, top)
        boxes.append(Box(number, min(xa, xb), min(ya, yb), max(xa, xb), max(ya, yb)))
    return boxes


def _raw_range(stored: PageText, lo: int, hi: int) -> list[int]:
    """The indices in PDFium's page text of the stored text layer's ``[lo, hi)``."""
    hi = min(hi, stored.layer_length)
    if lo >= hi:
        return []
    if stored.layer_indices is None:
        return list(range(lo, hi))
    return stored.layer_indices[lo:hi]


def _field_rects(stored: PageText, lo: int, hi: int) -> list[Rect]:
    """The widget rectangles of the form values the stored text's ``[lo, hi)`` touches."""
    return [
        form_value.rect
        for form_value, start in zip(stored.fields, stored.field_starts, strict=True)
        if start < hi and lo < start + len(form_value.value)
    ]


def _char_indices(textpage: pdfium.PdfTextPage, text: str, wanted: list[int]) -> list[int]:
    """PDFium's character indices of the page text's characters at ``wanted`` (ascending)."""
    if not wanted:
        return []
    count = textpage.count_chars()
    held = "".join(
        _HYPHEN_TEXT if code == 2 else chr(code)
        for code in (pdfium_c.FPDFText_GetUnicode(textpage.raw, i) for i in range(count))
    )
    if held == text:
        return [index for index in wanted if index < count]
    to_held = {}
    matcher = difflib.SequenceMatcher(None, text, held, autojunk=False)
    lo, hi = wanted[0], wanted[-1] + 1
    for at_text, at_held, size in matcher.get_matching_blocks():
        for offset in range(max(lo, at_text), min(hi, at_text + size)):
            to_held[offset] = at_held + offset - at_text
    return [to_held[index] for index in wanted if index in to_held]


def _display_transform(page: pdfium.PdfPage) -> _Transform:
    """Maps PDF user space to fractions of the page as displayed (rotation and crop box
    included), top left origin: the same mapping PDFium renders with."""

    def device(x: float, y: float) -> tuple[float, float]:
        dx, dy = ctypes.c_int(), ctypes.c_int()
        pdfium_c.FPDF_PageToDevice(
            page.raw, 0, 0, _DEVICE, _DEVICE, 0, x, y, ctypes.byref(dx), ctypes.byref(dy)
        )
        return dx.value, dy.value

    # The mapping is affine: three points give it, then no more calls into PDFium.
    (ox, oy), (ax, ay), (bx, by) = device(0, 0), device(1000, 0), device(0, 1000)
    xx, xy = (ax - ox) / 1000, (ay - oy) / 1000
    yx, yy = (bx - ox) / 1000, (by - oy) / 1000
    return _Transform(ox, oy, xx, xy, yx, yy)


@dataclass(frozen=True, slots=True)
class _Transform:
    ox: float
    oy: float
    xx: float
    xy: float
    yx: float
    yy: float

    def __call__(self, x: float, y: float) -> tuple[float, float]:
        fx = (self.ox + x * self.xx + y * self.yx) / _DEVICE
        fy = (self.oy + x * self.xy + y * self.yy) / _DEVICE
        return min(max(fx, 0.0), 1.0), min(max(fy, 0.0), 1.0)
