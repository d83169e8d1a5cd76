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
    kind_for_filename,
    kind_for_media_type,
    kind_named,
)
from app.documents.kinds.base import ParsedDocument
from tests.office_files import slides_file, word_file, workbook_file

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


def test_names_media_types_hints_and_extensions_are_each_one_kinds() -> None:
    # Citation types are shared: converted kinds are cited as text or content blocks are.
    kinds = all_kinds()
    for attribute in ("name", "media_type"):
        values = [getattr(kind, attribute) for kind in kinds]
        assert len(set(values)) == len(values), attribute
    hints = [t.lower() for kind in kinds for t in (kind.media_type, *kind.hint_media_types)]
    assert len(set(hints)) == len(hints)
    extensions = [extension for kind in kinds for extension in kind.extensions]
    assert len(set(extensions)) == len(extensions)
    for kind in kinds:
        for extension in kind.extensions:
            assert kind_for_filename(f"Some File{extension.upper()}") is kind


# A sample of each kind's stored bytes, what it parses them into, and a citation of its type.
SAMPLES = {
    "text": (b"The grass is green. The sky is blue.", "The sky is blue."),
    "content": (b'[{"type":"text","text":"First."},{"type":"text","text":"Second."}]', "Second."),
    "docx": (word_file(["The grass is green.", "The sky is blue."]), "The sky is blue."),
    "html": (b"<!doctype html><p>The grass is green.</p><p>The sky is blue.", "The sky is blue."),
    "markdown": (b"# Colours\nThe grass is green. The sky is blue.\n", "The sky is blue."),
    "csv": (b"colour,thing\ngreen,grass\nblue,sky\n", "Row 3\ncolour: blue\nthing: sky\n\n"),
    "tsv": (b"colour\tthing\nblue\tsky\n", "Row 2\ncolour: blue\nthing: sky\n\n"),
    "xlsx": (
        workbook_file({"S": [["colour"], ["green"], ["blue"]]}),
        "Sheet S, row 3\ncolour: blue\n\n",
    ),
    "pptx": (slides_file([("Sky", "It is blue.", "")]), "Slide 1: Sky\nIt is blue.\n\n"),
}


def test_every_kind_has_a_sample() -> None:
    assert set(SAMPLES) == {kind.name for kind in all_kinds()} - {"pdf"}  # PDFs: test_pdf*.py


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
        [
            IndexedChunk(c.start, c.end, c.page_number, c.block_index, c.locator)
            for c in parsed.chunks
        ],
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
    span = index.span(start, start + len(cited))
    assert span["locator"] == parsed.chunks[span["chunk_indices"][0]].locator
    if kind.sends_original:
        assert kind.upstream_source(StoredParts(parsed.text, texts, data)) == source
    else:  # what the upstream cites is the stored text, never the original bytes
        assert "".join(_source_texts(source)) == parsed.text


def _source_texts(source: dict[str, object]) -> list[str]:
    if source["type"] == "text":
        return [str(source["data"])]
    return [str(block["text"]) for block in source["content"]]  # type: ignore[attr-defined]


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


def _merged_table() -> bytes:
    """A .docx written by python-docx whose table merges cells across, down, and both."""
    import io

    import docx

    document = docx.Document()
    table = document.add_table(rows=3, cols=4)
    rows = [row.cells for row in table.rows]
    cells = {
        (0, 0): "City",
        (1, 0): "Lyon",
        (2, 0): "Porto",
        (0, 3): "Note",
    }
    for (row, column), text in cells.items():
        rows[row][column].text = text
    rows[0][1].merge(rows[0][2]).text = "Staff"  # across
    rows[1][1].merge(rows[2][2]).text = "Twelve  people"  # two columns, two rows
    rows[1][3].merge(rows[2][3]).text = "Open\ndaily"  # down
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def test_a_merged_word_cell_is_said_once_in_each_row_it_covers() -> None:
    parsed = kind_named("docx").parse(_merged_table())
    assert [parsed.text[c.start : c.end] for c in parsed.chunks] == [
        "City | Staff | Note\n\n",
        "Lyon | Twelve people | Open daily\n\n",
        "Porto | Twelve people | Open daily\n\n",
    ]
    assert [c.locator for c in parsed.chunks] == [{"table": 1, "row": n} for n in (1, 2, 3)]
