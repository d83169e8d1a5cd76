"""The local engine's tokenizer and BM25 scoring."""

from __future__ import annotations

import math

import pytest

from app.local_engine.bm25 import Bm25, stem, tokenize


def test_tokenize_drops_function_words_and_folds_plurals() -> None:
    assert tokenize("What color is the grass and sky?") == ["color", "grass", "sky"]
    assert tokenize("Amazon’s REVENUES grew") == ["amazon", "revenue", "grew"]
    assert [stem(word) for word in ("stories", "grass", "bus", "colors")] == [
        "story",
        "grass",
        "bus",
        "color",
    ]


def test_bm25_score_matches_the_formula_on_a_hand_computed_case() -> None:
    # N=2, the term is in one document: idf = ln(1 + 1.5/1.5) = ln 2; the document has the
    # average length, so its score is idf * (k1 + 1) / (1 + k1) = ln 2.
    index = Bm25([["grass", "green"], ["sky", "blue"]])
    assert index.scores(["grass"]) == [pytest.approx(math.log(2)), 0.0]
    assert index.idf("grass") == pytest.approx(math.log(2))
    assert index.idf("absent") == 0.0


def test_bm25_saturates_term_frequency_and_prefers_shorter_documents() -> None:
    once, twice, long_once = ["cat", "x"], ["cat", "cat"], ["cat", "x", "y", "z", "w", "v"]
    scores = Bm25([once, twice, long_once, ["dog", "x"]]).scores(["cat"])
    assert scores[0] < scores[1] < 2 * scores[0]
    assert scores[2] < scores[0]
    assert scores[3] == 0.0


def test_bm25_counts_a_repeated_query_word_once() -> None:
    index = Bm25([["year", "growth"], ["cost"]])
    assert index.scores(["year", "year"]) == index.scores(["year"])
