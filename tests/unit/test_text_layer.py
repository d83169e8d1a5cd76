"""A PDF page's stored text: PDFium's hyphenation marks and soft hyphens left out (the word whole,
every offset and box still exact) and filled form values kept, on real sample PDFs."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pypdf
import pypdfium2 as pdfium
import pytest

from app.documents.index import DocumentIndex, IndexedChunk, locate
from app.documents.kinds.pdf import PdfKind
from app.documents.pages import PdfPages
from app.documents.pdf import PAGES_OPEN, extract_pdf_text, without_hyphenation
from tests.fixture_files import CORPUS

MULTICOLUMN = CORPUS / "multicolumn.pdf"
FORM = CORPUS / "libreoffice-form.pdf"


@pytest.fixture
def pages() -> Iterator[PdfPages]:
    pdf_pages = PdfPages()
    yield pdf_pages
    pdf_pages.close()


def test_hyphenation_marks_never_reach_the_stored_text_and_the_word_is_whole() -> None:
    data = MULTICOLUMN.read_bytes()
    with pdfium.PdfDocument(data) as document:
        raw = [page.get_textpage().get_text_range() for page in document]
    assert "adip\ufffeiscing" in raw[0]  # what PDFium gives
    parsed = PdfKind().parse(data)
    assert "\ufffe" not in parsed.text and "\u00ad" not in parsed.text
    assert "adipiscing" in parsed.text
    assert parsed.text == "".join(text.replace("\ufffe", "") for text in raw)
    for chunk in parsed.chunks:  # chunks still tile the text, each on its page
        assert chunk.page_number is not None
        assert not any(mark in parsed.text[chunk.start : chunk.end] for mark in "\ufffe\u00ad")
    assert [c.start for c in parsed.chunks[1:]] == [c.end for c in parsed.chunks[:-1]]


def test_soft_hyphens_are_left_out_with_a_map_back() -> None:
    text, kept = without_hyphenation("co\u00adoperate and re\ufffeturn")
    assert text == "cooperate and return"
    assert kept is not None and len(kept) == len(text)
    assert "".join("co\u00adoperate and re\ufffeturn"[i] for i in kept) == text
    assert without_hyphenation("nothing to do") == ("nothing to do", None)


def test_the_upstreams_quote_with_its_hyphen_mark_is_found_in_the_whole_word() -> None:
    text = PdfKind().parse(MULTICOLUMN.read_bytes()).text
    start = text.index("adipiscing")
    # The upstream's cited_text keeps the mark as U+0002 (see docs/UPSTREAM.md).
    found = locate(text, "consectetuer adip\u0002iscing elit", (0, len(text)), 0)
    assert found is not None
    assert text[found[0] : found[1]] == "consectetuer adipiscing elit"
    assert found[0] < start < found[1]
    index = DocumentIndex("doc", "pdf", text, [IndexedChunk(0, len(text), 1, None)], 1)
    assert index.span(*found)["start_page"] == 1


def test_a_word_joined_over_a_line_break_gets_a_box_on_each_line(pages: PdfPages) -> None:
    data = MULTICOLUMN.read_bytes()
    text = PdfKind().parse(data).text
    start = text.index("adipiscing")
    [boxes] = pages.boxes("doc", data, [(start, start + len("adipiscing"), 1, 1)])
    assert len(boxes) == 2  # "adip-" ends one line, "iscing" starts the next
    assert boxes[0].y1 <= boxes[1].y0 + 0.001  # one line below the other
    with pdfium.PdfDocument(data) as document:
        page = document[0]
        textpage = page.get_textpage()
        raw = textpage.get_text_range()
        width, height = page.get_size()
        at = raw.index("adip\ufffeiscing")
        for index in [*range(at, at + 4), *range(at + 5, at + 11)]:
            left, bottom, right, top = textpage.get_charbox(index)
            x, y = (left + right) / 2 / width, 1 - (bottom + top) / 2 / height
            assert any(b.x0 <= x <= b.x1 and b.y0 <= y <= b.y1 for b in boxes), raw[index]


def form_for_the_fallback() -> bytes:
    """The filled form with its trailer's /Root renamed: PDFium refuses it, pypdf (the fallback
    parser) finds the catalog."""
    data = FORM.read_bytes()
    trailer = data.rfind(b"trailer")
    return data[:trailer] + data[trailer:].replace(b"/Root 52 0 R", b"/Rooz 52 0 R", 1)


def test_the_fallback_parser_keeps_filled_form_values_as_pdfium_does() -> None:
    broken = form_for_the_fallback()
    with pytest.raises(pdfium.PdfiumError):
        pdfium.PdfDocument(broken)
    fallback, pdfium_text = extract_pdf_text(broken), extract_pdf_text(FORM.read_bytes())
    assert (fallback.parser, pdfium_text.parser) == ("pypdf", "pdfium")
    # The text layers differ (each library lays lines out its own way); the values do not.
    for text in (fallback.pages[0], pdfium_text.pages[0]):
        assert text.endswith("Other\r\nAlice\r\nBob"), text
    parsed = PdfKind().parse(broken)
    assert parsed.citable and "pdf_text_from_fallback_parser" in parsed.warnings
    assert parsed.text.endswith("\r\nAlice\r\nBob")


def test_filled_form_values_are_part_of_their_page_text(pages: PdfPages) -> None:
    data = FORM.read_bytes()
    parsed = PdfKind().parse(data)
    with pdfium.PdfDocument(data) as document:
        layer = document[0].get_textpage().get_text_range()
    assert "Alice" not in layer  # PDFium's text layer has no field values
    assert parsed.text.startswith(layer)
    assert parsed.text[len(layer) :] == "\r\nAlice\r\nBob"  # top to bottom
    assert parsed.citable and parsed.chunks[-1].end == len(parsed.text)
    start = parsed.text.index("Alice")
    [boxes] = pages.boxes("form", data, [(start, start + 5, 1, 1)])
    assert len(boxes) == 1
    with pdfium.PdfDocument(data) as document:
        width, height = document[0].get_size()
    # The box is the "First Name" widget's rectangle: left 119.549, top 718.138 points.
    box = boxes[0]
    assert box.x0 == pytest.approx(119.549 / width, abs=1e-3)
    assert box.y0 == pytest.approx(1 - 718.138 / height, abs=1e-3)


def test_filled_form_values_are_kept_on_a_page_read_after_the_document_is_opened_again() -> None:
    """Text extraction opens PDFium's document again every ``PAGES_OPEN`` pages (for memory);
    the form's values on a page past that are still part of its text."""
    writer = pypdf.PdfWriter(clone_from=FORM)
    size = writer.pages[0].mediabox
    for _ in range(PAGES_OPEN + 1):
        writer.insert_blank_page(size.width, size.height, 0)
    out = io.BytesIO()
    writer.write(out)
    extracted = extract_pdf_text(out.getvalue())
    assert extracted.parser == "pdfium" and len(extracted.pages) == PAGES_OPEN + 2
    assert extracted.pages[-1].endswith("Other\r\nAlice\r\nBob"), extracted.pages[-1]
    assert extracted.pages[-1] == extract_pdf_text(FORM.read_bytes()).pages[0]
