"""What `pages_read` costs the routes that show documents: `citegate serve` with N PDFs of P
pages each (windows of the 117-page sample, all read from their text layer), then
`listDocuments` (100 a page) and `getDocument` timed over HTTP, p50 and p95. With
``--baseline DIR`` the same is measured on another checkout's code (one without `pages_read`,
say ``/work/main``) on a database of its own, for the ratio. Prints figures; asserts nothing.

    .venv/bin/python bench/pages_read.py [--database-url URL] [--documents N] [--pages P]
        [--requests R] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import httpx
from harness import ROOT, Stack, running

sys.path.insert(0, str(ROOT))

from app.documents.pdf import split_pdf

SAMPLE = ROOT / "tests" / "fixtures" / "pdf" / "GeoTopo-komprimiert.pdf"


def _p95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=20)[-1]


def _timed(client: httpx.Client, path: str, params: dict[str, int], requests: int) -> str:
    client.get(path, params=params).raise_for_status()  # warm
    samples = []
    for _ in range(requests):
        start = time.perf_counter()
        client.get(path, params=params).raise_for_status()
        samples.append((time.perf_counter() - start) * 1000)
    return f"p50 {statistics.median(samples):.2f} ms, p95 {_p95(samples):.2f} ms"


def measure(stack: Stack, pdfs: list[bytes], requests: int) -> None:
    with httpx.Client(base_url=stack.citegate, headers=stack.headers, timeout=120) as client:
        ids = []
        for number, data in enumerate(pdfs):
            response = client.post(
                "/v1/documents/upload", files={"file": (f"window-{number}.pdf", data)}
            )
            response.raise_for_status()
            ids.append(response.json()["id"])
        shown = client.get("/v1/documents", params={"limit": 100}).json()["data"]
        print(f"  pages_read shown: {'pages_read' in shown[0]}")
        listed = _timed(client, "/v1/documents", {"limit": 100}, requests)
        print(f"  listDocuments, {len(shown)} a page: {listed}")
        print(f"  getDocument: {_timed(client, f'/v1/documents/{ids[-1]}', {}, requests)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--documents", type=int, default=100)
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--baseline", type=Path, default=None)
    args = parser.parse_args()
    data = SAMPLE.read_bytes()
    windows = [(first, first + args.pages - 1) for first in range(1, args.documents + 1)]
    pdfs = split_pdf(data, windows)
    roots = [("this checkout", ROOT)]
    if args.baseline is not None:
        roots.append((f"baseline {args.baseline}", args.baseline))
    for name, root in roots:
        url = args.database_url
        if url is not None and root != ROOT:  # a database of its own, its schema that code's
            url += "_baseline"
        print(f"{name}: {args.documents} PDFs of {args.pages} pages")
        with running(url, None, root=root, serve_args=("--workers", "1")) as stack:
            measure(stack, pdfs, args.requests)


if __name__ == "__main__":
    main()
