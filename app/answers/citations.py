"""Resolve the upstream's citations to spans of our stored documents. Pure functions.

Every citation keeps every field the upstream sent and gains ``document_id``, ``span`` and
``verified``. A citation that cannot be located keeps ``span: null`` and ``verified: false``;
nothing here raises on what the upstream sends. A citation of a page window is made one of
the stored document: its ``document_index`` is that document's place among the question's
documents, and its page numbers are the original's.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from app.answers.answer import SupportMode
from app.answers.prompt import passage_blocks
from app.documents.index import DocumentIndex, merged_locator, same_passage
from app.documents.kinds import all_kinds, kind_named
from app.documents.sources import PromptDocument
from app.search.passages import Passage
from app.support.lexical import UNCHECKED, check_support

log = logging.getLogger(__name__)

# The citation types that point into stored documents: one per kind, and those some also get.
_DOCUMENT_CITATIONS = frozenset(
    {kind.citation_type for kind in all_kinds()}.union(
        *(kind.also_cited_by for kind in all_kinds())
    )
)


def resolve_citation(
    citation: dict[str, Any],
    documents: Sequence[DocumentIndex | None],
    passages: Sequence[Passage] = (),
    sent: Sequence[PromptDocument] | None = None,
) -> dict[str, Any]:
    """The citation with ``document_id``, ``span`` and ``verified`` added to its fields.

    ``documents`` are the request's documents in order; None for one that is not a stored
    document (a caller's own, in the Anthropic-compatible API): nothing to resolve. ``sent``
    are the request's document blocks when they are not ``documents`` one for one (a document
    sent as page windows): the upstream's ``document_index`` counts those."""
    resolved = {**citation, "document_id": None, "span": None, "verified": False}
    if citation.get("type") == "search_result_location":
        return _resolve_search_result(resolved, passages)
    index = citation.get("document_index")
    if citation.get("type") not in _DOCUMENT_CITATIONS:
        return resolved  # web results point outside our store
    count = len(documents) if sent is None else len(sent)
    if not isinstance(index, int) or not 0 <= index < count:
        log.warning("citation points at document_index %r, out of range", index)
        return resolved
    block = None if sent is None else sent[index]
    if block is not None:
        places = [i for i, d in enumerate(documents) if d and d.document_id == block.document_id]
        if not places:
            return resolved
        index = resolved["document_index"] = places[0]
    document = documents[index]
    if document is None:
        return resolved
    resolved["document_id"] = document.document_id
    kind = kind_named(document.kind)
    if citation["type"] != kind.citation_type and citation["type"] not in kind.also_cited_by:
        log.warning("a %s citation of a %s document", citation["type"], kind.name)
        return resolved
    if block is not None and block.window is not None:
        in_original = kind.from_window(resolved, block.window)
        if in_original is None:
            log.warning("citation points outside its page window %r", block.window)
            return resolved
        resolved = in_original
    found = kind.locate(resolved, document)
    if found is not None:
        resolved["span"] = document.span(*found)
        resolved["verified"] = same_passage(
            document.text[found[0] : found[1]], str(citation.get("cited_text") or "")
        )
    return resolved


def _resolve_search_result(resolved: dict[str, Any], passages: Sequence[Passage]) -> dict[str, Any]:
    """A passage's blocks are chunks of a stored document: the cited blocks are its span."""
    index = resolved.get("search_result_index")
    if not isinstance(index, int) or not 0 <= index < len(passages):
        log.warning("citation points at search_result_index %r, out of range", index)
        return resolved
    passage = passages[index]
    resolved["document_id"] = passage.document_id
    blocks = passage_blocks(passage)
    first, end = resolved.get("start_block_index"), resolved.get("end_block_index")
    if (
        not isinstance(first, int)
        or not isinstance(end, int)
        or not 0 <= first < end <= len(blocks)
    ):
        return resolved
    cited = blocks[first:end]
    start, stop = cited[0].start_char, cited[-1].end_char
    resolved["span"] = {
        "start_char": start,
        "end_char": stop,
        # A passage never crosses a page.
        "start_page": passage.start_page,
        "end_page": passage.end_page,
        "chunk_indices": [block.chunk_index for block in cited],
        "locator": merged_locator([block.locator for block in cited]),
    }
    stored = passage.text[start - passage.start_char : stop - passage.start_char]
    resolved["verified"] = same_passage(stored, str(resolved.get("cited_text") or ""))
    return resolved


def with_support(
    text: str, citations: Sequence[dict[str, Any]], support: SupportMode
) -> list[dict[str, Any]]:
    """The resolved citations of a segment with ``text``, each with ``support``: checked by
    the lexical check against the segment (and the segment's other citations), or
    ``unchecked`` when support is ``off``. (The judge's verdicts replace some later.)"""
    cited = [str(citation.get("cited_text") or "") for citation in citations]
    checked = []
    for i, citation in enumerate(citations):
        if support == "off":
            verdict = UNCHECKED
        else:
            verdict = check_support(text, cited[i], others=cited[:i] + cited[i + 1 :])
        checked.append({**citation, "support": verdict.as_dict()})
    return checked


def build_segments(
    content: Sequence[dict[str, Any]],
    documents: Sequence[DocumentIndex | None],
    passages: Sequence[Passage] = (),
    sent: Sequence[PromptDocument] | None = None,
    support: SupportMode | None = None,
) -> tuple[str, list[dict[str, Any]]]:
    """The answer text and its segments: one per upstream text block, citations resolved
    (``sent`` as for ``resolve_citation``), each with its ``support`` unless ``support`` is
    None (an answer still streaming)."""
    segments: list[dict[str, Any]] = []
    position = 0
    for block in content:
        if block.get("type") != "text":
            continue
        text = str(block.get("text") or "")
        citations = [
            resolve_citation(c, documents, passages, sent) for c in block.get("citations") or []
        ]
        if support is not None and citations:
            citations = with_support(text, citations, support)
        segments.append(
            {"text": text, "start": position, "end": position + len(text), "citations": citations}
        )
        position += len(text)
    return "".join(segment["text"] for segment in segments), segments
