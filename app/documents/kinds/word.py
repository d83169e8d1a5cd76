"""Word (.docx, .docm): the body's paragraphs, headings, list items and table rows, in order,
converted to text and sent as text (prose is cited sentence by sentence).

The main part alone is read, with python-docx's element classes (lxml underneath, so a long
document parses in C; entities are never resolved) rather than ``docx.Document``, which loads
every part and refuses macro-enabled files. Each block's locator is its place in the body:
``{"paragraph": n}`` for the n-th paragraph of the body (as python-docx's
``Document.paragraphs[n - 1]``), ``{"table": t, "row": r}`` for a table row.
Headers, footers, footnotes and comments are left out: their place in the text is not one a
citation could point at clearly.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar

from app.documents.kinds.base import DEFAULT_PARSE_OPTIONS, ParsedDocument, ParseOptions
from app.documents.kinds.converted import Block, ConvertedTextKind, text_document
from app.documents.kinds.ooxml import OfficeKind, damaged, main_part, open_package

if TYPE_CHECKING:
    from docx.text.paragraph import Paragraph

_DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
_DOCM = "application/vnd.ms-word.document.macroEnabled.12"
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"  # qn("w:")
_PARAGRAPH, _TABLE, _NUMBERING = f"{_W}p", f"{_W}tbl", f"{_W}numPr"
_CELL_SEPARATOR = " | "


class WordKind(OfficeKind, ConvertedTextKind):
    name = "docx"
    media_type = _DOCX
    hint_media_types = (_DOCM,)
    extensions = (".docx", ".docm", ".dotx", ".dotm")
    main_content_types: ClassVar[dict[str, str]] = {
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml": _DOCX,
        "application/vnd.openxmlformats-officedocument.wordprocessingml.template.main+xml": _DOCX,
        "application/vnd.ms-word.document.macroenabled.main+xml": _DOCM,
        "application/vnd.ms-word.template.macroenabledtemplate.main+xml": _DOCM,
    }

    def parse(self, data: bytes, options: ParseOptions = DEFAULT_PARSE_OPTIONS) -> ParsedDocument:
        from docx.oxml import parse_xml  # when first needed: see LAZY_LIBRARIES
        from lxml import etree

        package = open_package(data, options)
        part = main_part(data)
        assert part is not None, "identified as Word by its main part"
        try:
            with zipfile.ZipFile(package) as archive:
                document = parse_xml(archive.read(part[0]))
            blocks = list(_blocks(document))
        except (zipfile.BadZipFile, KeyError, ValueError, etree.XMLSyntaxError, EOFError):
            raise damaged() from None
        parsed = text_document(blocks, "Word document")
        parsed.media_type = self.original_media_type(data)
        return parsed


def _blocks(document: Any) -> Iterator[Block]:
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    body = document.body
    if body is None:
        return
    paragraphs = tables = 0
    for element in body.iterchildren():
        if element.tag == _PARAGRAPH:
            paragraphs += 1
            paragraph = Paragraph(element, None)  # type: ignore[arg-type]
            yield _paragraph_text(paragraph, element), {"paragraph": paragraphs}
        elif element.tag == _TABLE:
            tables += 1
            table = Table(element, None)  # type: ignore[arg-type]
            for number, row in enumerate(table.rows, start=1):
                yield _row_text(row), {"table": tables, "row": number}


def _paragraph_text(paragraph: Paragraph, element: Any) -> str:
    text = paragraph.text
    properties = element.pPr
    if properties is None:
        return text
    style = properties.style or ""
    if properties.find(_NUMBERING) is not None or style.startswith("List"):
        return "• " + text  # a list item: its bullet or number is drawn by Word, not in the text
    return text


def _row_text(row: Any) -> str:
    # python-docx lists a merged cell once per grid column it spans, in a run (a cell merged
    # down from the row above, as wide as it): each is said once, the run skipped by its span.
    cells = row.cells
    texts: list[str] = []
    at = 0
    while at < len(cells):
        cell = cells[at]
        texts.append(" ".join(cell.text.split()))
        at += max(cell.grid_span, 1)
    return _CELL_SEPARATOR.join(texts)
