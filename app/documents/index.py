"""A stored document's index (its text and the chunks that tile it) and finding a cited
passage in it. Pure functions; each document kind maps its citations back with them.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

log = logging.getLogger(__name__)

# Characters that differ between two extractions of the same PDF text, and their common form.
_NORMALISED_REACH = 20_000
_HYPHENATION_MARKS = "\u0002\ufffe\u00ad"
_CANONICAL = {
    **dict.fromkeys("‘’‚‛′", "'"),
    **dict.fromkeys("“”„‟″", '"'),
    "ﬀ": "ff",
    "ﬁ": "fi",
    "ﬂ": "fl",
    "ﬃ": "ffi",
    "ﬄ": "ffl",
    "ﬅ": "st",
    "ﬆ": "st",
}


@dataclass(frozen=True, slots=True)
class IndexedChunk:
    start: int
    end: int
    page_number: int | None
    block_index: int | None
    locator: dict[str, Any] | None = None


def merged_locator(locators: Sequence[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The locator of a span over chunks: the first chunk's, with the ``rows`` of every chunk
    after it on the same sheet (a citation of rows 14 and 15 is ``"rows": [14, 15]``)."""
    first = locators[0] if locators else None
    if first is None or "rows" not in first:
        return first
    sheet = first.get("sheet")
    rows: list[int] = []
    for locator in locators:
        if locator is None or "rows" not in locator or locator.get("sheet") != sheet:
            break
        rows.extend(row for row in locator["rows"] if row not in rows)
    return {**first, "rows": rows}


@dataclass(frozen=True)
class DocumentIndex:
    """What resolution needs of one stored document: its text and its chunks."""

    document_id: str
    kind: str
    text: str
    chunks: Sequence[IndexedChunk]
    page_count: int | None = None

    def page_range(self, first: int, last: int) -> tuple[int, int] | None:
        """Text offsets covering pages ``first``..``last`` (1-based, inclusive)."""
        if self.page_count is None or not 1 <= first <= last <= self.page_count:
            return None
        start = end = None
        position = 0
        for chunk in self.chunks:
            assert chunk.page_number is not None
            if chunk.page_number < first:
                position = chunk.end
            elif chunk.page_number <= last:
                start = chunk.start if start is None else start
                end = chunk.end
        if start is None or end is None:  # pages with no text at all
            return position, position
        return start, end

    def block_range(self, first: int, end: int) -> tuple[int, int] | None:
        """Text offsets covering blocks ``first`` to ``end`` (0-based, end exclusive)."""
        if not 0 <= first < end <= len(self.chunks):
            return None
        return self.chunks[first].start, self.chunks[end - 1].end

    @cached_property
    def _chunk_ends(self) -> list[int]:
        return [chunk.end for chunk in self.chunks]

    def span(self, start: int, end: int) -> dict[str, Any]:
        """The ``span`` member for text offsets: pages and chunks it covers, and where it
        stands in the original (``locator``; null for text and PDF)."""
        # Chunks tile the text in order: the first one ending after start, then onwards.
        first = bisect.bisect_right(self._chunk_ends, start)
        inside = []
        for index in range(first, len(self.chunks)):
            if self.chunks[index].start >= end:
                break
            inside.append(index)
        pages = [page for i in inside if (page := self.chunks[i].page_number) is not None]
        return {
            "start_char": start,
            "end_char": end,
            "start_page": pages[0] if pages else None,
            "end_page": pages[-1] if pages else None,
            "chunk_indices": inside,
            "locator": merged_locator([self.chunks[i].locator for i in inside]),
        }


def normalize(text: str) -> tuple[str, list[int], list[int]]:
    """Text in a form that two extractions of the same passage share, with a map back.

    Runs of whitespace become one space (``\\r\\n`` and ``\\n`` alike); hyphenation marks
    (U+0002, U+FFFE, soft hyphen) are left out with the line break after them (the stored text
    of a PDF has none: the word is whole); curly quotes become straight ones; ligatures are
    expanded. Returns the normalised text and, for
    each of its characters, the start and end offsets of what it came from in ``text``.
    """
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    after_mark = False
    for index, char in enumerate(text):
        if char.isspace():
            if out and (after_mark or out[-1] == " "):
                ends[-1] = index + 1
            elif not after_mark:
                out.append(" ")
                starts.append(index)
                ends.append(index + 1)
            continue
        after_mark = char in _HYPHENATION_MARKS
        if after_mark:
            if out:
                ends[-1] = index + 1
            continue
        for piece in _CANONICAL.get(char, char):
            out.append(piece)
            starts.append(index)
            ends.append(index + 1)
    return "".join(out), starts, ends


def same_passage(stored: str, cited: str) -> bool:
    """Whether the stored text says what the citation quotes (after ``normalize``)."""
    return stored == cited or normalize(stored)[0].strip() == normalize(cited)[0].strip()


def locate(text: str, cited: str, within: tuple[int, int], near: int) -> tuple[int, int] | None:
    """Where ``cited`` stands in ``text``: inside ``within`` if it can, nearest to ``near``.

    Exact matches first, anywhere; then matches after normalisation, mapped back to exact
    offsets, within ``within`` when it is short and within ``_NORMALISED_REACH`` characters of
    ``near``: normalising is Python work on the event loop, so it never covers a whole book.
    """
    if not cited.strip():
        return None
    whole = (0, len(text))
    for lo, hi in (within, whole):
        found = _find_nearest(text, cited, lo, hi, near)
        if found is not None:
            return found
    needle = normalize(cited)[0].strip()
    if not needle:  # only hyphenation marks and whitespace
        return None
    window = (
        max(0, near - _NORMALISED_REACH),
        min(len(text), near + len(cited) + _NORMALISED_REACH),
    )
    regions = [within] if within[1] - within[0] <= 2 * _NORMALISED_REACH else []
    for lo, hi in [*regions, window] if window not in regions else regions:
        haystack, starts, ends = normalize(text[lo:hi])
        found = _find_nearest(
            haystack, needle, 0, len(haystack), _first_at_or_after(starts, near - lo)
        )
        if found is not None:
            return lo + starts[found[0]], lo + ends[found[1] - 1]
    return None


def _first_at_or_after(offsets: list[int], position: int) -> int:
    return bisect.bisect_left(offsets, position)


def _find_nearest(text: str, needle: str, lo: int, hi: int, near: int) -> tuple[int, int] | None:
    best: int | None = None
    position = text.find(needle, lo, hi)
    while position != -1:
        if best is None or abs(position - near) < abs(best - near):
            best = position
        if position > near:
            break
        position = text.find(needle, position + 1, hi)
    return None if best is None else (best, best + len(needle))


def _utf16_to_str(text: str, units: int) -> int | None:
    count = 0
    for index, char in enumerate(text):
        if count == units:
            return index
        count += 2 if ord(char) > 0xFFFF else 1
    return len(text) if count == units else None


def _utf8_to_str(text: str, nbytes: int) -> int | None:
    encoded = text.encode("utf-8", "surrogatepass")
    if not 0 <= nbytes <= len(encoded):
        return None
    try:
        return len(encoded[:nbytes].decode("utf-8", "surrogatepass"))
    except UnicodeDecodeError:
        return None  # the offset falls inside a character


def resolve_char_offsets(
    citation: dict[str, Any], document: DocumentIndex
) -> tuple[int, int] | None:
    text, cited = document.text, str(citation.get("cited_text") or "")
    start, end = citation.get("start_char_index"), citation.get("end_char_index")
    if not isinstance(start, int) or not isinstance(end, int) or start < 0 or end < start:
        return None
    readings = (
        ("code points", lambda i: i),
        ("UTF-16 units", lambda i: _utf16_to_str(text, i)),
        ("UTF-8 bytes", lambda i: _utf8_to_str(text, i)),
    )
    for rule, convert in readings:
        s, e = convert(start), convert(end)
        if s is not None and e is not None and e <= len(text) and text[s:e] == cited:
            log.debug("char_location resolved as %s", rule)
            return s, e
    found = locate(text, cited, (0, len(text)), min(start, len(text)))
    log.info("char_location resolved by %s", "searching near its start" if found else "nothing")
    return found
