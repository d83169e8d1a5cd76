"""The verdict on a PDF page's text layer: real text, none, or garbage. A pure function of the
page's text, deterministic and cheap (one pass over its characters).

A layer is garbage when a reader could not read it: control characters, private-use,
unassigned or replacement characters (a font without a Unicode map gives its glyph codes),
text that is mostly neither letters, digits nor symbols of any script, the same few
characters over and over (every glyph mapped to one), or glyph soup (letters of unrelated
scripts, or cases, jumbled inside words). Real text in any script passes: Arabic,
Chinese and Japanese, Cyrillic, tables of figures.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

# Fewer visible characters than this say too little for the ratios below: such a page is text
# unless every one of them is unreadable.
_MIN_SAMPLE = 16
# The shares above which a layer is garbage.
_MAX_UNREADABLE = 0.10  # control, private-use, unassigned, replacement characters
_MIN_WORDLIKE = 0.50  # letters, marks, digits and symbols among the visible characters
_MAX_SOUP_WORDS = 0.35  # words of three letters or more mixing scripts or jumbling cases
_MIN_SOUP_SAMPLE = 12  # such words needed before the soup share counts
_MIN_DISTINCT = 3  # different characters a page of _MIN_REPEAT_SAMPLE or more has at least
_MIN_REPEAT_SAMPLE = 64

_UNREADABLE_CATEGORIES = frozenset(("Cc", "Cf", "Co", "Cn", "Cs"))
# Format characters real text carries (joiners, directional marks, soft hyphen, BOM).
_READABLE_FORMAT = frozenset("\u00ad\u200b\u200c\u200d\u200e\u200f\u2060\ufeff\u061c")
# Leaders of a table of contents ("Chapter 1 . . . . 9"): neither letters nor unreadable.
_LEADERS = frozenset(".·…‧_-–—")
# Chinese, Japanese and Korean text runs without spaces, its "words" whole lines, and mixes
# its scripts (and Latin: "PDFファイル") in them: one family, besides which one other is usual.
_EAST_ASIAN = ("CJK", "HIRAGANA", "KATAKANA", "HANGUL", "HALFWIDTH", "FULLWIDTH", "IDEOGRAPHIC")


class Verdict(StrEnum):
    TEXT = "text"
    NONE = "none"
    GARBAGE = "garbage"


@dataclass(frozen=True, slots=True)
class LayerVerdict:
    verdict: Verdict
    reason: str | None = None  # why a layer is garbage, for the logs


@lru_cache(maxsize=4096)
def _script(char: str) -> str:
    """The script a letter belongs to, as the first word of its Unicode name."""
    first = unicodedata.name(char, "").split(" ", 1)[0]
    return "CJK" if any(family in first for family in _EAST_ASIAN) else first


def _unreadable(char: str) -> bool:
    if char == "\ufffd":
        return True
    return unicodedata.category(char) in _UNREADABLE_CATEGORIES and char not in _READABLE_FORMAT


def _soup(word: str) -> bool:
    """A word of letters from unrelated scripts, or with its case flipping inside it."""
    scripts = set()
    flips = 0
    previous_upper: bool | None = None
    for char in word:
        if not char.isalpha():
            continue
        scripts.add(_script(char))
        if char.isupper() or char.islower():
            upper = char.isupper()
            if previous_upper is not None and upper != previous_upper:
                flips += 1
            previous_upper = upper
    # "McDonald", "iPhone", "LaTeX" flip up to three times; soup flips all along.
    scripts.discard("CJK")
    return len(scripts) > 1 or flips > 3


def text_layer_verdict(text: str, *, covered_by_image: bool = False) -> LayerVerdict:
    """The verdict on a page whose text layer is ``text``. ``covered_by_image``: the page is a
    scan (an image covers almost all of it) and its few characters a label or an artefact."""
    visible = [char for char in text if not char.isspace() and char not in _LEADERS]
    if not visible or covered_by_image:
        return LayerVerdict(Verdict.NONE)
    unreadable = sum(1 for char in visible if _unreadable(char))
    if len(visible) < _MIN_SAMPLE:
        if unreadable == len(visible):
            return LayerVerdict(Verdict.GARBAGE, "only unreadable characters")
        return LayerVerdict(Verdict.TEXT)
    if len(visible) >= _MIN_REPEAT_SAMPLE and len(set(visible)) < _MIN_DISTINCT:
        return LayerVerdict(Verdict.GARBAGE, f"{len(visible)} characters of {len(set(visible))}")
    if unreadable > _MAX_UNREADABLE * len(visible):
        return LayerVerdict(Verdict.GARBAGE, f"{unreadable} of {len(visible)} unreadable")
    wordlike = sum(1 for char in visible if unicodedata.category(char)[0] in "LMNS")
    if wordlike < _MIN_WORDLIKE * len(visible):
        return LayerVerdict(Verdict.GARBAGE, f"{wordlike} of {len(visible)} word characters")
    words = [word for word in text.split() if sum(char.isalpha() for char in word) >= 3]
    if len(words) >= _MIN_SOUP_SAMPLE:
        soup = sum(1 for word in words if _soup(word))
        if soup > _MAX_SOUP_WORDS * len(words):
            return LayerVerdict(Verdict.GARBAGE, f"{soup} of {len(words)} words jumbled")
    return LayerVerdict(Verdict.TEXT)
