"""The words of a text as the search index sees them, and of a query as the user meant them.

Both databases split text into words themselves (FTS5's ``unicode61``, PostgreSQL's parser), but
neither finds words in Chinese or Japanese, which have no spaces: a run of such characters would
be one giant token. ``indexed_text`` rewrites those runs as overlapping bigrams, the usual
dictionary-free way to index them, and ``query_terms`` makes the same bigrams of a query.

A query is never passed to the database's query syntax: it is cut into words made only of
letters and digits, and those are OR-ed together (ranking does the rest), so quotes, ``AND``,
``NEAR``, ``*``, ``-``, parentheses, colons or SQL in a query are only ever words, or nothing.
"""

from __future__ import annotations

import math
import re

# Han (with extensions and compatibility ideographs), hiragana, katakana, half-width katakana.
_CJK = (
    "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"
    "\U00020000-\U0002fa1f"
)
_CJK_RUN = re.compile(f"[{_CJK}]+")
_WORD = re.compile(r"[^\W_]+")

MAX_QUERY_TERMS = 64

# Words so common that they only slow a search down and blur its ranking (English, German,
# Russian). Only queries drop them: the index keeps every word.
STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its
    itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    der die das den dem des ein eine einer eines einem einen und oder aber ist sind war waren
    wird werden wurde nicht auch auf aus bei mit nach von vor zu zum zur im in an am als wie
    was wer wo es er sie wir ihr ich du man sich dass daß so noch nur schon für über unter um
    и в во не что он на я с со как а то все она так его но да ты к у же вы за бы по только
    ее мне было вот от меня еще нет о из ему теперь когда даже ну вдруг ли если уже или ни
    быть был него до вас нибудь опять уж вам ведь там потом себя ничего ей может они тут где
    есть надо ней для мы тебя их чем была сам чтоб без будто чего раз тоже себе под будет ж
    тогда кто этот того потому этого какой совсем ним здесь этом один почти мой тем чтобы нее
    """.split()
)


def _bigrams(match: re.Match[str]) -> str:
    run = match.group()
    if len(run) == 1:
        return f" {run} "
    return " " + " ".join(run[i : i + 2] for i in range(len(run) - 1)) + " "


def indexed_text(text: str) -> str | None:
    """What the index should read instead of ``text``, or None when it can read the text as it
    is (no Chinese or Japanese in it): most chunks store nothing extra."""
    if _CJK_RUN.search(text) is None:
        return None
    return _CJK_RUN.sub(_bigrams, text)


def query_terms(query: str) -> list[str]:
    """The query's words, lower-cased, each once, in order: letters and digits only.

    Common words are left out unless the query has nothing else."""
    words = _WORD.findall(_CJK_RUN.sub(_bigrams, query).lower())
    unique = list(dict.fromkeys(words))
    meaningful = [word for word in unique if word not in STOPWORDS]
    return (meaningful or unique)[:MAX_QUERY_TERMS]


def fts5_match(terms: list[str]) -> str:
    """An FTS5 MATCH expression: any of the terms, each a quoted string (never syntax)."""
    return " OR ".join(f'"{term}"' for term in terms)


def tsquery(terms: list[str]) -> str:
    """A ``to_tsquery`` expression: any of the terms. Terms hold only letters and digits, none
    of which is tsquery syntax."""
    return " | ".join(terms)


def affordable_terms(terms: list[str], counts: list[int], budget: int) -> list[str]:
    """The terms worth ranking by, in query order: the rarest first, for as long as the
    chunks they match stay within ``budget``, and always the rarest one that matches.
    ``counts``: how many of the searching tenant's chunks each term matches (capped), never
    counts over all tenants, so that what another tenant stores never changes the words a
    search ranks by.

    Ranking costs time for every chunk that matches, and the common words of a query (a
    word in every fiftieth chunk of a large library) add most of the chunks and the least to
    the ranking: the rarer a word, the more weight BM25 gives it. Terms that match nothing go.
    """
    by_rarity = sorted((count, position) for position, count in enumerate(counts) if count > 0)
    kept: set[int] = set()
    total = 0
    for count, position in by_rarity:
        if kept and total + count > budget:
            break
        kept.add(position)
        total += count
    return [term for position, term in enumerate(terms) if position in kept]


def rarity(total: int, count: int) -> float:
    """How much a word weighs in a search: BM25's inverse document frequency of a word that
    ``count`` of a tenant's ``total`` chunks hold (always above 0; the rarer, the more). Read
    one after the other, the two may disagree for a moment: a count above the total is the
    total."""
    count = min(count, total)
    return math.log(1 + (total - count + 0.5) / (count + 0.5))
