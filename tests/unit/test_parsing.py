"""Sniffing, text, PDF and content parsing: pure functions over bytes."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import anyio
import pypdfium2
import pytest
from anyio import to_thread

from app.documents import pdf, service
from app.documents.kinds import CONTENT, PDF, TEXT, identify
from app.documents.kinds.base import ParseOptions
from app.documents.kinds.html import HtmlKind
from app.documents.pdf import PdfError, extract_pdf_text
from app.errors import InvalidDocument, UnsupportedMediaType
from tests.fixture_files import CORPUS, FIXTURES


def test_sniffing_trusts_bytes_only() -> None:
    assert identify(b"%PDF-1.4 ...") is PDF
    assert identify(b"\n\n%PDF-1.4 ...") is PDF  # readers allow junk before the header
    assert identify("plain text, ünïcödé".encode()) is TEXT
    assert identify(b"%PDF-1.4 ...", declared=TEXT) is PDF  # a declared type is only a hint
    with pytest.raises(UnsupportedMediaType):
        identify(b"\xff\xd8\xff\xe0 jpeg")
    with pytest.raises(InvalidDocument) as empty:
        identify(b"")
    assert empty.value.code == "empty_document"


def test_bytes_declared_as_a_pdf_must_be_one() -> None:
    with pytest.raises(InvalidDocument) as error:
        identify(b"plain text", declared=PDF)
    assert error.value.code == "pdf_invalid"


def test_utf16_text_is_decoded_and_bad_bytes_name_its_encoding() -> None:
    data = "Hello.".encode("utf-16")
    assert identify(data) is TEXT
    parsed = TEXT.parse(data)
    assert (parsed.text, parsed.media_type) == ("Hello.", "text/plain; charset=utf-16")
    with pytest.raises(InvalidDocument) as error:
        TEXT.parse(data + b"\x00\xd8")  # a lone surrogate
    assert error.value.code == "text_not_utf8"
    assert "utf-16" in error.value.detail


def test_text_keeps_crlf_and_drops_bom() -> None:
    parsed = TEXT.parse(b"\xef\xbb\xbfOne.\r\nTwo.\r\n")
    assert parsed.text == "One.\r\nTwo.\r\n"
    assert [parsed.text[c.start : c.end] for c in parsed.chunks] == ["One.\r\n", "Two.\r\n"]


def test_text_that_is_not_utf8_names_the_byte() -> None:
    with pytest.raises(InvalidDocument) as error:
        TEXT.parse(b"ok \xe9t\xe9")
    assert error.value.code == "text_not_utf8"
    assert "byte 3" in error.value.detail


def test_content_blocks_are_chunks() -> None:
    parsed = CONTENT.parse(CONTENT.stored_form(["A.", "B. C."]))
    assert parsed.text == "A.B. C."
    assert [(c.start, c.end, c.block_index) for c in parsed.chunks] == [(0, 2, 0), (2, 7, 1)]
    assert CONTENT.stored_form(["é"]) == '[{"type":"text","text":"é"}]'.encode()


def test_pdfium_text_holds_the_passages_the_api_cited() -> None:
    extracted = extract_pdf_text((FIXTURES / "amazon_2023_letter.pdf").read_bytes())
    assert extracted.parser == "pdfium" and len(extracted.pages) == 11
    assert (
        "In 2023, Amazon’s total revenue grew 12% year-over-year (“YoY”) from $514B to $575B. "
        in (extracted.pages[0])
    )
    assert "North\r\nAmerica revenue increased 12% YoY" in extracted.pages[0]


def test_pdf_chunks_stay_inside_their_page() -> None:
    parsed = PDF.parse((CORPUS / "pdflatex-4-pages.pdf").read_bytes())
    assert parsed.page_count == 4
    page_starts: dict[int | None, int] = {}
    for chunk in parsed.chunks:
        page_starts.setdefault(chunk.page_number, chunk.start)
    pages = extract_pdf_text((CORPUS / "pdflatex-4-pages.pdf").read_bytes()).pages
    offset = 0
    for number, text in enumerate(pages, start=1):
        assert page_starts[number] == offset
        inside = [c for c in parsed.chunks if c.page_number == number]
        assert inside[-1].end == offset + len(text)
        offset += len(text)


def test_encrypted_pdf() -> None:
    with pytest.raises(PdfError) as error:
        extract_pdf_text((CORPUS / "libreoffice-writer-password.pdf").read_bytes())
    assert error.value.code == "pdf_encrypted"


def test_pypdf_reads_what_pdfium_refuses() -> None:
    """A file whose trailer lacks /Root: PDFium refuses it, pypdf finds the catalog."""
    pdf = _pdf_without_root(b"Hello from the second parser.")
    with pytest.raises(pypdfium2.PdfiumError):
        pypdfium2.PdfDocument(pdf)
    extracted = extract_pdf_text(pdf)
    assert extracted.parser == "pypdf"
    assert extracted.pages == ["Hello from the second parser."]
    parsed = PDF.parse(pdf)
    assert parsed.citable and parsed.warnings == ["pdf_text_from_fallback_parser"]


def test_garbage_after_a_pdf_header_is_invalid() -> None:
    with pytest.raises(PdfError) as error:
        extract_pdf_text(b"%PDF-1.7\nnot a pdf at all")
    assert error.value.code == "pdf_invalid"


def _pdf_without_root(text: bytes) -> bytes:
    stream = b"BT /F1 12 Tf 72 712 Td (" + text + b") Tj ET"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = b"%PDF-1.4\n"
    for number, body in enumerate(objects, start=1):
        out += str(number).encode() + b" 0 obj\n" + body + b"\nendobj\n"
    return out + b"trailer\n<< /Size 6 >>\nstartxref\n999999\n%%EOF\n"


# Four threads extracting two real PDFs over and over, each result checked against the same
# extraction made alone. In a process of its own: without the lock, PDFium corrupts memory
# ("Failed to load page", then a double free or a segmentation fault).
_RACE = """
import sys, threading
from pathlib import Path
from app.documents.pdf import extract_pdf_text
pdfs = [Path(name).read_bytes() for name in sys.argv[1:]]
alone = [extract_pdf_text(data) for data in pdfs]
failures = []
def extract(n):
    try:
        for _ in range(40):
            if extract_pdf_text(pdfs[n % 2]) != alone[n % 2]:
                failures.append("different text")
    except Exception as exc:
        failures.append(repr(exc))
threads = [threading.Thread(target=extract, args=(n,)) for n in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(failures)
sys.exit(1 if failures else 0)
"""


def test_extraction_in_several_threads_at_once() -> None:
    pdfs = [FIXTURES / "amazon_2023_letter.pdf", CORPUS / "multicolumn.pdf"]
    run = subprocess.run(
        [sys.executable, "-c", _RACE, *map(str, pdfs)],
        cwd=Path(__file__).parents[2],  # where `app` is
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, (run.returncode, run.stdout, run.stderr[-2000:])


def test_pdfs_waiting_for_pdfium_leave_the_worker_threads_free() -> None:
    """More PDF uploads than worker threads, all waiting for PDFium: other work that needs a
    worker thread (hashing, base64, the local engine) still gets one."""
    data = (CORPUS / "multicolumn.pdf").read_bytes()
    alone = extract_pdf_text(data)

    async def crowd() -> None:
        threads = to_thread.current_default_thread_limiter().total_tokens
        with pdf.PDFIUM_LOCK:  # PDFium busy: every PDF parse waits
            parses = [
                asyncio.create_task(service.parse_off_loop(data, PDF))
                for _ in range(int(threads) + 5)
            ]
            await asyncio.sleep(0.1)  # let every parse start waiting
            with anyio.fail_after(30):
                assert await to_thread.run_sync(lambda: "a worker thread") == "a worker thread"
        for parsed in await asyncio.gather(*parses):
            assert parsed.text == "".join(alone.pages)

    asyncio.run(crowd())


HTML = HtmlKind()


def _page(meta: str, body: str) -> str:
    return f"<!DOCTYPE html><html><head>{meta}</head><body><p>{body}</p></body></html>"


CAFE = "Caf\u00e9 cr\u00e8me \u2013 \u20ac3."


@pytest.mark.parametrize(
    ("data", "text", "encoding", "warnings"),
    [
        # A BOM names the encoding, whatever the <meta> says.
        (
            b"\xef\xbb\xbf" + _page("<meta charset='windows-1252'>", CAFE).encode(),
            CAFE,
            "utf-8",
            ["html_meta_charset_ignored"],
        ),
        (
            _page('<meta charset="utf-8">', CAFE).encode("utf-16"),
            CAFE,
            "utf-16",
            ["html_meta_charset_ignored"],
        ),
        (_page('<meta charset="UTF-16">', CAFE).encode("utf-16"), CAFE, "utf-16", []),
        (b"\xef\xbb\xbf" + _page("<meta charset=utf8>", CAFE).encode(), CAFE, "utf-8", []),
        # Valid UTF-8 under a <meta> that would read it otherwise, or not at all.
        (
            _page("<meta charset='iso-8859-1'>", CAFE).encode(),
            CAFE,
            "utf-8",
            ["html_meta_charset_ignored"],
        ),
        (
            _page(
                '<meta http-equiv="Content-Type" content="text/html; charset=shift_jis">', CAFE
            ).encode(),
            CAFE,
            "utf-8",
            ["html_meta_charset_ignored"],
        ),
        (
            _page("<meta charset='x-unheard-of'>", CAFE).encode(),
            CAFE,
            "utf-8",
            ["html_meta_charset_ignored"],
        ),
        (
            _page("<meta charset='utf-16'>", "Plain.").encode(),
            "Plain.",
            "utf-8",
            ["html_meta_charset_ignored"],
        ),
        # Bytes both encodings read alike keep the page's word; bytes that are not UTF-8 are
        # read as the page says.
        (_page("<meta charset='windows-1252'>", "Plain.").encode(), "Plain.", "windows-1252", []),
        (_page("<meta charset='windows-1252'>", CAFE).encode("cp1252"), CAFE, "windows-1252", []),
        (
            _page("<meta charset='shift_jis'>", "\u65e5\u672c\u8a9e\u3002").encode("shift_jis"),
            "\u65e5\u672c\u8a9e\u3002",
            "shift_jis",
            [],
        ),
        (_page("", CAFE).encode(), CAFE, "utf-8", []),
    ],
    ids=[
        "utf-8 BOM, meta windows-1252",
        "utf-16 BOM, meta utf-8",
        "utf-16 BOM, meta UTF-16",
        "utf-8 BOM, meta utf8",
        "utf-8, meta iso-8859-1",
        "utf-8, http-equiv shift_jis",
        "utf-8, meta unknown",
        "ascii, meta utf-16",
        "ascii, meta windows-1252",
        "windows-1252, meta windows-1252",
        "shift_jis, meta shift_jis",
        "utf-8, no meta",
    ],
)
def test_an_html_page_is_read_in_the_encoding_its_bytes_prove(
    data: bytes, text: str, encoding: str, warnings: list[str]
) -> None:
    assert isinstance(identify(data), HtmlKind)
    parsed = HTML.parse(data)
    assert (parsed.text, parsed.warnings) == (text + "\n\n", warnings)
    media_type = "text/html" if encoding == "utf-8" else f"text/html; charset={encoding}"
    assert (parsed.media_type or "text/html") == media_type


def test_a_declared_charset_is_taken_over_the_meta_and_the_bytes() -> None:
    data = _page("<meta charset='utf-8'>", CAFE).encode()
    parsed = HTML.parse(data, ParseOptions(charset="windows-1252"))
    assert parsed.text == data.decode("cp1252").split("<p>")[1].split("</p>")[0] + "\n\n"
    assert (parsed.media_type, parsed.warnings) == ("text/html; charset=windows-1252", [])


@pytest.mark.parametrize("meta", ["windows-1252", "x-unheard-of"])
def test_an_html_page_in_no_encoding_is_refused(meta: str) -> None:
    data = _page(f"<meta charset='{meta}'>", "ok").encode() + b"\x81\x8d\x8f\x90\x9d"
    with pytest.raises(InvalidDocument) as error:
        HTML.parse(data)
    assert error.value.code == "text_not_utf8"


def test_a_long_pdf_is_read_as_its_pages_are_alone_from_its_bytes_or_its_file() -> None:
    """PDFium's document is opened again every ``PAGES_OPEN`` pages (it keeps what it read of
    the pages until it is closed); the text is the same, page for page, read from the bytes or
    from the file (as an OCR job reads it)."""
    path = CORPUS / "GeoTopo-komprimiert.pdf"
    data = path.read_bytes()
    from_bytes, from_file = extract_pdf_text(data), extract_pdf_text(path)
    assert from_bytes == from_file
    assert len(from_bytes.pages) > 2 * pdf.PAGES_OPEN
    with pypdfium2.PdfDocument(data) as document:
        for index in (0, pdf.PAGES_OPEN - 1, pdf.PAGES_OPEN, len(document) - 1):
            page = document[index]
            assert from_bytes.pages[index] == pdf.read_page(document, page)[1].text, index
            page.close()
    assert PDF.parse(path) == PDF.parse(data)
