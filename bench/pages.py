"""Page pictures and the share page: figures for issue 19.

Renders pages of the 117-page sample at 1,000 px (each page once, so nothing is cached but the
opened document), then the same pages again from the cache; and prints the share page's size
before images (HTML, JavaScript and CSS). Run: ``.venv/bin/python -m bench.pages``.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from app.documents.pages import PdfPages
from app.sharing.viewer import render_answer

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "tests" / "fixtures" / "pdf" / "GeoTopo-komprimiert.pdf"


def _p95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=20)[-1]


def main() -> None:
    data = SAMPLE.read_bytes()
    pages = PdfPages()
    pages.image("sample", data, 1, 1000)  # opens the document
    rendered, cached = [], []
    for number in range(2, 118):
        start = time.perf_counter()
        pages.image("sample", None, number, 1000)
        rendered.append((time.perf_counter() - start) * 1000)
    for number in range(2, 118):
        start = time.perf_counter()
        pages.image("sample", None, number, 1000)
        cached.append((time.perf_counter() - start) * 1000)
    print(
        f"render at 1000 px, {len(rendered)} pages: p50 {statistics.median(rendered):.1f} ms, "
        f"p95 {_p95(rendered):.1f} ms, max {max(rendered):.1f} ms"
    )
    print(f"cached: p50 {statistics.median(cached):.3f} ms, p95 {_p95(cached):.3f} ms")
    start = time.perf_counter()
    PdfPages().image("cold", data, 50, 1000)
    cold = (time.perf_counter() - start) * 1000
    print(f"first page of a PDF not open yet (open + render): {cold:.1f} ms")

    answer = {
        "question": "What is a topological space?",
        "segments": [
            {
                "text": "A topological space is a set with a family of open sets. " * 4,
                "citations": [
                    {"document_id": None, "cited_text": "x" * 300, "span": None, "verified": True}
                ]
                * 10,
            }
        ],
    }
    html = render_answer(answer, {}, "t" * 43).encode()
    assets = sum(
        len((ROOT / "app" / "sharing" / "assets" / name).read_bytes())
        for name in ("viewer.js", "viewer.css")
    )
    print(
        f"share page with 10 citations: {len(html)} B HTML + {assets} B JS and CSS = "
        f"{(len(html) + assets) / 1024:.1f} KB before images"
    )


if __name__ == "__main__":
    main()
