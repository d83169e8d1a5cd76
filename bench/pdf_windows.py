"""Long and large PDFs: a 2,000-page PDF stored through the API; the page windows of a
1,000-page PDF (of text, and of the 117-page sample's pages) made as a question makes them;
and the service's peak RSS while a large PDF (200 MB by default) is uploaded, against its
size. Prints figures; asserts nothing.

    .venv/bin/python bench/pdf_windows.py [--database-url URL] [--large-mb N]

The PDFs are written here, page by page (a line of text each) and, for the large one, with an
unreferenced stream of random bytes that no compression shrinks. The service runs as
`citegate serve` in its own process on a fresh database, so its peak RSS (VmHWM) is its own.
"""

from __future__ import annotations

import argparse
import io
import os
import time

import httpx
import pypdfium2 as pdfium
from harness import ROOT, peak_rss_mib, running

from app.documents.kinds import PDF, StoredParts

SAMPLE = ROOT / "tests" / "fixtures" / "pdf" / "GeoTopo-komprimiert.pdf"  # 117 pages
PAGE_LIMIT = 600  # the default CITEGATE_MAX_PDF_PAGES_PER_DOCUMENT
REQUEST_BYTES = 32_000_000


def text_pdf(pages: int, padding: int = 0) -> bytes:
    """A PDF of ``pages`` pages with a sentence each, and ``padding`` random bytes beside."""
    out = io.BytesIO()
    offsets: list[int] = []

    def obj(body: bytes) -> None:
        offsets.append(out.tell())
        out.write(f"{len(offsets)} 0 obj\n".encode() + body + b"\nendobj\n")

    out.write(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    first_page = 4
    kids = " ".join(f"{first_page + 2 * n} 0 R" for n in range(pages))
    obj(b"<< /Type /Catalog /Pages 2 0 R >>")
    obj(f"<< /Type /Pages /Kids [{kids}] /Count {pages} >>".encode())
    obj(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for n in range(1, pages + 1):
        obj(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            f"/Resources << /Font << /F1 3 0 R >> >> /Contents {len(offsets) + 2} 0 R >>".encode()
        )
        text = f"BT /F1 12 Tf 72 720 Td (Page {n} reports item {n * 7919 % 100003}.) Tj ET"
        obj(f"<< /Length {len(text)} >>\nstream\n{text}\nendstream".encode())
    if padding:
        obj(f"<< /Length {padding} >>\nstream\n".encode() + os.urandom(padding) + b"\nendstream")
    xref = out.tell()
    out.write(f"xref\n0 {len(offsets) + 1}\n0000000000 65535 f \n".encode())
    out.write(b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets))
    out.write(f"trailer\n<< /Size {len(offsets) + 1} /Root 1 0 R >>\n".encode())
    out.write(f"startxref\n{xref}\n%%EOF\n".encode())
    return out.getvalue()


def sample_pdf(pages: int) -> bytes:
    """The 117-page sample's pages over and over: pages with fonts, figures and formulas."""
    sample, made = pdfium.PdfDocument(SAMPLE), pdfium.PdfDocument.new()
    while len(made) < pages:
        made.import_pages(sample, list(range(min(len(sample), pages - len(made)))))
    buffer = io.BytesIO()
    made.save(buffer)
    made.close()
    sample.close()
    return buffer.getvalue()


def stored_in(http: httpx.Client, data: bytes, name: str) -> float:
    started = time.perf_counter()
    response = http.post("/v1/documents/upload", files={"file": (name, data, "application/pdf")})
    elapsed = time.perf_counter() - started
    assert response.status_code == 201, response.text
    http.delete(f"/v1/documents/{response.json()['id']}")
    return elapsed


def windows_of(data: bytes, pages: int) -> tuple[float, int, int]:
    """Seconds to make the windows (as loading a question's documents does), their count and
    their bytes as sent (base64)."""
    started = time.perf_counter()
    windows = PDF.page_windows(pages, len(data), PAGE_LIMIT, REQUEST_BYTES)
    parts = PDF.sent_parts(StoredParts("", [], data), windows)
    elapsed = time.perf_counter() - started
    return elapsed, len(parts), sum(len(part.source["data"]) for part in parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--database-url", help="default: a new SQLite file")
    parser.add_argument("--large-mb", type=int, default=200, help="size of the large PDF")
    args = parser.parse_args()

    for what, thousand in (("of text", text_pdf(1_000)), ("of the sample's", sample_pdf(1_000))):
        seconds, count, sent = windows_of(thousand, 1_000)
        print(
            f"1,000 pages {what} ({len(thousand) / 1e6:.1f} MB): {count} windows of at most "
            f"{PAGE_LIMIT} pages made in {seconds * 1000:.0f} ms (target < 1 s), "
            f"{sent / 1e6:.1f} MB as sent"
        )

    two_thousand = text_pdf(2_000)
    large = text_pdf(10, padding=args.large_mb * 1_000_000)
    with (
        running(args.database_url, None) as stack,
        httpx.Client(base_url=stack.citegate, headers=stack.headers, timeout=600) as http,
    ):
        stored_in(http, text_pdf(5), "warmup.pdf")  # imports, first connections
        long_s = stored_in(http, two_thousand, "long.pdf")
        idle = peak_rss_mib(stack.pid)
        large_s = stored_in(http, large, "large.pdf")
        peak = peak_rss_mib(stack.pid)
        backend = stack.database
    print(f"database: {backend}")
    print(
        f"2,000-page PDF ({len(two_thousand) / 1e6:.1f} MB) stored in {long_s * 1000:.0f} ms "
        "(target < 10 s)"
    )
    print(
        f"{len(large) / 1e6:.0f} MB PDF stored in {large_s * 1000:.0f} ms; service peak RSS "
        f"{idle:.0f} MiB before it, {peak:.0f} MiB with it: "
        f"{(peak - idle) * 2**20 / len(large):.2f}x its size"
    )


if __name__ == "__main__":
    main()
