"""The local engine's cost per answer, in process: the thread's CPU time (which other work on a
shared machine moves less) and wall-clock time of ``build_answer`` (ranking, selection, quoting)
over the Amazon letter's pages (parsed once, as the engine's PDF cache keeps them) and a plain
text with a table, for a fixed set of questions: warm (the documents' words remembered from
earlier questions, as when questions follow one another about the same documents) and cold
(every answer reads them anew). Prints figures; asserts nothing.

    .venv/bin/python bench/engine.py [--rounds 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pypdfium2

from app.local_engine import bm25
from app.local_engine.answering import build_answer
from app.local_engine.documents import RequestDocument, chunk_pdf_pages, chunk_plain_text

ROOT = Path(__file__).resolve().parent.parent
LETTER = ROOT / "tests" / "fixtures" / "anthropic" / "amazon_2023_letter.pdf"
TABLE = (
    "# Quarterly figures\n\nThe table below gives revenue and margin by quarter.\n\n"
    "| Quarter | Revenue | Margin |\n|---|---|---|\n| Q1 | $120M | 12% |\n| Q2 | $135M | 14% |\n"
    "| Q3 | $150M | 15% |\n| Q4 | $171M | 17% |\n\nRevenue grew every quarter of the year.\n"
)
QUESTIONS = (
    "What was Amazon's total revenue in 2023?",
    "How fast is Kuiper?",
    "What did AWS launch for generative AI, and how did advertising grow?",
    "How many items arrived same or next day?",
    "What was the revenue in Q3?",
    "What is Project Kuiper?",
    "How much free cash flow did Amazon have?",
    "What is the margin of Q4?",
)


def documents() -> list[RequestDocument]:
    pdf = pypdfium2.PdfDocument(LETTER)
    pages = chunk_pdf_pages([page.get_textpage().get_text_range() for page in pdf])
    text = chunk_plain_text(TABLE)
    return [
        RequestDocument(0, "Amazon 2023 letter", "pdf", True, pages.chunks, pages.pages),
        RequestDocument(1, "Figures", "text", True, text, (TABLE,)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    chunked = documents()
    for question in QUESTIONS:  # regular expressions compiled, caches warm
        build_answer(question, chunked)
    chunks = sum(len(document.chunks) for document in chunked)
    print(f"answers: {args.rounds * len(QUESTIONS)} each way, chunks per request: {chunks}")
    forget = getattr(bm25, "tokens", None)  # the remembered words, where there are any
    for way in ("warm", "cold"):
        wall, cpu = [], []
        for _ in range(args.rounds):
            for question in QUESTIONS:
                if way == "cold" and forget is not None:
                    forget.cache_clear()
                started, started_cpu = time.perf_counter(), time.thread_time()
                build_answer(question, chunked)
                cpu.append((time.thread_time() - started_cpu) * 1000)
                wall.append((time.perf_counter() - started) * 1000)
        for name, times in (("CPU", cpu), ("wall", wall)):
            times.sort()
            p95 = times[int(0.95 * (len(times) - 1))]
            print(
                f"{way}, per answer, {name}: mean {statistics.fmean(times):.2f} ms, "
                f"p50 {statistics.median(times):.2f} ms, p95 {p95:.2f} ms"
            )


if __name__ == "__main__":
    main()
