"""The registry of document kinds: every kind has every part, and the rest of Citegate finds
kinds through it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from app.documents.index import DocumentIndex, IndexedChunk
from app.documents.kinds import (
    DocumentKind,
    StoredParts,
    all_kinds,
    kind_for_media_type,
    kind_named,
)
from app.documents.kinds.base import ParsedDocument

APP = Path(__file__).parents[2] / "app"
CITATION_TYPES = {"char_location", "page_location", "content_block_location"}


@pytest.mark.parametrize("kind", all_kinds(), ids=lambda kind: kind.name)
def test_every_kind_has_every_part(kind: DocumentKind) -> None:
    assert kind.name and kind.name.isidentifier()
    assert kind_named(kind.name) is kind
    assert kind_for_media_type(kind.media_type) is kind
    assert kind_for_media_type(kind.media_type.upper() + "; charset=utf-8") is kind
    assert kind.citation_type in CITATION_TYPES
    assert kind.content_schema.get("type") in {"string", "array"}
    assert (kind.signature is None) == (kind.signature_within == 0)
    assert kind.mismatch is None or kind.signature is not None
    for method in ("parse", "upstream_source", "locate"):
        assert getattr(type(kind), method) is not getattr(DocumentKind, method), method


def test_names_media_types_and_citation_types_are_each_one_kinds() -> None:
    kinds = all_kinds()
    for attribute in ("name", "media_type", "citation_type"):
        values = [getattr(kind, attribute) for kind in kinds]
        assert len(set(values)) == len(values), attribute


# A sample of each kind's stored bytes, what it parses them into, and a citation of its type.
SAMPLES = {
    "text": (b"The grass is green. The sky is blue.", "The sky is blue."),
    "content": (b'[{"type":"text","text":"First."},{"type":"text","text":"Second."}]', "Second."),
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_a_kind_parses_sends_and_maps_its_citations_back(name: str) -> None:
    kind = kind_named(name)
    data, cited = SAMPLES[name]
    parsed = kind.parse(data)
    assert isinstance(parsed, ParsedDocument)
    assert parsed.chunks[0].start == 0 and parsed.chunks[-1].end == len(parsed.text)
    texts = [parsed.text[c.start : c.end] for c in parsed.chunks]
    source = kind.upstream_source(StoredParts(parsed.text, texts, data))
    assert source["type"] in {"text", "base64", "content"}
    index = DocumentIndex(
        "doc_x",
        kind.name,
        parsed.text,
        [IndexedChunk(c.start, c.end, c.page_number, c.block_index) for c in parsed.chunks],
        parsed.page_count,
    )
    start = parsed.text.index(cited)
    citation = {
        "type": kind.citation_type,
        "cited_text": cited,
        "start_char_index": start,
        "end_char_index": start + len(cited),
        "start_block_index": len(texts) - 1,
        "end_block_index": len(texts),
    }
    assert kind.locate(citation, index) == (start, start + len(cited))


def test_no_code_outside_the_kinds_compares_a_kind_name() -> None:
    """Nothing switches on a kind's name: no `x.kind == "pdf"` outside app/documents/kinds."""
    names = {kind.name for kind in all_kinds()}
    offenders = []
    for path in APP.rglob("*.py"):
        if "kinds" in path.parts or "local_engine" in path.parts:
            continue  # the local engine reads the wire's source types, not our kinds
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                attrs = [o for o in operands if isinstance(o, ast.Attribute) and o.attr == "kind"]
                literals = [o for o in operands if isinstance(o, ast.Constant) and o.value in names]
                if attrs and literals:
                    offenders.append(f"{path.relative_to(APP)}:{node.lineno}")
    assert not offenders, f"compare kinds through app.documents.kinds, not by name: {offenders}"
