"""Extractive answers: rank the documents' chunks against the question, quote the best ones, and
cite each quote exactly.

Documents and search results are ranked together, as one corpus: a search result is one more
kind of citable source, whose chunks are its text blocks.

Selection: every chunk is scored with BM25 against the question; the chunks that score at least
half of the best, at most three, are quoted in request order; which three, when more qualify, and
the best of all, are chosen by a second score where the question's names (capitalised words,
acronyms) and numbers, where rare in the documents, weigh ``NAME_WEIGHT`` times a plain
word. Headings (Markdown headings, short lines
with no sentence end, a table's header and rule rows) rank after every sentence and are quoted
only when no sentence matches. In a text document a table is cut into rows, each matched with
its header's words, and a sentence is matched with its Markdown section's title as well. A
question that asks several things ("What is Kuiper, and how is advertising growing?") gets the
best chunk of each part, in the parts' order. A sentence the documents repeat is quoted once.

Neighbouring chunks of one document (never a heading) that match a common question word are merged
into one citation (as the upstream merges consecutive sentences); chunks that match different words
answer different parts of the question and keep a citation each ("The grass is green. " and "The sky
is blue." for "What color is the grass and sky?"). PDF sentences merge only within a page; the
blocks of a content document or a search result never merge.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from app.local_engine.bm25 import Bm25, tokenize, tokens
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
NAME_WEIGHT = 2.5
RARE_NAME_CHUNKS = 3
RARE_NAME_SHARE = 0.02
HEADING_WORDS = 8
CSV_CELL_CHARS = 40
_HEADING_CHARS = 120  # longer than any line of HEADING_WORDS words but a table rule

_QUESTION_WORD = re.compile(r"[^\W_]+(?:['’.,][^\W_]+)*")
_SENTENCE_END = re.compile(r"[.!?。！？\n]")
_QUESTION_SPLIT = re.compile(r"(?<=[?？;；])\s*")
_ASKING = "how|what|when|where|which|who|whom|whose|why|is|are|was|were|did|does|do"
_CLAUSE_SPLIT = re.compile(
    rf"[;；]|,?\s+(?:and|also|as well as)\s+(?=(?:{_ASKING})\b)", re.IGNORECASE
)
_ENDS = ".!?。！？:;…"
_TABLE_RULE = re.compile(r"\|?\s*:?-{2,}:?\s*(?:\|\s*:?-{2,}:?\s*)*\|?")

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
    heading: bool = False
    plain: float = 0.0  # the score with every word weighing as much (what the floor reads)


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


def question_weights(question: str) -> dict[str, float]:
    """How much each word of the question weighs beyond its rarity: a name (a capitalised word
    not at the start of a sentence, an acronym) or a number is what was asked about, and counts
    ``NAME_WEIGHT`` times a plain word."""
    weights: dict[str, float] = {}
    starts = True
    for match in _QUESTION_WORD.finditer(question):
        word = match.group()
        named = any(c.isdigit() for c in word) or (
            word[0].isupper() and (not starts or (len(word) > 1 and word.isupper()))
        )
        starts = bool(_SENTENCE_END.fullmatch(question[match.end() : match.end() + 1] or "."))
        if named:
            for token in tokenize(word):
                weights[token] = NAME_WEIGHT
    return weights


def question_parts(question: str) -> list[str]:
    """The things a question asks, each on its own: its sentences, and clauses joined by "and",
    "also" or a semicolon when each holds a word of its own to look for ("What color is the
    grass and sky?" asks two things). One part when it asks one."""
    parts: list[str] = []
    for sentence in _QUESTION_SPLIT.split(question):
        pieces = [piece for piece in _CLAUSE_SPLIT.split(sentence) if tokenize(piece)]
        parts.extend(pieces)
    return parts if len(parts) > 1 else [question]


def refine(document: RequestDocument) -> list[tuple[Chunk, str]]:
    """The document's chunks as the engine ranks them: in text documents, a table (lines of
    ``|`` cells, or comma-separated lines of as many cells as the first) is cut into its rows,
    and a Markdown heading line into a chunk of its own, so that a citation quotes the row or
    sentence that holds the answer; everything else is left as the upstream cuts it. Each
    chunk with its kind: ``row``, ``heading`` or ``prose``."""
    if document.kind != "text" or not any(
        "|" in chunk.text or "," in chunk.text or "#" in chunk.text for chunk in document.chunks
    ):
        return [(chunk, "prose") for chunk in document.chunks]
    pieces: list[tuple[Chunk, str]] = []
    for chunk in document.chunks:
        for start, end, kind in _line_pieces(chunk.text):
            text = chunk.text[start:end]
            piece = Chunk(len(pieces), text, chunk.start + start, chunk.start + end)
            pieces.append((piece, kind))
    return pieces


def _line_pieces(text: str) -> list[tuple[int, int, str]]:
    """Spans tiling ``text``, with their kinds: table rows and heading lines each alone, other
    lines together."""
    lines = text.splitlines(keepends=True)
    if len(lines) < 2:
        return [(0, len(text), _line_kind(text))]
    kinds = [_line_kind(line) for line in lines]
    _mark_csv(lines, kinds)
    spans: list[tuple[int, int, str]] = []
    at = 0
    for line, kind in zip(lines, kinds, strict=True):
        end = at + len(line)
        if spans and kind == "prose" and spans[-1][2] == "prose":
            spans[-1] = (spans[-1][0], end, "prose")
        elif spans and not line.strip():  # a blank line belongs to what it follows
            spans[-1] = (spans[-1][0], end, spans[-1][2])
        else:
            spans.append((at, end, kind))
        at = end
    return spans


def _line_kind(line: str) -> str:
    stripped = line.strip()
    if stripped.startswith("#"):
        return "heading"
    if stripped.count("|") >= 2 or (stripped.startswith("|") and stripped.count("|") >= 1):
        return "row"
    return "prose"


def _mark_csv(lines: list[str], kinds: list[str]) -> None:
    """Runs of at least three lines with the same number (two or more) of commas, short cells
    and no sentence end are a CSV table: its lines are rows. (Prose wrapped at a fixed width
    has long stretches between its commas.)"""
    counts = [
        line.count(",") if kind == "prose" and _cells(line) else -1
        for line, kind in zip(lines, kinds, strict=True)
    ]
    start = 0
    while start < len(lines):
        end = start
        while end < len(lines) and counts[end] == counts[start]:
            end += 1
        if counts[start] >= 2 and end - start >= 3:
            for i in range(start, end):
                kinds[i] = "row"
        start = max(end, start + 1)


def _cells(line: str) -> bool:
    """Whether a line could be a CSV row: no cell longer than ``CSV_CELL_CHARS``, and no
    sentence end at its end."""
    text = line.strip()
    if not text or text[-1] in ".!?。！？":
        return False
    return all(len(cell) <= CSV_CELL_CHARS for cell in text.split(","))


def _is_heading(chunk: Chunk) -> bool:
    """A title rather than a sentence: a Markdown heading, a table's header or rule row, or a
    short line with no sentence end."""
    text = chunk.text.strip()
    if not text or (len(text) > _HEADING_CHARS and text[0] not in "#|-:"):
        return False  # (a quick way out for most sentences)
    if text.startswith("#") or _TABLE_RULE.fullmatch(text):
        return True
    if "\n" in text or text[-1] in _ENDS or "|" in text:
        return False
    return len(text.split()) <= HEADING_WORDS and not any(c.isdigit() for c in text)


@dataclass(frozen=True, slots=True)
class _Unit:
    order: int
    document: RequestDocument
    chunk: Chunk
    heading: bool


@dataclass(slots=True)
class _Corpus:
    units: list[_Unit]
    tokens: list[tuple[str, ...]]
    index: Bm25


def _corpus(documents: Sequence[RequestDocument]) -> _Corpus | None:
    units: list[_Unit] = []
    corpus: list[tuple[str, ...]] = []
    for order, document in enumerate(documents):
        header: tuple[str, ...] = ()
        section: tuple[str, ...] = ()
        for chunk, kind in refine(document):
            words = tokens(chunk.text)
            row = kind == "row"
            heading = kind == "heading" or _is_heading(chunk)
            if kind == "heading":
                section, header = words, ()
            elif row and _TABLE_RULE.fullmatch(chunk.text.strip()):
                heading = True
            elif row and not header:
                header, heading = words, True  # a table's first row names its columns
            elif row:
                words = words + header  # a row is matched with the names of its columns
            else:
                header = ()
            if section and not heading:
                words = words + section  # and a sentence with its Markdown section's title
            units.append(_Unit(order, document, chunk, heading))
            corpus.append(words)
    if not units:
        return None
    return _Corpus(units, corpus, Bm25(corpus))


def _rank(corpus: _Corpus, question: str) -> list[ScoredChunk]:
    query = tokenize(question)
    index = corpus.index
    # A name weighs more only where it is rare: the subject of the whole document (Amazon in
    # Amazon's letter) says nothing about which of its sentences answers.
    rare = max(RARE_NAME_CHUNKS, index.count * RARE_NAME_SHARE)
    weights = {
        term: weight
        for term, weight in question_weights(question).items()
        if index.containing(term) <= rare
    }
    scores = index.scores(query, weights)
    plain = index.scores(query) if weights else scores
    wanted = set(query)
    scored = [
        (
            unit.heading,
            ScoredChunk(
                unit.document,
                unit.chunk,
                score,
                frozenset(wanted.intersection(words)),
                unit.order,
                unit.heading,
                unweighted,
            ),
        )
        for unit, words, score, unweighted in zip(
            corpus.units, corpus.tokens, scores, plain, strict=True
        )
        if score > 0.0
    ]
    # Headings last: a title names a subject, the sentences under it say something about it.
    scored.sort(key=lambda pair: (pair[0], -pair[1].score, pair[1].order, pair[1].chunk.position))
    return [item for _, item in scored]


def _once(items: Iterable[ScoredChunk]) -> Iterator[ScoredChunk]:
    """The items but those quoting what an earlier one quotes: a sentence the documents repeat
    is quoted once, where it ranks best."""
    quoted: set[str] = set()
    for item in items:
        quote = quoted_text(item.chunk.text).casefold()
        if quote not in quoted:
            quoted.add(quote)
            yield item


def rank_chunks(question: str, documents: Sequence[RequestDocument]) -> list[ScoredChunk]:
    """The chunks that match the question at all, best first (headings after every sentence);
    ties go to request order."""
    corpus = _corpus(documents)
    return [] if corpus is None else _rank(corpus, question)


def select_passages(
    question: str,
    documents: Sequence[RequestDocument],
    *,
    max_chunks: int = MAX_QUOTED_CHUNKS,
    relative_floor: float = RELATIVE_FLOOR,
) -> list[Passage]:
    """The passages that answer the question (see the module docstring): in request order for
    a question that asks one thing; for one that asks several, the best passage of each part
    first, in the parts' order."""
    corpus = _corpus(documents)
    if corpus is None:
        return []
    parts = question_parts(question)
    if len(parts) > 1:
        return _part_by_part(corpus, parts, max(max_chunks, len(parts)))
    ranked = _rank(corpus, question)
    if not ranked:
        return []
    if not ranked[0].heading:  # a heading is quoted only when no sentence matches
        ranked = [item for item in ranked if not item.heading]
    # Which chunks say enough is read with every word weighing alike (a name in one chunk
    # must not push out the chunks that answer the rest of the question); among them, the
    # names and numbers of the question choose which come first.
    floor = max(item.plain for item in ranked) * relative_floor
    best, rest = ranked[0], ranked[1:]
    chosen = list(_once([best, *(item for item in rest if item.plain >= floor)]))[:max_chunks]
    chosen.sort(key=lambda item: (item.order, item.chunk.position))
    groups: list[list[ScoredChunk]] = []
    for item in chosen:
        if groups and _continues(groups[-1][-1], item):
            groups[-1].append(item)
        else:
            groups.append([item])
    return [Passage(group[0].document, tuple(item.chunk for item in group)) for group in groups]


def _part_by_part(corpus: _Corpus, parts: Sequence[str], max_chunks: int) -> list[Passage]:
    chosen: list[ScoredChunk] = []
    seen: set[tuple[int, int]] = set()
    quoted: set[str] = set()
    for part in parts:
        for item in _rank(corpus, part):
            key = (item.order, item.chunk.position)
            quote = quoted_text(item.chunk.text).casefold()
            if key not in seen and quote not in quoted:
                seen.add(key)
                quoted.add(quote)
                chosen.append(item)
                break
        if len(chosen) == max_chunks:
            break
    return [Passage(item.document, (item.chunk,)) for item in chosen]


def _continues(previous: ScoredChunk, item: ScoredChunk) -> bool:
    if previous.order != item.order or previous.heading or item.heading:
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
