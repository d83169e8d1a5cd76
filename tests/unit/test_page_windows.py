"""Page windows of long PDFs: how they are cut, titled, and how a citation of one maps to the
original's pages and back, and the windows themselves."""

from __future__ import annotations

import itertools

import pypdfium2 as pdfium
from hypothesis import given
from hypothesis import strategies as st

from app.answers.prompt import citation_param
from app.documents.kinds import PDF, TEXT
from app.documents.pdf import extract_pdf_text, split_pdf
from app.documents.sources import PromptDocument, window_title
from tests.fixture_files import CORPUS

MB = 1_000_000


@given(st.integers(1, 5000), st.integers(1, 700))
def test_windows_tile_the_pages_in_order_within_the_limit(pages: int, limit: int) -> None:
    windows = PDF.page_windows(pages, 1000, limit, 32 * MB)
    if pages <= limit:
        assert windows is None
        return
    assert windows is not None
    assert windows[0][0] == 1 and windows[-1][1] == pages
    assert all(first <= last and last - first + 1 <= limit for first, last in windows)
    assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(windows))


def test_a_pdf_over_the_byte_limit_is_made_again_even_within_the_page_limit() -> None:
    assert PDF.page_windows(10, 25 * MB, 600, 32 * MB) == [(1, 10)]  # 33 MB as base64
    assert PDF.page_windows(10, 23 * MB, 600, 32 * MB) is None
    assert TEXT.page_windows(None, 40 * MB, 600, 32 * MB) is None


def test_window_titles_name_their_pages_within_500_characters() -> None:
    assert window_title("Report", (601, 700)) == "Report (pages 601–700)"
    assert window_title(None, (1, 600)) == "Pages 1–600"
    long = window_title("x" * 500, (1001, 1600))
    assert len(long) == 500 and long.endswith(" (pages 1001–1600)")


def _citation(first: int, end: int, index: int = 0) -> dict[str, object]:
    return {
        "type": "page_location",
        "cited_text": "Text.",
        "document_index": index,
        "document_title": "Report",
        "start_page_number": first,
        "end_page_number": end,
    }


@given(st.data(), st.integers(2, 3000), st.integers(1, 600))
def test_a_window_citation_maps_to_the_original_and_back(
    data: st.DataObject, pages: int, limit: int
) -> None:
    windows = PDF.page_windows(pages, 1000, limit, 32 * MB) or [(1, pages)]
    blocks = [
        PromptDocument("Other", None, {}, "doc_other"),
        *(PromptDocument(window_title("Report", w), None, {}, "doc_a", w) for w in windows),
    ]
    index = data.draw(st.integers(1, len(windows)))
    first_page, last_page = windows[index - 1]
    size = last_page - first_page + 1
    start = data.draw(st.integers(1, size))
    end = data.draw(st.integers(start + 1, size + 1))
    # The upstream's citation of window `index`, made the original's...
    absolute = PDF.from_window(_citation(start, end, index), windows[index - 1])
    assert absolute is not None
    assert absolute["start_page_number"] == start + first_page - 1
    assert absolute["end_page_number"] == end + first_page - 1
    # ...is sent back as the same citation of the same window.
    stored = {**absolute, "document_index": 1, "document_id": "doc_a"}
    assert citation_param(stored, blocks) == {
        **_citation(start, end, index),
        "document_title": blocks[index].title,
    }


def test_a_citation_past_its_window_maps_nowhere() -> None:
    assert PDF.from_window(_citation(101, 102), (601, 700)) is None
    assert PDF.from_window(_citation(0, 1), (601, 700)) is None
    assert PDF.from_window(_citation(100, 101), (601, 700)) == _citation(700, 701)


def test_windows_are_the_same_bytes_each_time_and_read_as_the_original_pages() -> None:
    data = (CORPUS / "pdflatex-4-pages.pdf").read_bytes()
    first, second = split_pdf(data, [(1, 2), (3, 4)])
    assert split_pdf(data, [(1, 2), (3, 4)]) == [first, second]  # the prompt cache's key
    pages = extract_pdf_text(data).pages
    assert extract_pdf_text(first).pages == pages[:2]
    assert extract_pdf_text(second).pages == pages[2:]
    with pdfium.PdfDocument(second) as window:
        assert len(window) == 2
