"""searchPassages: the passages of some of the tenant's documents that best match a query."""

from __future__ import annotations

from collections.abc import Sequence

from cachetools import LRUCache
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import Collection
from app.db.tenancy import get_owned, titles_of
from app.search import index
from app.search.passages import Passage, build_windows, candidate_hits, ranges_to_read
from app.search.terms import affordable_terms, query_terms, rarity

__all__ = ["Passage", "search_collection_passages", "search_passages"]

# Chunks ranked for one search at most, about (see app.search.terms.affordable_terms).
MATCH_BUDGET = 2000


class WordCounts:
    """How many of a tenant's chunks match each word (capped at MATCH_BUDGET + 1), as counted
    at a generation of the tenant's index (``index.Statistics``), for this process: a search
    counts only the words it has not seen since the tenant's chunks last changed. Each
    process's own; the generation, read by every search, tells when its counts are stale (it
    starts at a random number, so another database under the same name never matches it).
    Bounded: the tenants searched last (an LRU), and so many words each (then their words
    start over).
    """

    def __init__(self, tenants: int = 1024, words: int = 4096) -> None:
        self._words = words
        self._counts: LRUCache[str, tuple[int, dict[str, int]]] = LRUCache(maxsize=tenants)

    def known(self, tenant_id: str, generation: int) -> dict[str, int]:
        """The counts known for the tenant at that generation (to read, not to change)."""
        entry = self._counts.get(tenant_id)
        return entry[1] if entry is not None and entry[0] == generation else {}

    def learn(self, tenant_id: str, generation: int, counts: dict[str, int]) -> None:
        entry = self._counts.get(tenant_id)
        if entry is None or entry[0] != generation or len(entry[1]) + len(counts) > self._words:
            entry = self._counts[tenant_id] = (generation, {})
        entry[1].update(counts)

    def clear(self) -> None:
        self._counts.clear()


word_counts = WordCounts()


async def search_passages(
    session: AsyncSession,
    tenant_id: str,
    query: str,
    document_ids: Sequence[str],
    limit: int,
    *,
    window: int,
    per_document: int,
) -> list[Passage]:
    """The best ``limit`` passages of the tenant's documents among ``document_ids``, best first.

    Any query is words (see app.search.terms): one with no words finds nothing. Ids that are
    not the tenant's documents find nothing either; callers check them first when that is a 404.
    """
    scope = index.Scope(document_ids=document_ids)
    return await _search(session, tenant_id, query, scope, limit, window, per_document)


async def search_collection_passages(
    session: AsyncSession,
    tenant_id: str,
    query: str,
    collection_id: str,
    limit: int,
    *,
    window: int,
    per_document: int,
) -> list[Passage]:
    """``search_passages`` over the documents of the tenant's collection (404
    ``collection_not_found``), without reading its document ids first."""
    await get_owned(session, Collection, tenant_id, collection_id, "collection")
    scope = index.Scope(collection_id=collection_id)
    return await _search(session, tenant_id, query, scope, limit, window, per_document)


async def _search(
    session: AsyncSession,
    tenant_id: str,
    query: str,
    scope: index.Scope,
    limit: int,
    window: int,
    per_document: int,
) -> list[Passage]:
    terms = query_terms(query)
    if not terms or limit < 1:
        return []
    statistics = await index.statistics(session, tenant_id)
    if statistics.chunk_count <= 0:
        return []
    counts = await _counts(session, tenant_id, terms, statistics)
    kept = affordable_terms(terms, [counts[term] for term in terms], MATCH_BUDGET)
    weights = {term: rarity(statistics.chunk_count, counts[term]) for term in kept}
    # The index ranks more chunks than passages are wanted: neighbours merge and documents
    # are capped, so several hits may end in one passage.
    ranked = await index.ranked_chunks(
        session, tenant_id, weights, scope, limit * (2 * window + 1) * 2, large=statistics.large
    )
    hits = candidate_hits(ranked, limit, per_document, window)
    chunks = await index.read_chunks(session, ranges_to_read(hits, window))
    windows = build_windows(hits, chunks, limit=limit, window=window, per_document=per_document)
    titles = await titles_of(session, tenant_id, {w.document_id for w in windows})
    return [
        Passage(
            document_id=w.document_id,
            title=titles.get(w.document_id),
            text="".join(chunk.text for chunk in w.chunks),
            start_char=w.chunks[0].start_char,
            end_char=w.chunks[-1].end_char,
            start_page=w.chunks[0].page_number,
            end_page=w.chunks[-1].page_number,
            chunk_indices=[chunk.chunk_index for chunk in w.chunks],
            score=w.score,
            chunk_texts=[chunk.text for chunk in w.chunks],
            chunk_locators=[chunk.locator for chunk in w.chunks],
        )
        for w in windows
    ]


async def _counts(
    session: AsyncSession, tenant_id: str, terms: list[str], statistics: index.Statistics
) -> dict[str, int]:
    """How many of the tenant's chunks match each term (capped), counting only those this
    process has not counted since the tenant's chunks last changed."""
    known = word_counts.known(tenant_id, statistics.generation)
    unknown = [term for term in terms if term not in known]
    counted = await index.match_counts(
        session, tenant_id, unknown, MATCH_BUDGET + 1, large=statistics.large
    )
    fresh = dict(zip(unknown, counted, strict=True))
    if fresh:
        word_counts.learn(tenant_id, statistics.generation, fresh)
    return {term: known.get(term, fresh.get(term, 0)) for term in terms}
