"""The lexical support check: does a cited text hold what the claim citing it says? A pure
function, milliseconds per answer, no model.

A claim is supported when every number, amount, percentage, unit and date it states is in the
cited text (after normalisation: ``quantities``), its negation agrees with the cited sentence
it leans on, its named entities are in the cited text, and most of its content words are (by
stem, in the document's language). Each failure is a reason naming what is missing.

A segment often makes several claims, each with its own citation ("…ships. If you don't receive
it within 48 hours…", one citation per sentence). A citation is therefore checked against the
segment's sentences it supports better than the segment's other citations do: ``others``.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from app.support.quantities import (
    MONTH_NAMES,
    QUANTITY_WORDS,
    Date,
    Quantity,
    dates,
    normalised,
    quantities,
    same_date,
    same_kind,
    same_value,
)
from app.support.words import (
    CJK_NEGATIONS,
    CJK_RUN,
    TOKEN,
    base_language,
    guess_language,
    negations,
    stemmer,
    stopwords,
)

Verdict = Literal["supported", "partial", "unsupported", "unchecked"]

# Reason codes (the contract's, and ``date_not_in_source``).
NUMBER_NOT_IN_SOURCE = "number_not_in_source"
DATE_NOT_IN_SOURCE = "date_not_in_source"
UNIT_MISMATCH = "unit_mismatch"
NEGATION_MISMATCH = "negation_mismatch"
ENTITY_NOT_IN_SOURCE = "entity_not_in_source"
LOW_OVERLAP = "low_overlap"

# Of the claim's content words, the share the cited text must hold: at least SUPPORTED for
# ``supported``; under UNSUPPORTED, ``unsupported``.
SUPPORTED = 0.5
UNSUPPORTED = 0.2

_WEEKDAYS = frozenset(
    "monday tuesday wednesday thursday friday saturday sunday mon tue wed thu fri sat sun".split()
)
# Where sentences end: after their punctuation, or at a line break. Every branch starts at a
# fixed character, so a long run of spaces is scanned once (``\s*\n`` would rescan it from each
# of its positions).
_SENTENCE_END = re.compile(r"(?<=[.!?;。！？；])\s+|\n\s*|(?<=[。！？；])")


@dataclass(frozen=True, slots=True)
class Reason:
    """Why a claim is not (fully) supported: a code, the claim's words it is about, and a
    sentence for people."""

    code: str
    claim: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "claim": self.claim, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class Support:
    """A citation's verdict: whether its cited text supports its claim, how well (0 to 1), by
    which method, and why not."""

    verdict: Verdict
    score: float
    reasons: tuple[Reason, ...] = ()
    method: Literal["lexical", "judge"] = "lexical"

    def as_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "score": self.score,
            "method": self.method,
            "reasons": [reason.as_dict() for reason in self.reasons],
        }


UNCHECKED = Support("unchecked", 0.0)


@dataclass(frozen=True, slots=True)
class _Text:
    """A text as the check reads it (made once per text and language: ``_read``)."""

    text: str
    language: str
    words: tuple[str, ...]  # lower-cased, in order
    word_set: frozenset[str]
    content: tuple[str, ...]  # its content words, each once, in order
    content_stems: tuple[str, ...]  # their stems, one for one
    stems: frozenset[str]
    cjk: str  # its Chinese, Japanese and Korean characters, runs joined by spaces
    negations: int  # how many negation cues it has


def check_support(
    claim: str, cited: str, language: str | None = None, *, others: Sequence[str] = ()
) -> Support:
    """Whether ``cited`` supports ``claim``, in ``language`` (ISO 639-1; guessed from the
    cited text when None). ``others``: the cited texts of the claim's other citations."""
    if not cited.strip():
        return UNCHECKED
    lang = base_language(language) if language else guess_language(cited)
    source = _read(normalised(cited), lang)
    own = _own_part(normalised(claim), source, [_read(normalised(o), lang) for o in others])
    reasons: list[Reason] = []
    reasons += _quantity_reasons(own, source.text)
    reasons += _negation_reasons(own, source)
    reasons += _entity_reasons(own, source)
    coverage, missing = _coverage(own, source)
    if coverage < SUPPORTED:
        shown = ", ".join(missing[:8])
        reasons.append(
            Reason(
                LOW_OVERLAP,
                shown,
                f"The cited text holds {coverage:.0%} of the claim's content words; "
                f"missing: {shown}.",
            )
        )
    hard = sum(1 for reason in reasons if reason.code != LOW_OVERLAP)
    score = round(coverage * 0.5**hard, 3)
    verdict: Verdict
    if not reasons:
        verdict = "supported"
    elif coverage < UNSUPPORTED or any(r.code == NEGATION_MISMATCH for r in reasons):
        verdict = "unsupported"
    else:
        verdict = "partial"
    return Support(verdict, score, tuple(reasons))


@lru_cache(maxsize=512)
def _read(text: str, language: str) -> _Text:
    """The text's words, content words and their stems. Cached: an answer's segments and
    cited texts are read once for each of its citations."""
    words = tuple(TOKEN.findall(text.lower()))
    cjk = " ".join(CJK_RUN.findall(text))
    content = tuple(dict.fromkeys(_content(words, language, cjk=bool(cjk))))
    stems = tuple(_stems(content, language))
    cues = negations(language)
    count = sum(1 for word in words if word in cues)
    if "n't" in text or "n’t" in text:
        count += sum(1 for word in words if word.endswith(_NOT))
    if cjk:
        count += sum(cjk.count(cue) for cue in CJK_NEGATIONS)
    return _Text(
        text, language, words, frozenset(words), content, stems, frozenset(stems), cjk, count
    )


_NOT = ("n't", "n’t")


def clear_cache() -> None:
    """Forget the texts read (for benchmarks that measure a first reading)."""
    for cached in (_read, _entities, _sentences, quantities, dates, guess_language):
        cached.cache_clear()


def _content(words: Sequence[str], language: str, *, cjk: bool) -> list[str]:
    """The content words: no stop words, negations, numbers or single letters; a
    contraction's first part ("you'll" -> "you"). Chinese and Japanese are read apart."""
    skipped = _skipped(language)
    content = [
        word.split("'")[0].split("’")[0] if "'" in word or "’" in word else word
        for word in words
        if word not in skipped
    ]
    content = [word for word in content if len(word) > 1 and word.isalpha()]
    if cjk:
        content = [word for word in content if not CJK_RUN.search(word)]
    return content


@lru_cache(maxsize=64)
def _skipped(language: str) -> frozenset[str]:
    return stopwords(language) | negations(language) | QUANTITY_WORDS


def _stems(words: Sequence[str], language: str) -> list[str]:
    found = stemmer(language)
    return list(words) if found is None else found.stemWords(words)


@lru_cache(maxsize=512)
def _sentences(text: str) -> tuple[str, ...]:
    return tuple(part for part in _SENTENCE_END.split(text) if part and not part.isspace())


def _own_part(claim: str, source: _Text, others: Sequence[_Text]) -> _Text:
    """The claim's sentences this citation supports at least as well as the others do (all of
    them when it is the only one); the best of them when the others support each better."""
    sentences = _sentences(claim)
    if not others or len(sentences) < 2:
        return _read(claim, source.language)
    kept, best, best_coverage = [], sentences[0], -1.0
    for sentence in sentences:
        read = _read(sentence, source.language)
        own, _ = _coverage(read, source)
        if own > best_coverage:
            best, best_coverage = sentence, own
        if own >= max(_coverage(read, other)[0] for other in others):
            kept.append(sentence)
    return _read(" ".join(kept) if kept else best, source.language)


def _coverage(claim: _Text, source: _Text) -> tuple[float, list[str]]:
    """The share of the claim's content words (stems; character pairs in Chinese and
    Japanese) that the source holds, and the words it lacks."""
    found_stems = source.stems
    missing = [
        word
        for word, stem in zip(claim.content, claim.content_stems, strict=True)
        if stem not in found_stems
    ]
    total, found = len(claim.content), len(claim.content) - len(missing)
    if claim.cjk:
        for run in claim.cjk.split(" "):
            pairs = [run[i : i + 2] for i in range(len(run) - 1)] or [run]
            for pair in dict.fromkeys(pairs):
                total += 1
                if pair in source.cjk:
                    found += 1
                elif len(missing) < 20:
                    missing.append(pair)
    if total == 0:
        return 1.0, []
    return found / total, missing


def _quantity_reasons(claim: _Text, cited: str) -> list[Reason]:
    """Every date and quantity of the claim in the cited text, else a reason: a figure the
    cited text has with another unit or scale is ``unit_mismatch``."""
    reasons = []
    text = claim.text
    cited_dates = [date for date, _ in dates(cited)]
    for date, (start, end) in dates(text):
        text = text[:start] + " " * (end - start) + text[end:]  # its digits are not numbers
        if not any(same_date(date, other) for other in cited_dates):
            reasons.append(_missing_date(date))
    cited_quantities = quantities(cited)
    for quantity in quantities(text, number_words=False):
        matches = [other for other in cited_quantities if same_value(quantity, other)]
        if any(same_kind(quantity, other) for other in matches):
            continue
        if matches:
            reasons.append(_unit_mismatch(quantity, matches[0]))
            continue
        # Nothing in the cited text has its value: the same number with another scale or
        # unit ("$575 million" of "$575 billion") is a unit mismatch.
        scaled = quantity.mantissa != quantity.values or quantity.kind is not None
        same_number = [
            other
            for other in cited_quantities
            if scaled and set(quantity.mantissa) & set(other.mantissa)
        ]
        if same_number:
            reasons.append(_unit_mismatch(quantity, same_number[0]))
        else:
            reasons.append(
                Reason(
                    NUMBER_NOT_IN_SOURCE,
                    quantity.text,
                    f"The cited text does not state {quantity.text!r}.",
                )
            )
    return reasons


def _missing_date(date: Date) -> Reason:
    return Reason(
        DATE_NOT_IN_SOURCE, date.text, f"The cited text does not give the date {date.text!r}."
    )


def _unit_mismatch(claimed: Quantity, cited: Quantity) -> Reason:
    return Reason(
        UNIT_MISMATCH,
        claimed.text,
        f"The claim says {claimed.text!r} where the cited text says {cited.text!r}.",
    )


def _negation_reasons(claim: _Text, source: _Text) -> list[Reason]:
    """Each sentence of the claim negates as the cited sentence it leans on does (one of those
    sharing most of its content words): the same count of negations, give or take two ("not
    without" is no negation)."""
    pieces = _sentences(source.text)
    if not pieces:
        return []
    cited = [source] if len(pieces) == 1 else [_read(s, source.language) for s in pieces]
    for sentence in _sentences(claim.text):
        read = _read(sentence, claim.language)
        overlaps = [len(read.stems & other.stems) for other in cited]
        best = max(overlaps)
        if best == 0:
            continue
        parity = read.negations % 2
        leaned_on = [c for c, overlap in zip(cited, overlaps, strict=True) if overlap >= best / 2]
        if any(other.negations % 2 == parity for other in leaned_on):
            continue
        if parity:
            detail = "The claim is negated; the cited text is not."
        else:
            detail = "The cited text is negated; the claim is not."
        return [Reason(NEGATION_MISMATCH, _negation_words(read) or sentence[:80], detail)]
    return []


def _negation_words(claim: _Text) -> str:
    cues = negations(claim.language)
    return " ".join(w for w in claim.words if w in cues or w.endswith(_NOT))


def _entity_reasons(claim: _Text, source: _Text) -> list[Reason]:
    """Names in the claim (a capitalised word that does not begin a sentence, or an acronym)
    the cited text lacks. German capitalises every noun: there only acronyms count."""
    reasons = []
    source_words = source.word_set
    seen = set()
    for entity in _entities(claim.text, claim.language):
        lower = entity.lower()
        if lower in seen:
            continue
        seen.add(lower)
        if lower in source_words or lower in source.stems:
            continue
        stems = _stems([lower], claim.language)
        if stems[0] in source.stems:
            continue
        reasons.append(
            Reason(
                ENTITY_NOT_IN_SOURCE,
                entity,
                f"The cited text does not name {entity!r}.",
            )
        )
    return reasons


@lru_cache(maxsize=512)
def _entities(text: str, language: str) -> tuple[str, ...]:
    """Names: a word with a capital that does not begin a sentence (or a bullet), or with a
    capital past its first letter (an acronym, "iPhone"); each once."""
    stop, negation = stopwords(language), negations(language)
    found: dict[str, None] = {}
    breaks = [match.end() for match in _SENTENCE_BREAK.finditer(text)]
    for match in _CAPITALISED.finditer(text):
        start = match.start()
        after_break = bisect.bisect_right(breaks, start)
        since = breaks[after_break - 1] if after_break else 0
        begins = _WORD_CHARACTER.search(text, since, start) is None
        word = match.group()
        if "'" in word or "’" in word:
            word = word.split("'")[0].split("’")[0]
        if len(word) < 2 or not word.isalpha():
            continue
        inner_capital = not word[1:].islower()
        if not inner_capital and (begins or language == "de" or not word[0].isupper()):
            continue
        lower = word.lower()
        if lower in stop or lower in negation or lower in MONTH_NAMES or lower in _WEEKDAYS:
            continue  # dates are checked as dates
        found[word] = None
    return tuple(found)


# A word with a capital letter (Latin, Greek, Cyrillic), from its first character.
_CAPITALISED = re.compile(r"(?<![^\W_])[^\W\d_]*[A-ZÀ-ÖØ-ÞΑ-ΩА-ЯЁ][^\W_]*(?:['’][^\W_]+)*")
_WORD_CHARACTER = re.compile(r"[^\W_]")
_SENTENCE_BREAK = re.compile(r"[.!?:;。！？；\n•*]|(?:^|\s)-\s")
