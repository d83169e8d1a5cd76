"""Resolve the upstream's citations to spans of our stored documents. Pure functions.

Every citation keeps every field the upstream sent and gains ``document_id``, ``span`` and
``verified``. A citation that cannot be located keeps ``span: null`` and ``verified: false``;
nothing here raises on what the upstream sends.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from app.documents.index import DocumentIndex, same_passage
from app.documents.kinds import all_kinds, kind_named

log = logging.getLogger(__name__)

# The citation types that point into stored documents: one per kind.
_DOCUMENT_CITATIONS = frozenset(kind.citation_type for kind in all_kinds())


def resolve_citation(
    citation: dict[str, Any], documents: Sequence[DocumentIndex]
) -> dict[str, Any]:
    """The citation with ``document_id``, ``span`` and ``verified`` added to its fields."""
    resolved = {**citation, "document_id": None, "span": None, "verified": False}
    index = citation.get("document_index")
    if citation.get("type") not in _DOCUMENT_CITATIONS:
        return resolved  # search results and web results point outside our store
    if not isinstance(index, int) or not 0 <= index < len(documents):
        log.warning("citation points at document_index %r, out of range", index)
        return resolved
    document = documents[index]
    resolved["document_id"] = document.document_id
    kind = kind_named(document.kind)
    if citation["type"] != kind.citation_type:
        log.warning("a %s citation of a %s document", citation["type"], kind.name)
        return resolved
    found = kind.locate(citation, document)
    if found is not None:
        resolved["span"] = document.span(*found)
        resolved["verified"] = same_passage(
            document.text[found[0] : found[1]], str(citation.get("cited_text") or "")
        )
    return resolved


def build_segments(
    content: Sequence[dict[str, Any]], documents: Sequence[DocumentIndex]
) -> tuple[str, list[dict[str, Any]]]:
    """The answer text and its segments: one per upstream text block, citations resolved."""
    segments: list[dict[str, Any]] = []
    position = 0
    for block in content:
        if block.get("type") != "text":
            continue
        text = str(block.get("text") or "")
        citations = [resolve_citation(c, documents) for c in block.get("citations") or []]
        segments.append(
            {"text": text, "start": position, "end": position + len(text), "citations": citations}
        )
        position += len(text)
    return "".join(segment["text"] for segment in segments), segments
