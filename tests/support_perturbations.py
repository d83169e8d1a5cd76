"""The perturbation set for the support check, built from verified citations over the
repository's own fixtures.

Originals: the citations the real Messages API made in ``tests/fixtures/anthropic/`` (claim: the
text block; cited: its ``cited_text``), and each sentence of the fixtures' documents cited by
itself, as the local engine cites (the help-center articles and the first pages of the Amazon
letter). Each perturbation changes one thing and says which reason must flag it: the claim's
number changed, its unit or scale changed (million -> billion), a negation added or removed, an
entity swapped for one the cited text lacks, or the neighbouring sentence cited instead.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from app.documents.chunking import split_sentences
from app.documents.pdf import extract_pdf_text
from app.support.quantities import dates, quantities
from tests.fixture_files import AMAZON_PDF, FIXTURES


@dataclass(frozen=True, slots=True)
class Case:
    kind: str  # "original" or the perturbation
    claim: str
    cited: str
    expected: frozenset[str]  # reason codes that rightly flag it (empty for an original)
    others: tuple[str, ...] = ()


_RECORDED = (
    "grass_sky_char_location.json",
    "plaintext_multidoc_char_location.json",
    "single_doc_context_char_location.json",
    "custom_content_block_location.json",
    "pdf_page_location_amazon.json",
)


def _text_blocks(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, dict):
        if value.get("type") == "text" and value.get("citations"):
            yield value
        for item in value.values():
            yield from _text_blocks(item)
    elif isinstance(value, list):
        for item in value:
            yield from _text_blocks(item)


def recorded_originals() -> list[Case]:
    """The real API's citations: each with its segment's other citations."""
    cases = []
    for name in _RECORDED:
        for block in _text_blocks(json.loads((FIXTURES / name).read_text())):
            cited = [str(c.get("cited_text") or "") for c in block["citations"]]
            for i, text in enumerate(cited):
                others = tuple(cited[:i] + cited[i + 1 :])
                cases.append(Case("original", block["text"], text, frozenset(), others))
    return cases


@cache
def _documents() -> list[str]:
    texts = [path.read_text() for path in sorted((FIXTURES / "help_center").glob("*.txt"))]
    pdf = extract_pdf_text(AMAZON_PDF.read_bytes())
    texts.extend(pdf.pages[:4])
    return texts


def document_sentences() -> list[list[str]]:
    """Each fixture document's sentences (as chunking cuts them), the short ones left out."""
    documents = []
    for text in _documents():
        sentences = []
        for start, end in split_sentences(text):
            sentence = " ".join(text[start:end].split())
            if len(re.findall(r"[^\W\d_]{3,}", sentence)) >= 5:
                sentences.append(sentence)
        documents.append(sentences)
    return documents


def sentence_originals() -> list[Case]:
    return [
        Case("original", sentence, sentence, frozenset())
        for sentences in document_sentences()
        for sentence in sentences
    ]


def originals() -> list[Case]:
    return recorded_originals() + sentence_originals()


# What a perturbation may rightly be flagged for.
_NUMBER = frozenset({"number_not_in_source", "date_not_in_source"})
_UNIT = frozenset({"unit_mismatch"})
_NEGATION = frozenset({"negation_mismatch"})
_ENTITY = frozenset({"entity_not_in_source"})
_NEIGHBOUR = frozenset(
    {"low_overlap", "number_not_in_source", "entity_not_in_source", "date_not_in_source"}
)

_SCALE_SWAPS = {
    "million": "billion",
    "billion": "million",
    "B": "M",
    "M": "B",
    "thousand": "million",
    "%": " million",
    "hours": "days",
    "days": "weeks",
    "months": "years",
    "years": "months",
    "miles": "kilometers",
    "km": "miles",
    "percent": "points",
    "point": "dollars",
    "points": "dollars",
}
_AUXILIARIES = re.compile(
    r"\b(is|are|was|were|will|can|could|should|must|may|has|have|had|did)\b(?! not)"
)
_NEGATIONS = [
    (re.compile(r"\b(do|does|did|is|are|was|were|have|has|ca|wo)n['’]t\b", re.I), r"\1"),
    (re.compile(r"\b(\w+) not\b"), r"\1"),
    (re.compile(r"\bnever\b"), "always"),
    (re.compile(r"\bcannot\b"), "can"),
    (re.compile(r"\bno\b"), "some"),
    (re.compile(r"\bwithout\b"), "with"),
]
_ENTITY_POOL = ("Microsoft", "Walmart", "Toyota", "Berlin", "Nvidia", "Tesla", "Oracle")
_NAME = re.compile(r"(?<=[a-z,] )([A-Z][a-z]+(?:[A-Z][a-z]+)*)\b")


def _number_changed(case: Case) -> Case | None:
    found = [q for q in quantities(case.claim) if re.search(r"\d", q.text)]
    for date, _ in dates(case.claim):
        year = next((r[0] for r in date.readings if r[0] is not None), None)
        if year is not None:
            changed = date.text.replace(str(year), str(year - 3))
            return Case(
                "number_changed",
                case.claim.replace(date.text, changed, 1),
                case.cited,
                _NUMBER,
                case.others,
            )
    if not found:
        return None
    digits = re.findall(r"\d+", found[0].text)[0]
    new = str(int(digits) + 7)
    while new in case.cited:
        new = str(int(new) + 7)
    text = found[0].text.replace(digits, new, 1)
    claim = case.claim.replace(found[0].text, text, 1)
    return Case("number_changed", claim, case.cited, _NUMBER, case.others)


def _unit_changed(case: Case) -> Case | None:
    for quantity in quantities(case.claim, number_words=False):
        for old, new in _SCALE_SWAPS.items():
            if quantity.text.endswith(old) and quantity.text != old:
                text = quantity.text[: -len(old)] + new
                claim = case.claim.replace(quantity.text, text, 1)
                return Case("unit_changed", claim, case.cited, _UNIT, case.others)
    return None


def _negation_flipped(case: Case) -> Case | None:
    for pattern, replacement in _NEGATIONS:
        if pattern.search(case.claim):
            claim = pattern.sub(replacement, case.claim, count=1)
            return Case("negation_removed", claim, case.cited, _NEGATION, case.others)
    match = _AUXILIARIES.search(case.claim)
    if match is None:
        return None
    claim = case.claim[: match.end()] + " not" + case.claim[match.end() :]
    return Case("negation_added", claim, case.cited, _NEGATION, case.others)


def _entity_swapped(case: Case) -> Case | None:
    for match in _NAME.finditer(case.claim):
        entity = match.group(1)
        if entity.lower() in ("the",):
            continue
        swap = next(e for e in _ENTITY_POOL if e.lower() not in case.cited.lower())
        claim = case.claim[: match.start(1)] + swap + case.claim[match.end(1) :]
        return Case("entity_swapped", claim, case.cited, _ENTITY, case.others)
    return None


def perturbations() -> list[Case]:
    """Every perturbation the originals allow."""
    cases: list[Case] = []
    for case in originals():
        for perturb in (_number_changed, _unit_changed, _negation_flipped, _entity_swapped):
            made = perturb(case)
            if made is not None:
                cases.append(made)
    for sentences in document_sentences():
        for claim, neighbour in itertools.pairwise(sentences):
            cases.append(Case("neighbour_cited", claim, neighbour, _NEIGHBOUR))
    return cases
