"""Ingestion speed: a 117-page PDF and 1 MB of English text through the API, next to bare
pypdfium2 extraction of the same PDF; then, on a service of its own (so that its peak RSS is
theirs), a 300-page .docx and a 100,000-row .xlsx. Prints figures; asserts nothing.

    .venv/bin/python bench/ingest.py [--database-url URL] [--rounds N]

The service runs as `citegate serve` in its own process on a fresh database, so its peak RSS
(VmHWM) is the service's alone.
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import time
from pathlib import Path

import docx
import httpx
import pypdfium2 as pdfium
import xlsxwriter
from harness import peak_rss_mib, running

ROOT = Path(__file__).resolve().parents[1]
PDF = ROOT / "tests" / "fixtures" / "pdf" / "GeoTopo-komprimiert.pdf"
WORDS = (
    "the of and to in is was for on that with as by at from it an be this which are or have "
    "not were but had has its been more their can one all also other into two new first after "
    "market report system data model growth service customer value process results analysis"
).split()


def english_text(size: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    sentences: list[str] = []
    total = 0
    while total < size:
        words = [rng.choice(WORDS) for _ in range(rng.randint(6, 24))]
        sentence = " ".join(words).capitalize() + rng.choice([".", ".", ".", "?", "!"]) + " "
        if rng.random() < 0.1:
            sentence += "\n"
        sentences.append(sentence)
        total += len(sentence)
    return "".join(sentences)[:size]


def word_document(pages: int) -> bytes:
    """About ``pages`` pages of prose: a heading and five 100-word paragraphs a page."""
    document = docx.Document()
    text = english_text(pages * 3_300)
    for page in range(pages):
        document.add_heading(f"Section {page + 1}", level=2)
        for paragraph in range(5):
            start = (page * 5 + paragraph) * 640
            document.add_paragraph(text[start : start + 640])
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def workbook(rows: int) -> bytes:
    buffer = io.BytesIO()
    book = xlsxwriter.Workbook(buffer, {"in_memory": True})
    sheet = book.add_worksheet("Orders")
    sheet.write_row(0, 0, ["Order", "Customer", "Region", "Amount", "Status"])
    rng = random.Random(3)
    for row in range(1, rows + 1):
        sheet.write_row(
            row,
            0,
            [
                row,
                f"Customer {rng.randint(1, 5000)}",
                rng.choice(WORDS),
                rng.random() * 1000,
                rng.choice(["open", "paid", "late"]),
            ],
        )
    book.close()
    return buffer.getvalue()


def office_figures(database_url: str | None) -> None:
    document, book = word_document(300), workbook(100_000)
    with (
        running(database_url, None) as stack,
        httpx.Client(base_url=stack.citegate, headers=stack.headers, timeout=300) as http,
    ):
        timed_upload(http, "warmup.docx", word_document(2))
        docx_s = timed_upload(http, "report.docx", document)
        xlsx_s = timed_upload(http, "orders.xlsx", book)
        rss = peak_rss_mib(stack.pid)
    print(f"300-page .docx ({len(document) / 1e6:.1f} MB): {docx_s * 1000:.0f} ms (target < 3 s)")
    print(f"100,000-row .xlsx ({len(book) / 1e6:.1f} MB): {xlsx_s * 1000:.0f} ms (target < 10 s)")
    print(f"service peak RSS with both: {rss:.0f} MiB (target < 300 MiB)")


def bare_extraction(data: bytes) -> float:
    started = time.perf_counter()
    document = pdfium.PdfDocument(data)
    for page in document:
        page.get_textpage().get_text_range()
    document.close()
    return time.perf_counter() - started


def timed_upload(http: httpx.Client, name: str, data: bytes) -> float:
    started = time.perf_counter()
    response = http.post("/v1/documents/upload", files={"file": (name, data)})
    elapsed = time.perf_counter() - started
    assert response.status_code == 201, response.text
    http.delete(f"/v1/documents/{response.json()['id']}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--database-url", help="default: a new SQLite file")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    with (
        running(args.database_url, None) as stack,
        httpx.Client(base_url=stack.citegate, headers=stack.headers, timeout=120) as http,
    ):
        pdf = PDF.read_bytes()
        text = english_text(1_000_000).encode()
        timed_upload(http, "warmup.pdf", pdf)  # imports, first connections
        bare = [bare_extraction(pdf) for _ in range(args.rounds)]
        pdf_times = [timed_upload(http, "geotopo.pdf", pdf) for _ in range(args.rounds)]
        text_times = [timed_upload(http, "english.txt", text) for _ in range(args.rounds)]
        rss = peak_rss_mib(stack.pid)
        backend = stack.database

    bare_s, pdf_s, text_s = (statistics.median(t) for t in (bare, pdf_times, text_times))
    print(f"database: {backend}; median of {args.rounds} rounds")
    print(
        f"117-page PDF ({len(pdf) / 1e6:.1f} MB): bare pypdfium2 extraction {bare_s * 1000:.0f} ms"
    )
    print(
        f"117-page PDF through the API: {pdf_s * 1000:.0f} ms = {pdf_s / bare_s:.2f}x bare"
        " (target <= 1.5x)"
    )
    print(f"1 MB English text through the API: {text_s * 1000:.0f} ms (target < 500 ms)")
    print(f"service peak RSS: {rss:.0f} MiB")
    office_figures(args.database_url)


if __name__ == "__main__":
    main()
