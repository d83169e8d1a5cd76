"""Highlight boxes: PDFium's character boxes of a span merged per line, on real sample PDFs
(two columns, Arabic, a rotated page) and on made-up boxes."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pypdf
import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
import pytest

from app.documents.kinds.pdf import PdfKind
from app.documents.pages import Box, PdfPages, merge_lines
from app.documents.pdf import without_hyphenation
from tests.fixture_files import CORPUS


@pytest.fixture
def pages() -> Iterator[PdfPages]:
    pdf_pages = PdfPages()
    yield pdf_pages
    pdf_pages.close()


def test_one_line_of_characters_is_one_box() -> None:
    chars = [(10.0, 100.0, 15.0, 110.0), (15.5, 100.0, 20.0, 110.0), (21.0, 98.0, 23.0, 103.0)]
    assert merge_lines(chars) == [(10.0, 98.0, 23.0, 110.0)]  # the comma dips below


def test_the_next_line_and_the_next_column_are_new_boxes() -> None:
    chars = [
        (10.0, 100.0, 50.0, 110.0),  # end of a line
        (10.0, 86.0, 30.0, 96.0),  # the next line
        (300.0, 86.0, 330.0, 96.0),  # same height, but across the gutter: the next column
    ]
    assert merge_lines(chars) == [
        (10.0, 100.0, 50.0, 110.0),
        (10.0, 86.0, 30.0, 96.0),
        (300.0, 86.0, 330.0, 96.0),
    ]


def test_right_to_left_characters_make_one_line_and_blanks_none() -> None:
    chars = [(50.0, 0.0, 60.0, 10.0), (0.0, 0.0, 0.0, 0.0), (38.0, 0.0, 49.0, 10.0)]
    assert merge_lines(chars) == [(38.0, 0.0, 60.0, 10.0)]


def _pdf_with_page_text(name: str) -> tuple[bytes, str, list[int]]:
    data = (CORPUS / name).read_bytes()
    parsed = PdfKind().parse(data)
    starts = [0]
    with pdfium.PdfDocument(data) as document:  # and its pages and text pages
        for page in document:
            starts.append(starts[-1] + page.get_textpage().count_chars())
    return data, parsed.text, starts


def _inside(x: float, y: float, boxes: list[Box], slack: float = 0.002) -> bool:
    return any(
        b.x0 - slack <= x <= b.x1 + slack and b.y0 - slack <= y <= b.y1 + slack for b in boxes
    )


@pytest.mark.parametrize(
    ("name", "page", "words"),
    [
        ("multicolumn.pdf", 1, "Donec vehicula"),  # a sentence over two lines of a column
        ("GeoTopo-komprimiert.pdf", 6, "Topologische Räume"),
        ("pdflatex-4-pages.pdf", 2, None),
    ],
)
def test_every_cited_character_is_inside_a_box(
    pages: PdfPages, name: str, page: int, words: str | None
) -> None:
    data, text, _ = _pdf_with_page_text(name)
    with pdfium.PdfDocument(data) as document:
        pdf_page = document[page - 1]
        textpage = pdf_page.get_textpage()
        raw = textpage.get_text_range()
        page_text, kept = without_hyphenation(raw)
        held = kept or list(range(len(raw)))
        page_start = text.index(page_text)
        lo = page_text.index(words) if words else 0
        hi = min(len(page_text), lo + 300)
        [boxes] = pages.boxes("doc", data, [(page_start + lo, page_start + hi, page, page)])
        assert boxes and all(box.page == page for box in boxes)
        width, height = pdf_page.get_size()
        # One box per line of the span: PDFium's text ends a line with \r\n, or with its
        # hyphenation mark (which the stored text leaves out).
        cited = raw[held[lo] : held[hi - 1] + 1].strip()
        assert len(boxes) == cited.count("\r\n") + cited.count("\ufffe") + 1 > 1
        for index in range(lo, hi):
            if page_text[index].isspace():
                continue
            left, bottom, right, top = textpage.get_charbox(held[index])
            x, y = (left + right) / 2 / width, 1 - (bottom + top) / 2 / height
            assert _inside(x, y, boxes), (index, page_text[index])


def test_arabic_text_finds_its_characters_past_the_one_pdfium_leaves_out(
    pages: PdfPages,
) -> None:
    data, text, _ = _pdf_with_page_text("habibi.pdf")
    start = text.index("habibi")
    [boxes] = pages.boxes("doc", data, [(start, start + len("habibi"), 1, 1)])
    with pdfium.PdfDocument(data) as document:
        page = document[0]
        textpage = page.get_textpage()
        # PDFium holds one character more than its text shows, before "habibi".
        held = "".join(
            chr(pdfium_c.FPDFText_GetUnicode(textpage.raw, i))
            for i in range(textpage.count_chars())
        )
        first = held.index("habibi")
        width, height = page.get_size()
        assert len(boxes) == 1
        for index in range(first, first + 6):
            left, bottom, right, top = textpage.get_charbox(index)
            assert _inside((left + right) / 2 / width, 1 - (bottom + top) / 2 / height, boxes)


@pytest.mark.parametrize("rotation", [90, 180, 270])
def test_a_rotated_page_gets_its_boxes_turned_with_it(pages: PdfPages, rotation: int) -> None:
    upright = (CORPUS / "multicolumn.pdf").read_bytes()
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(upright)))
    writer.pages[0].rotate(rotation)
    buffer = io.BytesIO()
    writer.write(buffer)
    data = buffer.getvalue()
    text = PdfKind().parse(data).text  # PDFium reads a turned page in another order
    start = text.index("Donec vehicula")
    [boxes] = pages.boxes("turned", data, [(start, start + 40, 1, 1)])
    assert len(boxes) >= text[start : start + 40].count("\r\n") + 1
    held = without_hyphenation(pdfium.PdfDocument(data)[0].get_textpage().get_text_range())[1]

    def turn(x: float, y: float) -> tuple[float, float]:  # clockwise, as /Rotate turns
        for _ in range(rotation // 90):
            x, y = 1 - y, x
        return x, y

    with pdfium.PdfDocument(data) as document:
        page = document[0]
        assert page.get_rotation() == rotation
        _, _, width, height = page.get_mediabox()
        textpage = page.get_textpage()
        for index in range(start, start + 40):
            if text[index].isspace():
                continue
            left, bottom, right, top = textpage.get_charbox(held[index] if held else index)
            x, y = turn((left + right) / 2 / width, 1 - (bottom + top) / 2 / height)
            assert _inside(x, y, boxes), (index, text[index])


def test_a_rendered_page_has_ink_where_the_boxes_are(pages: PdfPages) -> None:
    from PIL import Image

    data = (CORPUS / "multicolumn.pdf").read_bytes()
    text = PdfKind().parse(data).text
    start = text.index("Donec vehicula")
    [boxes] = pages.boxes("doc", data, [(start, start + 60, 1, 1)])
    png = pages.image("doc", None, 1, 800)
    assert pages.image("doc", None, 1, 800) is png  # cached
    image = Image.open(io.BytesIO(png)).convert("L")
    assert image.width == 800
    for box in boxes:
        region = image.crop(
            (
                box.x0 * image.width,
                box.y0 * image.height,
                box.x1 * image.width,
                box.y1 * image.height,
            )
        )
        dark = sum(1 for value in region.tobytes() if value < 128)
        assert dark > 0.05 * region.width * region.height


def test_closed_pages_open_a_document_again_when_asked(pages: PdfPages) -> None:
    data = (CORPUS / "multicolumn.pdf").read_bytes()
    png = pages.image("doc", data, 1, 200)
    assert pages.is_open("doc")
    pages.close()
    assert not pages.is_open("doc")
    with pytest.raises(KeyError):
        pages.boxes("doc", None, [(0, 10, 1, 1)])
    assert pages.image("doc", None, 1, 200) is png  # rendered pages stay cached
    [boxes] = pages.boxes("doc", data, [(0, 10, 1, 1)])
    assert boxes and pages.is_open("doc")
