"""Extractive answers: rank the documents' chunks against the question, quote the best ones, and
cite each quote exactly.

Documents and search results are ranked together, as one corpus: a search result is one more
kind of citable source, whose chunks are its text blocks.

Selection: every chunk is scored with BM25 against the question; the chunks that score at least
half of the best, at most three, are quoted in request order. Neighbouring chunks of one
document that match a common question word are merged into one citation (as the upstream merges
consecutive sentences); chunks that match different words answer different parts of the question
and keep a citation each ("The grass is green. " and "The sky is blue." for "What color is the
grass and sky?"). PDF sentences merge only within a page; the blocks of a content document or a
search result never merge.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from app.local_engine.bm25 import Bm25, tokenize
from app.local_engine.documents import Chunk, RequestDocument
from app.local_engine.tokens import CHARS_PER_TOKEN, estimate_tokens
from app.local_engine.wire import (
    CharLocation,
    Citation,
    ContentBlockLocation,
    PageLocation,
    SearchResultLocation,
    StopReason,
    TextBlock,
)

INTRO = "Based on the documents: "
NO_DOCUMENTS_ANSWER = "I can only answer from documents, and this request has none."
NOTHING_FOUND_ANSWER = "The documents do not say anything about that."
MAX_QUOTED_CHUNKS = 3
RELATIVE_FLOOR = 0.5

_WHITESPACE = re.compile(r"\s+")
_HYPHENATION = re.compile("[\u0002\ufffe]")


@dataclass(frozen=True, slots=True)
class ScoredChunk:
    """A chunk, its BM25 score and the question words it contains; ``order`` is its source's
    place among the request's documents and search results."""

    document: RequestDocument
    chunk: Chunk
    score: float
    terms: frozenset[str]
    order: int


@dataclass(frozen=True, slots=True)
class Passage:
    """Consecutive chunks of one document, quoted and cited together."""

    document: RequestDocument
    chunks: tuple[Chunk, ...]

    @property
    def cited_text(self) -> str:
        """The document text the passage covers: its chunks' text, in order."""
        return "".join(chunk.text for chunk in self.chunks)


@dataclass(frozen=True, slots=True)
class LimitedAnswer:
    """An answer cut at a stop sequence or at ``max_tokens``, and why it stopped."""

    content: list[TextBlock]
    stop_reason: StopReason
    stop_sequence: str | None
    output_tokens: int


def rank_chunks(question: str, documents: Sequence[RequestDocument]) -> list[ScoredChunk]:
    """The chunks that match the question at all, best first; ties go to request order."""
    triples = [
        (order, document, chunk)
        for order, document in enumerate(documents)
        for chunk in document.chunks
    ]
    if not triples:
        return []
    corpus = [tokenize(chunk.text) for _, _, chunk in triples]
    query = tokenize(question)
    scores = Bm25(corpus).scores(query)
    wanted = set(query)
    scored = [
        ScoredChunk(document, chunk, score, frozenset(wanted.intersection(tokens)), order)
        for (order, document, chunk), tokens, score in zip(triples, corpus, scores, strict=True)
        if score > 0.0
    ]
    scored.sort(key=lambda item: (-item.score, item.order, item.chunk.position))
    return scored


def select_passages(
    question: str,
    documents: Sequence[RequestDocument],
    *,
    max_chunks: int = MAX_QUOTED_CHUNKS,
    relative_floor: float = RELATIVE_FLOOR,
) -> list[Passage]:
    """The passages that answer the question, in request order (see the module docstring)."""
    ranked = rank_chunks(question, documents)
    if not ranked:
        return []
    floor = ranked[0].score * relative_floor
    chosen = [item for item in ranked if item.score >= floor][:max_chunks]
    chosen.sort(key=lambda item: (item.order, item.chunk.position))
    groups: list[list[ScoredChunk]] = []
    for item in chosen:
        if groups and _continues(groups[-1][-1], item):
            groups[-1].append(item)
        else:
            groups.append([item])
    return [Passage(group[0].document, tuple(item.chunk for item in group)) for group in groups]


def _continues(previous: ScoredChunk, item: ScoredChunk) -> bool:
    if previous.order != item.order:
        return False
    if item.chunk.position != previous.chunk.position + 1:
        return False
    kind = item.document.kind
    if kind in ("content", "search_result"):
        return False
    if kind == "pdf" and item.chunk.start != previous.chunk.start:
        return False
    return bool(previous.terms & item.terms)


def citation_for(passage: Passage) -> Citation:
    """The citation of a passage, in the location type of its source's kind."""
    document = passage.document
    first, last = passage.chunks[0], passage.chunks[-1]
    if document.kind == "search_result":
        return SearchResultLocation(
            cited_text=passage.cited_text,
            source=document.source or "",
            title=document.title,
            search_result_index=document.index,
            start_block_index=first.start,
            end_block_index=last.end,
        )
    if document.kind == "text":
        return CharLocation(
            cited_text=passage.cited_text,
            document_index=document.index,
            document_title=document.title,
            start_char_index=first.start,
            end_char_index=last.end,
        )
    if document.kind == "pdf":
        return PageLocation(
            cited_text=passage.cited_text,
            document_index=document.index,
            document_title=document.title,
            start_page_number=first.start,
            end_page_number=last.end,
        )
    return ContentBlockLocation(
        cited_text=passage.cited_text,
        document_index=document.index,
        document_title=document.title,
        start_block_index=first.start,
        end_block_index=last.end,
    )


def quoted_text(cited_text: str) -> str:
    """A quote as the answer shows it: one line, hyphenation marks dropped."""
    return _WHITESPACE.sub(" ", _HYPHENATION.sub("", cited_text)).strip()


def build_answer(question: str, documents: Sequence[RequestDocument]) -> list[TextBlock]:
    """The answer's text blocks: an uncited intro, then one cited block per passage.

    Without documents, or when nothing matches, one plain text block says so. When the documents
    do not ask for citations the quotes come as one uncited block.
    """
    if not documents:
        return [TextBlock(text=NO_DOCUMENTS_ANSWER)]
    passages = [
        passage
        for passage in select_passages(question, documents)
        if quoted_text(passage.cited_text)
    ]
    if not passages:
        return [TextBlock(text=NOTHING_FOUND_ANSWER)]
    quotes = [quoted_text(passage.cited_text) for passage in passages]
    if not documents[0].citations_enabled:  # all or none, checked when the request was parsed
        return [TextBlock(text=INTRO + " ".join(quotes))]
    blocks = [TextBlock(text=INTRO)]
    for number, (passage, quote) in enumerate(zip(passages, quotes, strict=True)):
        separator = " " if number < len(passages) - 1 else ""
        blocks.append(TextBlock(text=quote + separator, citations=[citation_for(passage)]))
    return blocks


def limit_answer(
    blocks: Sequence[TextBlock], *, max_tokens: int | None, stop_sequences: Sequence[str] = ()
) -> LimitedAnswer:
    """Cut the answer where generation would have stopped.

    At the first stop sequence (which is left out, as the upstream leaves it out), or after
    ``max_tokens * 4`` characters (the token estimate's own ratio), whichever comes first. A cut
    block keeps its citations; blocks after the cut are dropped.
    """
    text = "".join(block.text for block in blocks)
    cut: int | None = None
    stop_reason: StopReason = "end_turn"
    stop_sequence: str | None = None
    hits = [(text.find(sequence), sequence) for sequence in stop_sequences if sequence]
    found = [(place, sequence) for place, sequence in hits if place >= 0]
    if found:
        cut, stop_sequence = min(found, key=lambda hit: hit[0])
        stop_reason = "stop_sequence"
    if max_tokens is not None:
        budget = max_tokens * CHARS_PER_TOKEN
        if (len(text) if cut is None else cut) > budget:
            cut, stop_reason, stop_sequence = budget, "max_tokens", None
    kept = list(blocks) if cut is None else _truncate(blocks, cut)
    output = estimate_tokens("".join(block.text for block in kept))
    # The upstream never reports 0 output tokens, even for an empty answer.
    return LimitedAnswer(kept, stop_reason, stop_sequence, max(1, output))


def _truncate(blocks: Sequence[TextBlock], limit: int) -> list[TextBlock]:
    kept: list[TextBlock] = []
    used = 0
    for block in blocks:
        room = limit - used
        if room <= 0:
            break
        if len(block.text) <= room:
            kept.append(block)
            used += len(block.text)
        else:
            kept.append(block.model_copy(update={"text": block.text[:room]}))
            used = limit
    return kept
