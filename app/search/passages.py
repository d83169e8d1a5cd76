"""From the best-ranked chunks to passages: widened, merged, capped. Pure: plain data in and out.

A hit is a chunk the index ranked. Its passage is the hit with up to ``window`` chunks on each
side, never crossing into another page (a passage is cited by page, so it stays on one).
Passages of one document that overlap or touch become one, scored by their best hit; then each
document keeps its best ``per_document`` passages, so that one long document cannot take every
slot, and the best ``limit`` are kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Passage:
    """A run of adjacent chunks of one document, on one page; its text is theirs joined."""

    document_id: str
    title: str | None
    text: str
    start_char: int
    end_char: int
    start_page: int | None
    end_page: int | None
    chunk_indices: list[int]
    score: float
    chunk_texts: list[str]  # one per chunk index, in order (internal; not in the API body)
    chunk_locators: list[dict[str, Any] | None] = field(default_factory=list)  # likewise


@dataclass(frozen=True, slots=True)
class Hit:
    """A chunk the index ranked: a higher score is a better match."""

    document_id: str
    chunk_index: int
    page_number: int | None
    score: float


@dataclass(frozen=True, slots=True)
class StoredChunk:
    document_id: str
    chunk_index: int
    text: str
    start_char: int
    end_char: int
    page_number: int | None
    locator: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ChunkRange:
    """Chunks ``first`` to ``last`` (inclusive) of a document."""

    document_id: str
    first: int
    last: int


@dataclass(frozen=True, slots=True)
class Window:
    """Adjacent chunks of one document on one page, and the best score of the hits in them."""

    document_id: str
    chunks: tuple[StoredChunk, ...]
    score: float


def candidate_hits(hits: Sequence[Hit], limit: int, per_document: int, window: int) -> list[Hit]:
    """The hits worth widening, best first: no more per document than could end up in its
    ``per_document`` passages, and no more in all than could fill ``limit`` of them."""
    most_per_document = per_document * (2 * window + 1)
    kept: list[Hit] = []
    counts: dict[str, int] = {}
    for hit in sorted(hits, key=_rank):
        if counts.get(hit.document_id, 0) < most_per_document:
            counts[hit.document_id] = counts.get(hit.document_id, 0) + 1
            kept.append(hit)
    return kept[: limit * (2 * window + 1)]


def ranges_to_read(hits: Iterable[Hit], window: int) -> list[ChunkRange]:
    """The chunk ranges that hold every hit's neighbourhood, merged where they overlap."""
    by_document: dict[str, list[tuple[int, int]]] = {}
    for hit in hits:
        first = max(0, hit.chunk_index - window)
        by_document.setdefault(hit.document_id, []).append((first, hit.chunk_index + window))
    ranges: list[ChunkRange] = []
    for document_id, spans in sorted(by_document.items()):
        spans.sort()
        first, last = spans[0]
        for start, end in spans[1:]:
            if start <= last + 1:
                last = max(last, end)
            else:
                ranges.append(ChunkRange(document_id, first, last))
                first, last = start, end
        ranges.append(ChunkRange(document_id, first, last))
    return ranges


def build_windows(
    hits: Sequence[Hit],
    chunks: Mapping[tuple[str, int], StoredChunk],
    *,
    limit: int,
    window: int,
    per_document: int,
) -> list[Window]:
    """The best passages, best first. ``chunks`` holds at least every hit's neighbourhood;
    a hit whose chunk is missing (its document was deleted meanwhile) is left out."""
    widened: dict[str, list[tuple[int, int, float, int | None]]] = {}
    for hit in hits:
        if (hit.document_id, hit.chunk_index) not in chunks:
            continue
        first = last = hit.chunk_index
        while first > hit.chunk_index - window and _same_page(chunks, hit, first - 1):
            first -= 1
        while last < hit.chunk_index + window and _same_page(chunks, hit, last + 1):
            last += 1
        widened.setdefault(hit.document_id, []).append((first, last, hit.score, hit.page_number))
    windows: list[Window] = []
    for document_id, spans in widened.items():
        merged = _merge(spans)
        merged.sort(key=lambda span: (-span[2], span[0]))
        for first, last, score in merged[:per_document]:
            run = tuple(chunks[(document_id, index)] for index in range(first, last + 1))
            windows.append(Window(document_id, run, score))
    windows.sort(key=lambda w: (-w.score, w.document_id, w.chunks[0].chunk_index))
    return windows[:limit]


def _same_page(chunks: Mapping[tuple[str, int], StoredChunk], hit: Hit, index: int) -> bool:
    neighbour = chunks.get((hit.document_id, index))
    return neighbour is not None and neighbour.page_number == hit.page_number


def _merge(
    spans: list[tuple[int, int, float, int | None]],
) -> list[tuple[int, int, float]]:
    """Spans that overlap or touch, on the same page, as one span with the best score."""
    spans.sort(key=lambda span: (span[0], span[1]))
    merged: list[tuple[int, int, float, int | None]] = []
    for first, last, score, page in spans:
        if merged and first <= merged[-1][1] + 1 and page == merged[-1][3]:
            before = merged[-1]
            merged[-1] = (before[0], max(before[1], last), max(before[2], score), page)
        else:
            merged.append((first, last, score, page))
    return [(first, last, score) for first, last, score, _ in merged]


def _rank(hit: Hit) -> tuple[float, str, int]:
    return (-hit.score, hit.document_id, hit.chunk_index)
