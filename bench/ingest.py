"""Ingestion speed: a 117-page PDF and 1 MB of English text through the API, next to bare
pypdfium2 extraction of the same PDF. Prints figures; asserts nothing.

    .venv/bin/python bench/ingest.py [--database-url URL] [--rounds N]

The service runs as `citegate serve` in its own process on a fresh database, so its peak RSS
(VmHWM) is the service's alone.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

import httpx
import pypdfium2 as pdfium
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


if __name__ == "__main__":
    main()
