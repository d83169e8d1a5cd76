"""How the local engine cuts each kind of document into the chunks it cites."""

from __future__ import annotations

from app.documents.pdf import extract_pdf_text
from app.local_engine.documents import (
    chunk_content_blocks,
    chunk_pdf_pages,
    chunk_plain_text,
    upstream_page_text,
)
from app.local_engine.wire import ContentSource
from tests.fixture_files import AMAZON_PDF
from tests.unit.local_engine.request_bodies import GRASS_SKY


def test_plain_text_chunks_are_sentences_with_their_trailing_space() -> None:
    chunks = chunk_plain_text(GRASS_SKY)
    assert [(c.start, c.end, c.text) for c in chunks] == [
        (0, 20, "The grass is green. "),
        (20, 36, "The sky is blue."),
    ]


def test_pdf_chunks_tile_each_page_of_the_upstream_page_text() -> None:
    pdfium_pages = extract_pdf_text(AMAZON_PDF.read_bytes(), as_pdfium_gives=True).pages
    pdf = chunk_pdf_pages(pdfium_pages)
    assert len(pdf.pages) == 11
    for number, page in enumerate(pdf.pages, start=1):
        on_page = [chunk for chunk in pdf.chunks if chunk.start == number]
        assert all(chunk.end == number + 1 for chunk in on_page)
        assert "".join(chunk.text for chunk in on_page) == page
    # PDFium's U+FFFE at a hyphenation break is U+0002 in the upstream's text, as in its
    # cited_text ("self\u0002improvement").
    assert "\ufffe" in "".join(pdfium_pages)
    assert "\ufffe" not in "".join(pdf.pages)
    assert upstream_page_text("self\ufffeimprovement") == "self\u0002improvement"


def test_content_chunks_are_the_text_blocks_with_their_indices() -> None:
    source = ContentSource.model_validate(
        {
            "type": "content",
            "content": [
                {"type": "text", "text": "First block."},
                {"type": "image", "source": {"type": "url", "url": "https://example.test/a"}},
                {"type": "text", "text": "Third block."},
            ],
        }
    )
    chunks = chunk_content_blocks(source)
    assert [(c.position, c.start, c.end, c.text) for c in chunks] == [
        (0, 0, 1, "First block."),
        (1, 2, 3, "Third block."),
    ]
