"""The lexical support check: spellings of one quantity agree, what is missing is named, and
on the perturbation set built from the fixtures' verified citations it flags the perturbed
claims and leaves the originals alone."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.support.lexical import Support, check_support
from tests.support_perturbations import Case, originals, perturbations


def codes(support: Support) -> set[str]:
    return {reason.code for reason in support.reasons}


@pytest.mark.parametrize(
    ("claim", "cited"),
    [
        ("Revenue reached $575B in the year.", "Revenue reached 575 billion dollars in the year."),
        ("Revenue reached $575 billion.", "Revenue reached US$575bn."),
        ("Revenue reached $575B.", "Revenue reached $574.8 billion."),  # rounded
        ("Sales grew 12% last year.", "Sales grew 12 percent last year."),
        ("Sales grew 12 per cent last year.", "Sales grew 12% last year."),
        ("The fund holds 1,234,567 shares.", "The fund holds 1234567 shares."),
        ("Der Fonds hält 1.234.567 Aktien.", "Der Fonds hält 1234567 Aktien."),
        ("Le fonds détient 1\u202f234\u202f567 actions.", "Le fonds détient 1234567 actions."),
        ("Der Fonds hält 1'234'567 Aktien.", "Der Fonds hält 1234567 Aktien."),
        ("Die Quote lag bei 3,5 Prozent.", "Die Quote lag bei 3.5 %."),
        ("The meeting was on March 5, 2024.", "The meeting was on 2024-03-05."),
        ("The meeting was on 5 March 2024.", "The meeting was on March 5th, 2024."),
        ("The meeting was in March 2024.", "The meeting was on 05/03/2024."),
        ("Points expire 12 months after they are earned.", "Points expire twelve months after."),
        ("Amazon's revenue grew.", "Amazon’s revenue grew strongly."),
        ("亚马逊的收入增长了12%。", "2023年，亚马逊的总收入增长了12%。"),
        ("Выручка выросла на 12%.", "В 2023 году выручка выросла на 12 процентов."),
    ],
)
def test_spellings_of_one_fact_support_each_other(claim: str, cited: str) -> None:
    support = check_support(claim, cited)
    assert support.verdict == "supported", support
    assert support.method == "lexical"
    assert support.reasons == ()


@pytest.mark.parametrize(
    ("claim", "cited", "code", "named"),
    [
        ("Sales grew 13% last year.", "Sales grew 12% last year.", "number_not_in_source", "13%"),
        (
            "Revenue reached $575 million.",
            "Revenue reached $575B.",
            "unit_mismatch",
            "$575 million",
        ),
        ("The trail is 12 km long.", "The trail is 12 miles long.", "unit_mismatch", "12 km"),
        (
            "It opened on March 6, 2024.",
            "It opened on March 5, 2024.",
            "date_not_in_source",
            "March 6, 2024",
        ),
        (
            "The store is not open on Sundays.",
            "The store is open on Sundays.",
            "negation_mismatch",
            "not",
        ),
        (
            "The store is open on Sundays.",
            "The store isn't open on Sundays.",
            "negation_mismatch",
            "The store is open on Sundays.",
        ),
        (
            "Revenue at Walmart grew 12%.",
            "Revenue at Amazon grew 12%.",
            "entity_not_in_source",
            "Walmart",
        ),
        (
            "Kuiper satellites launch from Florida.",
            "Points expire 12 months after they are earned.",
            "low_overlap",
            "kuiper",
        ),
    ],
)
def test_what_is_missing_is_named(claim: str, cited: str, code: str, named: str) -> None:
    support = check_support(claim, cited)
    assert support.verdict in ("partial", "unsupported")
    reason = next(r for r in support.reasons if r.code == code)
    assert named in reason.claim
    assert reason.detail
    assert support.score < 1


def test_a_contradiction_is_unsupported_and_a_wrong_figure_partial() -> None:
    assert check_support("It is not green.", "It is green.").verdict == "unsupported"
    assert check_support("The grass grew 5 cm.", "The grass grew 4 cm.").verdict == "partial"


def test_an_empty_cited_text_is_unchecked() -> None:
    assert check_support("Anything at all.", "").verdict == "unchecked"


def test_each_citation_answers_for_the_sentences_it_supports_best() -> None:
    claim = (
        "You'll get an email once your order ships. "
        "If no tracking number arrives within 48 hours, contact support."
    )
    first = "Once your order ships, you'll receive an email with a tracking number."
    second = "If you haven't received a tracking number within 48 hours, contact support."
    assert check_support(claim, first, others=[second]).verdict == "supported"
    assert check_support(claim, second, others=[first]).verdict == "supported"
    # Alone, the first citation does not hold the claim's 48 hours.
    assert "number_not_in_source" in codes(check_support(claim, first))


def test_the_language_chooses_the_stemmer() -> None:
    # German stems "Umsätze" and "Umsatz" alike; English (guessed from nothing) does not.
    claim, cited = "Die Umsätze stiegen deutlich.", "Der Umsatz stieg deutlich."
    assert check_support(claim, cited, "de").verdict == "supported"


_WORDS = st.sampled_from(
    "revenue growth customers orders shipping warehouse satellite payment account "
    "delivery loyalty points reward password security inventory".split()
)
_FILLERS = st.sampled_from(["the", "of", "and", "for", "in", "with"])


@st.composite
def sentences(draw: st.DrawFn) -> str:
    words = draw(st.lists(st.one_of(_WORDS, _FILLERS), min_size=3, max_size=15))
    number = draw(st.integers(min_value=0, max_value=10**9))
    at = draw(st.integers(min_value=0, max_value=len(words)))
    words.insert(at, f"{number:,}")
    return " ".join(words).capitalize() + "."


@settings(max_examples=200, deadline=None)
@given(sentences())
def test_a_quote_supports_itself(sentence: str) -> None:
    assert check_support(sentence, sentence).verdict == "supported"


@settings(max_examples=200, deadline=None)
@given(sentences(), st.integers(min_value=1, max_value=10**6))
def test_a_changed_figure_is_named(sentence: str, change: int) -> None:
    figure = next(word for word in sentence.rstrip(".").split() if word[0].isdigit())
    value = int(figure.replace(",", "")) + change
    claim = sentence.replace(figure, f"{value:,}", 1)
    support = check_support(claim, sentence)
    assert support.verdict != "supported"
    assert "number_not_in_source" in codes(support)


_SCALES = [("thousand", "K", 10**3), ("million", "M", 10**6), ("billion", "B", 10**9)]


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=999), st.sampled_from(_SCALES))
def test_an_amount_reads_the_same_in_words_letters_and_digits(
    number: int, scale: tuple[str, str, int]
) -> None:
    word, letter, factor = scale
    spellings = [f"${number}{letter}", f"{number} {word} dollars", f"${number * factor:,}"]
    for claim in spellings:
        for cited in spellings:
            support = check_support(
                f"Sales were {claim} in total.", f"Sales were {cited} in total."
            )
            assert support.verdict == "supported", (claim, cited, support)


@settings(max_examples=300, deadline=None)
@given(
    st.text(max_size=300), st.text(max_size=300), st.sampled_from([None, "en", "de", "zh", "xx"])
)
def test_any_text_gets_a_verdict(claim: str, cited: str, language: str | None) -> None:
    support = check_support(claim, cited, language)
    assert support.verdict in ("supported", "partial", "unsupported", "unchecked")
    assert 0.0 <= support.score <= 1.0
    assert support.as_dict()["method"] == "lexical"


def _flagged(case: Case) -> tuple[bool, set[str]]:
    """Whether some citation of the case's segment is flagged, and for what."""
    texts = [case.cited, *case.others]
    found: set[str] = set()
    flagged = False
    for i, text in enumerate(texts):
        support = check_support(case.claim, text, others=texts[:i] + texts[i + 1 :])
        if support.verdict != "supported":
            flagged = True
            found |= codes(support)
    return flagged, found


def test_the_originals_are_supported() -> None:
    cases = originals()
    assert len(cases) >= 100
    flagged = [case for case in cases if _flagged(case)[0]]
    assert len(flagged) <= 0.05 * len(cases), flagged[:5]


def test_the_perturbed_claims_are_flagged_for_the_right_reason() -> None:
    cases = perturbations()
    kinds = Counter(case.kind for case in cases)
    assert set(kinds) == {
        "number_changed",
        "unit_changed",
        "negation_added",
        "negation_removed",
        "entity_swapped",
        "neighbour_cited",
    }
    assert min(kinds.values()) >= 10, kinds
    caught: Counter[str] = Counter()
    for case in cases:
        flagged, found = _flagged(case)
        if flagged and found & case.expected:
            caught[case.kind] += 1
    assert sum(caught.values()) >= 0.9 * len(cases), (caught, kinds)
    for kind, count in kinds.items():  # no kind of change slips through unnoticed
        assert caught[kind] >= 0.8 * count, (kind, caught[kind], count)
