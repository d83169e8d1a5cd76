"""Ingestion speed: a 117-page PDF and 1 MB of English text through the API, next to bare
pypdfium2 extraction of the same PDF. Prints figures; asserts nothing.

    .venv/bin/python bench/ingest.py [--database-url URL] [--rounds N]

The service runs as `citegate serve` in its own process on a fresh database, so its peak RSS
(VmHWM) is the service's alone.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pypdfium2 as pdfium

ROOT = Path(__file__).resolve().parents[1]
PDF = ROOT.parent / "shared" / "corpus" / "pdf" / "GeoTopo-komprimiert.pdf"
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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


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

    workdir = Path(tempfile.mkdtemp(prefix="citegate-bench-"))
    env = dict(os.environ, CITEGATE_LOG_LEVEL="WARNING")
    env["CITEGATE_DATABASE_URL"] = args.database_url or f"sqlite+aiosqlite:///{workdir}/b.db"
    port = free_port()
    citegate = Path(sys.executable).parent / "citegate"
    server = subprocess.Popen([str(citegate), "serve", "--port", str(port)], env=env)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as http:
            for _ in range(300):
                try:
                    http.get("/healthz")
                    break
                except httpx.TransportError:
                    time.sleep(0.1)
            pdf = PDF.read_bytes()
            text = english_text(1_000_000).encode()
            timed_upload(http, "warmup.pdf", pdf)  # imports, first connections
            bare = [bare_extraction(pdf) for _ in range(args.rounds)]
            pdf_times = [timed_upload(http, "geotopo.pdf", pdf) for _ in range(args.rounds)]
            text_times = [timed_upload(http, "english.txt", text) for _ in range(args.rounds)]
            rss = peak_rss_mib(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)

    backend = env["CITEGATE_DATABASE_URL"].split(":", 1)[0]
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
