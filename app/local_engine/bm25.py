"""Okapi BM25 over one request's chunks, with a small English tokenizer.

A compact implementation rather than a library: the corpus is built per request (a few hundred
to a few thousand sentences), so the index structures of ``bm25s`` (scipy sparse matrices, built
for large static corpora) would only add a heavy dependency, and ``rank-bm25`` has had no
release since 2022. Scores use the Lucene IDF, ``ln(1 + (N - n + 0.5) / (n + 0.5))``, which is
never negative, so a term found in every chunk still counts a little.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import lru_cache

from app.support.words import CJK_RUN

TOKENIZED_TEXTS = 50_000

_WORD = re.compile(r"\w+")

# Function words that say nothing about which sentence answers a question.
_STOPWORD_TEXT = """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its itself
    just me more most my myself no nor not of off on once only or other our ours ourselves out
    over own same she should so some such than that the their theirs them themselves then there
    these they this those through to too under until up very was we were what when where which
    while who whom why will with would you your yours yourself yourselves tell please much many
    s t"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def stem(word: str) -> str:
    """Fold a plural onto its singular ("colors" -> "color", "stories" -> "story"). (Snowball's
    English stemmer was tried: on the golden set it lost more answers than it found, a
    title's "Cancelling" then matching a question's "cancelled" as well as the sentence that
    answers.)"""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def _pairs(match: re.Match[str]) -> str:
    run = match.group()
    if len(run) == 1:
        return f" {run} "
    return " " + " ".join(run[i : i + 2] for i in range(len(run) - 1)) + " "


def tokenize(text: str) -> list[str]:
    """The words of a text that can match a question: case-folded, stemmed, no stopwords.
    Chinese and Japanese, written without spaces, are read as overlapping character pairs (as
    the search index reads them): a run of them is no one word. Remembered for the last
    ``TOKENIZED_TEXTS`` texts: the same documents come with question after question."""
    return list(tokens(text))


@lru_cache(maxsize=TOKENIZED_TEXTS)
def tokens(text: str) -> tuple[str, ...]:
    """``tokenize`` as a tuple, remembered (not to be changed by the caller)."""
    folded = text.casefold()
    if not folded.isascii() and CJK_RUN.search(folded):
        folded = CJK_RUN.sub(_pairs, folded)
    return tuple(stem(word) for word in _WORD.findall(folded) if word not in STOPWORDS)


class Bm25:
    """A BM25 index of tokenized documents (here: sentence chunks)."""

    def __init__(
        self, corpus: Sequence[Sequence[str]], *, k1: float = 1.5, b: float = 0.75
    ) -> None:
        self.k1 = k1
        self.b = b
        self._frequencies = [Counter(tokens) for tokens in corpus]
        self._lengths = [len(tokens) for tokens in corpus]
        total = sum(self._lengths)
        self._average_length = total / len(corpus) if total else 1.0
        containing: Counter[str] = Counter()
        for frequencies in self._frequencies:
            containing.update(frequencies.keys())
        count = len(corpus)
        self.count = count
        self._containing = containing
        self._idf = {
            term: math.log(1.0 + (count - n + 0.5) / (n + 0.5)) for term, n in containing.items()
        }

    def containing(self, term: str) -> int:
        """How many documents hold the term."""
        return self._containing.get(term, 0)

    def idf(self, term: str) -> float:
        """The inverse document frequency of a term (0 for a term no document has)."""
        return self._idf.get(term, 0.0)

    def scores(
        self, query: Sequence[str], weights: Mapping[str, float] | None = None
    ) -> list[float]:
        """The score of every document for a tokenized query; each distinct term counts once,
        times its weight in ``weights`` (1 when absent)."""
        weights = weights or {}
        terms = [
            (term, self._idf[term] * weights.get(term, 1.0))
            for term in dict.fromkeys(query)
            if term in self._idf
        ]
        k1 = self.k1
        results: list[float] = []
        for frequencies, length in zip(self._frequencies, self._lengths, strict=True):
            norm = k1 * (1.0 - self.b + self.b * length / self._average_length)
            score = 0.0
            for term, weight in terms:
                frequency = frequencies.get(term, 0)
                if frequency:
                    score += weight * frequency * (k1 + 1.0) / (frequency + norm)
            results.append(score)
        return results
