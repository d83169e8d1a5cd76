"""Sentence chunks for citations: spans that tile a text exactly.

The Messages API cites character ranges of sentence chunks, so the spans cover the text with no gap
and no overlap, in Python ``str`` offsets of the text as given (it is never normalised). blingfire
finds the sentences; its byte offsets are checked and mapped here, and a few rules below repair
what it is known to get wrong.
"""

from __future__ import annotations

import ctypes
import importlib.util
import itertools
import re
import sys
from pathlib import Path

# The C entry point, called directly: the Python wrapper maps offsets with a Python loop over
# every byte, raises on lone surrogates and on "", and makes up a span for blank
# text. Its signature (blingfire's blingfiretokdll.cpp) is declared on a prototype of our own, so
# ctypes checks every argument and the wrapper's function object is left as it is.
# tests/unit/test_blingfire_fence.py fails, saying what changed, if the library no longer fits.
_TEXT_TO_SENTENCES_SIGNATURE = ctypes.CFUNCTYPE(
    ctypes.c_int,  # bytes written to out, with its NUL; -1 if the text was refused
    ctypes.c_char_p,  # the UTF-8 text
    ctypes.c_int,  # its size in bytes
    ctypes.c_char_p,  # out: the sentences, one a line, then a NUL
    ctypes.POINTER(ctypes.c_int32),  # each sentence's first byte, or NULL
    ctypes.POINTER(ctypes.c_int32),  # each sentence's last byte (inclusive), or NULL
    ctypes.c_int,  # the size of out, and of each offset array
)


def _blingfire_library() -> ctypes.CDLL:
    """blingfire's shared library, loaded from its package as the package loads it, without
    importing the package, whose ``import numpy`` would load numpy in every worker for
    functions chunking never calls."""
    spec = importlib.util.find_spec("blingfire")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("blingfire is not installed")
    name = {"win32": "blingfiretokdll.dll", "darwin": "libblingfiretokdll.dylib"}.get(
        sys.platform, "libblingfiretokdll.so"
    )
    return ctypes.cdll.LoadLibrary(str(Path(spec.submodule_search_locations[0], name)))


_TEXT_TO_SENTENCES = _TEXT_TO_SENTENCES_SIGNATURE(
    ("TextToSentencesWithOffsets", _blingfire_library())
)

_SURROGATE = re.compile(r"[\ud800-\udfff]")
# blingfire does not take most accented Latin-1 capitals (À to Û but Ä Æ Ð Ö Ø; UTF-8 C3 80-9B)
# for capitals, so it never starts a sentence at "Él" or "À". It is shown "Ä" instead, which it
# knows and which is as long in UTF-8, so no offset moves.
_UNSEEN_CAPITAL = re.compile(rb"\xc3[\x80-\x83\x85\x87-\x8f\x91-\x95\x99-\x9b]")
_CLOSERS = r"[\"'\u2019\u201d\u00bb)\]]"
_OPENERS = r"[\"'\u2018\u201c\u201e\u00ab(\[]"
# Sentence starts that blingfire misses: an inverted mark after a full stop ("z.B. gut. ¿Qué
# tal?"), and a quoted or bracketed sentence right after another one ('"Stop!" "Why?"', whose
# first letter, group 1, must be a capital).
_MISSED_START = re.compile(
    rf"[.!?\u2026](?:{_CLOSERS}*\s+(?=[\u00bf\u00a1])|{_CLOSERS}+\s+(?={_OPENERS}+(\w)))"
)
# Used only when blingfire refuses a text or its offsets do not check out.
_FALLBACK = re.compile(rf"[.!?\u2026]+{_CLOSERS}*\s+|[\u3002\uff01\uff1f]+\s*")
# A line that starts with a list number (group 1): blingfire splits "2. Walk." after "2.".
_LIST_NUMBER = re.compile(r"^[ \t]*(\d{1,3}\.)[ \t]+", re.MULTILINE)
# A German ordinal before a month or century: blingfire splits "am 3. Oktober" after "3."
_ORDINAL = re.compile(r"\b\d{1,2}\.\s+\Z")
_ORDINAL_NOUN = re.compile(
    r"(?:Januar|J\u00e4nner|Februar|M\u00e4rz|April|Mai|Juni|Juli|August|September|Oktober"
    r"|November|Dezember|Jahrhundert)\b"
)
# Each pattern below starts with one literal character, which re scans for many times faster
# than for a character class: they run over every text.
# An ideographic full stop ends a sentence whatever follows it (blingfire keeps "。iPhone" and
# "。2024" with the sentence before); closing brackets and quotes after it end the sentence too,
# but not a straight quote or a guillemet, which may as well open the next one.
_IDEOGRAPHIC_STOPS = "\u3002\uff01\uff1f"
_IDEOGRAPHIC_STOP = re.compile(
    rf"[{_IDEOGRAPHIC_STOPS}]+[\u300d\u300f\uff09\u3011\u3015\u3017\u3019\u301b\u3009\u300b"
    r"\uff3d\uff5d\u201d\u2019)\]]*"
)
# A blank line ends a paragraph, and with it a sentence, also a heading's with no final mark.
# LF and CRLF: "\r" is blank; a lone CR (old Mac text) is found with the second pattern.
_BLANK_LINE = re.compile(r"\n[^\S\n]*\n")
_BLANK_LINE_CR = re.compile(r"\r[^\S\r\n]*\r")
# A sentence that starts with a number ("Sales rose. 2024 was good."), which blingfire never
# splits off. After a full stop, the word before it must be one, not a number or an abbreviation.
_STOP_BEFORE_DIGIT = [re.compile(rf"\{mark}{_CLOSERS}*\s+(?={_OPENERS}*\d)") for mark in ".!?"]
_WORD_BEFORE_STOP = re.compile(r"(?<![\w.])([^\W\d_]{2,})\Z")
# A lowercase word after a dotted abbreviation ("z.B. gut. Ja.", "d. h. spät."): blingfire takes
# the word's full stop for part of the abbreviation. A match starts at the abbreviation's first
# full stop; group 1 is the word.
_WORD_AFTER_DOTTED = re.compile(rf"\.\s?[^\W\d_]\.\s+([^\W\d_]{{2,}})\.{_CLOSERS}*\s+(?=[^\W\d_])")
# Lowercase abbreviations that a number or a capital often follows mid-sentence ("vol. 3",
# "max. 5 Personen", "z.B. bzw. Häuser"); blingfire knows some of them, not all.
_LOWERCASE_ABBREVIATIONS = frozenset(
    """
    al approx appx art avg bzgl bzw ca cap cf ch chap cit cl ed eds eq eqs esp est etc evtl ex
    excl ff fig figs fn ggf gem hr hrs hrsg id incl inkl insb kap lit ln max min mio mo mos mrd nos
    no nr op para paras pct pp pt pts ref refs resp rev sec sect seq sq str tab tel tsd usw ver vgl
    viz vol vols vs wk yr yrs ziff zzgl jan feb mar apr jun jul aug sep sept oct okt nov dec dez
    aprox env pág núm стр рис ст гл см тыс млн млрд руб коп табл
    """.split()
)


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Split text into sentence spans that tile it.

    Returns ``(start, end)`` pairs of ``str`` offsets, end exclusive: the first starts at 0, each
    starts where the previous one ends, the last ends at ``len(text)``, none is empty, and ``""``
    gives ``[]``. Whitespace after a sentence belongs to it (as in the Messages API's own chunks:
    "The grass is green. The sky is blue." is (0, 20), (20, 36)); whitespace at the very start
    belongs to the first sentence, and a blank text is one span. A line break alone does not end
    a sentence (but a numbered item, "\n2. ", starts one); a blank line does, and so does an
    ideographic full stop, whatever follows it. Never raises, whatever the string.
    """
    if not text:
        return []
    cuts = _blingfire_cuts(text)
    if cuts is None:
        cuts = [match.end() for match in _FALLBACK.finditer(text)]
    missed = [m.end() for m in _MISSED_START.finditer(text) if not m[1] or m[1].isupper()]
    missed += _digit_starts(text)
    missed += _starts_after_dotted_abbreviations(text)
    # Cuts that hold whatever follows them; the rest are checked below.
    firm = {match.start() for match in _BLANK_LINE.finditer(text)}
    if "\r" in text:
        firm.update(match.start() for match in _BLANK_LINE_CR.finditer(text))
    # Where a sentence cannot start: between an ideographic stop and the closers after it.
    closing: set[int] = set()
    if any(stop in text for stop in _IDEOGRAPHIC_STOPS):
        for match in _IDEOGRAPHIC_STOP.finditer(text):
            firm.add(match.end())
            closing.update(range(match.start() + 1, match.end()))
    if missed or firm:
        cuts = sorted({*cuts, *missed, *firm})
    list_items = {match.end(): match.start(1) for match in _LIST_NUMBER.finditer(text)}
    # Blank lines at the very start belong to the first sentence.
    leading_blanks = len(text) - len(text.lstrip())
    bounds = [0]
    for cut in cuts:
        is_firm = cut in firm
        # Whitespace goes with the sentence before, also what blingfire does not count as blank
        # (U+0085, U+2028...).
        while cut < len(text) and text[cut].isspace():
            cut += 1
        if cut >= len(text):
            continue
        if not is_firm:
            # A sentence does not start in lowercase: blingfire splits `"Is that so?" she asked.`
            if text[cut].islower() or cut in closing:
                continue
            if _ORDINAL_NOUN.match(text, cut) and _ORDINAL.search(text, max(cut - 8, 0), cut):
                continue
        # A numbered item starts at its number: "1. Feed.\n2. Walk." is cut before "2.".
        cut = list_items.get(cut, cut)
        if cut > max(bounds[-1], leading_blanks):
            bounds.append(cut)
    bounds.append(len(text))
    return list(itertools.pairwise(bounds))


def _digit_starts(text: str) -> list[int]:
    """Starts of sentences that begin with a digit after a stop that ends a word, not a number
    or an abbreviation: "rose. 2024" and "Really? 5", not "Fig. 3", "p.m. 5" or "3. 4"."""
    starts: list[int] = []
    for pattern in _STOP_BEFORE_DIGIT:
        for match in pattern.finditer(text):
            stop = match.start()
            if text[stop] == ".":
                word = _WORD_BEFORE_STOP.search(text, max(stop - 32, 0), stop)
                if not word or not word[1].islower() or word[1] in _LOWERCASE_ABBREVIATIONS:
                    continue
            starts.append(match.end())
    return starts


def _starts_after_dotted_abbreviations(text: str) -> list[int]:
    """Starts of sentences after "z.B. gut. " (a capital follows), which blingfire misses."""
    starts: list[int] = []
    for match in _WORD_AFTER_DOTTED.finditer(text):
        first = match.start() - 1  # the abbreviation's first letter, alone in its word
        if first < 0 or not text[first].isalpha() or (first and text[first - 1].isalnum()):
            continue
        word = match[1]
        if word.islower() and word not in _LOWERCASE_ABBREVIATIONS and text[match.end()].isupper():
            starts.append(match.end())
    return starts


def _blingfire_cuts(text: str) -> list[int] | None:
    """Offsets where blingfire starts the second, third, ... sentence; None if unusable."""
    try:
        data = text.encode()
    except UnicodeEncodeError:
        # Lone surrogates have no UTF-8; U+FFFD is one code point too, so offsets stay put.
        data = _SURROGATE.sub("\ufffd", text).encode()
    data = _UNSEEN_CAPITAL.sub("\u00c4".encode(), data)
    size = len(data)
    # The output (the sentences joined by "\n", then a NUL) is at most 2 * size + 1 bytes, and the
    # C code clears `cap` ints of `starts`. End offsets are not needed: None asks for none.
    cap = 2 * size + 2
    if cap > 2**31 - 1:  # sizes are C ints
        return None
    out = ctypes.create_string_buffer(cap)
    starts = (ctypes.c_int32 * cap)()
    out_size = int(_TEXT_TO_SENTENCES(data, size, out, starts, None, cap))
    if not 0 < out_size <= cap:  # -1: refused, e.g. a text that is only a BOM
        return None
    # One sentence a line: blingfire turns "\n" inside a sentence into a space.
    count = ctypes.string_at(out, out_size - 1).count(b"\n") + 1
    # Byte offsets of each sentence's first non-blank character; trust them only once checked.
    offsets = starts[:count]
    if any(not 0 <= a < b < size for a, b in itertools.pairwise(offsets)):
        return None
    if size == len(text):  # ASCII: a byte is a code point
        return offsets[1:]
    cuts: list[int] = []
    done = chars = 0
    try:
        for offset in offsets[1:]:
            chars += len(data[done:offset].decode())  # raises if offset splits a character
            done = offset
            cuts.append(chars)
    except UnicodeDecodeError:
        return None
    return cuts
