"""Pages read by OCR (real Tesseract), over real HTTP, on scans whose truth is known: the
repository's own text PDFs rendered at 300 dpi into image-only pages, turned, under a garbage
text layer, or beside pages that keep their text layer. The truth is the source's text layer."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pypdfium2 as pdfium
import pytest

from app.documents.pdf import split_pdf, without_hyphenation
from app.settings import Settings
from tests.conftest import ServedApp, count_rows
from tests.e2e.test_documents import assert_problem
from tests.fixture_files import CORPUS
from tests.scans import GERMAN, RUSSIAN, SERIF, cer, image_pdf, noisy, render_page, typed_page

MULTICOLUMN = (CORPUS / "multicolumn.pdf").read_bytes()


def truth(data: bytes, number: int) -> str:
    """A page's text layer as stored (the truth a scan of it is read against)."""
    with pdfium.PdfDocument(data) as document:
        return without_hyphenation(document[number - 1].get_textpage().get_text_range())[0]


@pytest.fixture(autouse=True)
def no_keys(client: httpx.Client) -> None:
    """Every test starts with no data and no API key, as the ``client`` fixture makes it: a
    key another test file left in the database would make these apps ask for one (401)."""


@pytest.fixture(scope="module")
def ocr_client(settings: Settings) -> Iterator[httpx.Client]:
    """Citegate with OCR on (as it is by default), two worker processes."""
    on = settings.model_copy(update={"ocr": "auto", "ocr_workers": 2})
    with ServedApp(on) as served, httpx.Client(base_url=served.base_url, timeout=600) as client:
        yield client


def _upload(client: httpx.Client, name: str, data: bytes) -> httpx.Response:
    return client.post("/v1/documents/upload", files={"file": (name, data)})


def _pages(client: httpx.Client, document_id: str) -> list[dict[str, Any]]:
    response = client.get(f"/v1/documents/{document_id}/pages")
    assert response.status_code == 200, response.text
    pages: list[dict[str, Any]] = response.json()["data"]
    return pages


def _page_texts(client: httpx.Client, document_id: str, count: int) -> list[str]:
    texts = [""] * count
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 100} | ({"cursor": cursor} if cursor else {})
        response = client.get(f"/v1/documents/{document_id}/chunks", params=params)
        assert response.status_code == 200, response.text
        for chunk in response.json()["data"]:
            texts[chunk["page_number"] - 1] += chunk["text"]
        cursor = response.json()["next_cursor"]
        if cursor is None:
            return texts


def mixed_scan() -> bytes:
    """Page 1: multicolumn's page 1 with its text layer; page 2: its page 2 scanned at 300 dpi
    under a garbage text layer; page 3: its page 3 scanned and turned 90 degrees (the page
    turned with it); page 4: its page 1 scanned upside down."""
    with pdfium.PdfDocument(MULTICOLUMN) as document:
        width, height = document[0].get_size()
    return image_pdf(
        [
            render_page(MULTICOLUMN, 2),
            render_page(MULTICOLUMN, 3).rotate(90, expand=True),
            render_page(MULTICOLUMN, 1).rotate(180),
        ],
        sizes=[(width, height), (height, width), (width, height)],
        text_pages={0: split_pdf(MULTICOLUMN, [(1, 1)])[0]},
        garbage_layer=[1],
    )


def wait_ready(client: httpx.Client, document_id: str, timeout: float = 600) -> dict[str, Any]:
    """The document once its pages are read (polled as a caller would)."""
    deadline = time.monotonic() + timeout
    while True:
        response = client.get(f"/v1/documents/{document_id}")
        assert response.status_code == 200, response.text
        document: dict[str, Any] = response.json()
        if document["status"] != "processing":
            return document
        assert time.monotonic() < deadline, document
        time.sleep(0.5)


def test_scanned_turned_and_garbage_pages_are_read_in_the_background_text_pages_kept(
    ocr_client: httpx.Client, database_url: str
) -> None:
    scan = mixed_scan()
    response = _upload(ocr_client, "mixed-scan.pdf", scan)
    assert response.status_code == 202, response.text
    document = response.json()
    assert document["status"] == "processing" and document["citable"] is False
    assert document["progress"] == {"pages_done": 0, "pages_total": 4}
    assert response.headers["location"] == f"/v1/documents/{document['id']}"
    # Asked about while its pages are read: 409, and when to ask again.
    asked = ocr_client.post(
        "/v1/answers", json={"question": "What is Lorem ipsum?", "document_ids": [document["id"]]}
    )
    assert_problem(asked, 409, "document_processing")
    assert int(asked.headers["retry-after"]) > 0
    pending = _pages(ocr_client, document["id"])
    assert [p["text_source"] for p in pending] == ["text_layer", "pending", "pending", "pending"]
    # The same bytes again: the document as it stands.
    again = _upload(ocr_client, "mixed-scan.pdf", scan)
    assert again.status_code == 200 and again.json()["id"] == document["id"]
    document = wait_ready(ocr_client, document["id"])
    assert document["status"] == "ready" and document["progress"] is None
    pages = _pages(ocr_client, document["id"])
    assert [(p["text_source"], p["warnings"]) for p in pages] == [
        ("text_layer", []),
        ("ocr", ["text_layer_garbage"]),
        ("ocr", []),
        ("ocr", []),
    ]
    assert "pdf_pages_read_by_ocr" in document["warnings"] and document["citable"] is True
    texts = _page_texts(ocr_client, document["id"], 4)
    assert texts[0] == truth(MULTICOLUMN, 1)  # the text page exactly as it was
    for number, source in ((2, 2), (3, 3), (4, 1)):
        rate = cer(texts[number - 1], truth(MULTICOLUMN, source))
        assert rate <= 0.02, (number, rate, texts[number - 1][:300])
        page = pages[number - 1]
        assert page["char_count"] == len(texts[number - 1])
        assert 0.8 <= page["ocr_confidence"] <= 1.0
    # An OCR'd page is cited like any other: verified, with its page and boxes on the words.
    question = "Praesent enim elit, rutrum at, molestie non, nonummy vel?"
    response = ocr_client.post(
        "/v1/answers", json={"question": question, "document_ids": [document["id"]]}
    )
    assert response.status_code == 200, response.text
    citations = [c for s in response.json()["segments"] for c in s["citations"]]
    on_scan = [c for c in citations if c["span"] and c["span"]["start_page"] == 2]
    assert on_scan, citations
    placed = 0
    for citation in on_scan:
        assert citation["verified"] is True and citation["type"] == "content_block_location"
        boxes = citation["span"]["boxes"]
        assert boxes and {box["page"] for box in boxes} == {2}
        # Where the source's own text layer has those lines, the boxes are.
        for line in citation["cited_text"].splitlines():
            for centre in _truth_centres(MULTICOLUMN, 2, line.strip()):
                assert _inside(centre, boxes), (line, centre, boxes)
                placed += 1
    assert placed >= 20, [c["cited_text"] for c in on_scan]
    search = ocr_client.post(
        "/v1/search", json={"query": "molestie nonummy", "document_ids": [document["id"]]}
    )
    assert search.status_code == 200 and search.json()["data"], search.text


def _truth_centres(data: bytes, number: int, line: str) -> list[tuple[float, float]]:
    """The centres of ``line``'s characters on the source page, as page fractions; none for a
    line that is not there exactly once."""
    with pdfium.PdfDocument(data) as document:
        page = document[number - 1]
        textpage = page.get_textpage()
        text = textpage.get_text_range()
        if len(line) < 8 or text.count(line) != 1:
            return []
        at = text.index(line)
        width, height = page.get_size()
        centres = []
        for index in range(at, at + len(line)):
            if not text[index].isspace():
                left, bottom, right, top = textpage.get_charbox(index)
                centres.append(((left + right) / 2 / width, 1 - (bottom + top) / 2 / height))
        return centres


def _inside(centre: tuple[float, float], boxes: list[dict[str, Any]]) -> bool:
    x, y = centre
    slack = 0.004
    return any(
        b["x0"] - slack <= x <= b["x1"] + slack and b["y0"] - slack <= y <= b["y1"] + slack
        for b in boxes
    )


def test_more_pages_to_read_than_the_limit_are_refused_before_anything_is_stored(
    settings: Settings, database_url: str
) -> None:
    limited = settings.model_copy(update={"ocr": "auto", "ocr_max_pages": 1})
    scan = image_pdf([render_page(MULTICOLUMN, 1, 72), render_page(MULTICOLUMN, 2, 72)])
    before = count_rows(database_url, ("documents", "document_blobs", "document_pages"))
    with ServedApp(limited) as served, httpx.Client(base_url=served.base_url) as client:
        response = _upload(client, "two-scanned-pages.pdf", scan)
        assert_problem(response, 413, "ocr_page_limit_exceeded")
        assert "2 pages to read by OCR" in response.json()["detail"]
    assert count_rows(database_url, ("documents", "document_blobs", "document_pages")) == before


def test_a_document_that_cannot_be_read_is_failed_with_its_reason_and_nothing_indexed(
    settings: Settings, database_url: str
) -> None:
    # Korean is not among the languages scripts/test installs: Tesseract refuses to start.
    broken = settings.model_copy(update={"ocr": "auto", "ocr_languages": "kor", "ocr_workers": 1})
    with ServedApp(broken) as served, httpx.Client(base_url=served.base_url) as client:
        response = _upload(client, "scan.pdf", image_pdf([render_page(MULTICOLUMN, 1, 72)]))
        assert response.status_code == 202, response.text
        document = wait_ready(client, response.json()["id"])
        assert document["status"] == "failed" and document["citable"] is False
        assert document["error"]["code"] == "ocr_failed"
        assert "kor" in document["error"]["detail"], document["error"]
        assert document["chunk_count"] == 0
        chunks = client.get(f"/v1/documents/{document['id']}/chunks").json()["data"]
        assert chunks == []
        asked = client.post(
            "/v1/answers", json={"question": "What is it?", "document_ids": [document["id"]]}
        )
        assert_problem(asked, 422, "document_not_citable")


def test_a_noisy_150_dpi_scan_is_cleaned_and_read_in_its_script(ocr_client: httpx.Client) -> None:
    # A poor scan: 150 dpi, blurred, 1 % of its pixels salt or pepper. Unfiltered, Tesseract
    # read multicolumn's page at CER 50 %, and the LaTeX page was taken for Cyrillic (OSD's
    # script at confidence 0.14) and read in Russian at CER 80 %.
    latex = (CORPUS / "pdflatex-4-pages.pdf").read_bytes()
    sources = [(MULTICOLUMN, 1), (latex, 1)]
    sizes = []
    for data, number in sources:
        with pdfium.PdfDocument(data) as document:
            sizes.append(document[number - 1].get_size())
    scan = image_pdf(
        [noisy(render_page(data, number, 150), amount=0.01) for data, number in sources],
        sizes=sizes,
    )
    response = _upload(ocr_client, "noisy-scan.pdf", scan)
    assert response.status_code == 202, response.text
    document = wait_ready(ocr_client, response.json()["id"])
    assert document["status"] == "ready", document
    pages = _pages(ocr_client, document["id"])
    assert [p["text_source"] for p in pages] == ["ocr", "ocr"]
    texts = _page_texts(ocr_client, document["id"], 2)
    for text, (data, number) in zip(texts, sources, strict=True):
        rate = cer(text, truth(data, number))
        assert rate <= 0.05, (number, rate, text[:300])


def _typed_page_read(client: httpx.Client, name: str, words: str) -> str:
    """The text read from a scan of ``words`` typed in DejaVu Serif on an A4 page at 300 dpi."""
    if not SERIF.exists():
        pytest.skip("DejaVu Serif (fonts-dejavu-core) is not installed")
    response = _upload(client, name, image_pdf([typed_page(words)]))
    assert response.status_code == 202, response.text
    document = wait_ready(client, response.json()["id"])
    assert document["status"] == "ready", document
    (text,) = _page_texts(client, document["id"], 1)
    return text


def test_a_cyrillic_scan_is_read_in_russian_chosen_by_its_script(
    ocr_client: httpx.Client,
) -> None:
    # Read with the Latin-script languages (as a page whose script OSD is unsure of would be,
    # first), Russian comes out as Latin letters; OSD finds Cyrillic and Russian reads it.
    text = _typed_page_read(ocr_client, "russian-scan.pdf", RUSSIAN)
    assert cer(text, RUSSIAN) <= 0.02, text


def test_a_german_scan_keeps_its_umlauts_read_again_in_german(ocr_client: httpx.Client) -> None:
    # A Latin page is read in English first; this one's words are German, so it is read again
    # with German, which keeps the umlauts and the ß that English reads as other letters.
    text = _typed_page_read(ocr_client, "german-scan.pdf", GERMAN)
    assert cer(text, GERMAN) <= 0.02, text
    for word in ("Größe", "Bäume", "läßt", "erschöpft", "Straßen"):
        assert word in text, (word, text)
