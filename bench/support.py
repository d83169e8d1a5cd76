"""The lexical support check's cost: an answer of 20 citations, checked as the answer path
checks them, timed in wall-clock time and in the thread's CPU time (which other work on a shared
machine moves less) (each citation against its segment, with the segment's other citations). Prints
figures; asserts nothing.

    .venv/bin/python bench/support.py [--answers 500] [--citations 20]

The answers are made of the Amazon letter's sentences (tests/fixtures): each segment is two
neighbouring sentences with a figure changed in one, cited by both, so that every check walks
its numbers, negations, names and content words, and splits the segment by citation.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.support import lexical
from app.support.lexical import check_support
from tests.support_perturbations import document_sentences


def answer(sentences: list[str], citations: int, rng: random.Random) -> list[tuple[str, list[str]]]:
    """Segments (claim, cited texts) holding ``citations`` citations in all."""
    segments = []
    for _ in range(citations // 2):
        at = rng.randrange(len(sentences) - 1)
        first, second = sentences[at], sentences[at + 1]
        claim = re.sub(r"\d+", lambda m: str(int(m.group()) + 1), first, count=1) + " " + second
        segments.append((claim, [first, second]))
    return segments


def check_answer(segments: list[tuple[str, list[str]]]) -> int:
    checked = 0
    for claim, cited in segments:
        for i, text in enumerate(cited):
            check_support(claim, text, "en", others=cited[:i] + cited[i + 1 :])
            checked += 1
    return checked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answers", type=int, default=500)
    parser.add_argument("--citations", type=int, default=20)
    args = parser.parse_args()
    sentences = [s for document in document_sentences()[10:] for s in document]
    rng = random.Random(7)
    answers = [answer(sentences, args.citations, rng) for _ in range(args.answers)]
    check_answer(answers[0])  # stemmers made, regular expressions compiled
    wall, cpu = [], []
    for segments in answers:
        lexical.clear_cache()  # each answer's texts are new to it
        started, started_cpu = time.perf_counter(), time.thread_time()
        check_answer(segments)
        cpu.append((time.thread_time() - started_cpu) * 1000)
        wall.append((time.perf_counter() - started) * 1000)
    print(f"answers: {len(wall)}, citations per answer: {args.citations}")
    for name, times in (("wall", wall), ("CPU", cpu)):
        times.sort()
        p95 = times[int(0.95 * (len(times) - 1))]
        print(
            f"per answer, {name}: mean {statistics.fmean(times):.2f} ms, "
            f"p50 {statistics.median(times):.2f} ms, p95 {p95:.2f} ms, max {times[-1]:.2f} ms"
        )


if __name__ == "__main__":
    main()
