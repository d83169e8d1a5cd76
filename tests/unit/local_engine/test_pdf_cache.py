"""Each PDF is parsed once: the local engine's bounded cache of parsed PDFs."""

from __future__ import annotations

import base64
import io

from pypdf import PdfWriter

from app.local_engine import LocalEngine
from app.local_engine.pdf_cache import ParsedPdfCache
from tests.fixture_files import AMAZON_PDF
from tests.unit.local_engine.request_bodies import (
    AMAZON_QUESTION,
    answer,
    body,
    parse,
    pdf_document,
)


def small_pdf(width: int) -> bytes:
    writer = PdfWriter()
    writer.add_blank_page(width=width, height=200)
    with io.BytesIO() as out:
        writer.write(out)
        return out.getvalue()


def test_pdf_cache_parses_each_pdf_once_and_is_bounded() -> None:
    cache = ParsedPdfCache(max_entries=2)
    amazon = base64.b64encode(AMAZON_PDF.read_bytes()).decode()
    first = cache.load(amazon)
    assert cache.load(amazon) is first
    assert cache.parses == 1
    for width in (100, 120):
        cache.load(base64.b64encode(small_pdf(width)).decode())
    assert len(cache) == 2
    cache.load(amazon)
    assert cache.parses == 4


def test_pdf_cache_drops_the_least_recently_used() -> None:
    cache = ParsedPdfCache(max_entries=2)
    wide, narrow, square = (base64.b64encode(small_pdf(w)).decode() for w in (300, 100, 200))
    kept = cache.load(wide)
    cache.load(narrow)
    assert cache.load(wide) is kept  # used since narrow was loaded: narrow goes first
    cache.load(square)
    assert cache.load(wide) is kept
    assert cache.parses == 3
    cache.load(narrow)
    assert cache.parses == 4


def test_repeated_questions_on_one_pdf_parse_it_once(engine: LocalEngine) -> None:
    data = body(pdf_document(AMAZON_PDF.read_bytes()), question=AMAZON_QUESTION)
    answer(engine, data)
    answer(engine, data)
    engine.count_tokens_blocking(parse(data))
    assert engine.pdf_cache.parses == 1
