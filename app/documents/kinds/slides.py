"""Slides (.pptx, .pptm): one content block per slide (its title, its text, its speaker notes)
sent as content blocks, so a citation names whole slides. Each block's locator is
``{"slide": n}``, the slide's number in the show. Read with python-pptx."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from typing import Any, ClassVar

from app.documents.kinds.base import DEFAULT_PARSE_OPTIONS, ParsedDocument, ParseOptions
from app.documents.kinds.converted import Block, BlocksKind, blocks_document
from app.documents.kinds.ooxml import OfficeKind, damaged, open_package

_PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
_PPTM = "application/vnd.ms-powerpoint.presentation.macroEnabled.12"


def _shape_texts(shapes: Any) -> Iterator[str]:
    for shape in shapes:
        if shape.shape_type is not None and getattr(shape, "shapes", None) is not None:
            yield from _shape_texts(shape.shapes)  # a group
        elif getattr(shape, "has_table", False) and shape.has_table:
            for row in shape.table.rows:
                yield " | ".join(" ".join(cell.text.split()) for cell in row.cells)
        elif getattr(shape, "has_text_frame", False) and shape.has_text_frame:
            yield shape.text_frame.text


def _slide_blocks(presentation: Any) -> Iterator[Block]:
    for number, slide in enumerate(presentation.slides, start=1):
        title_shape = slide.shapes.title
        title = " ".join(title_shape.text_frame.text.split()) if title_shape is not None else ""
        title_id = None if title_shape is None else title_shape.shape_id
        others = [shape for shape in slide.shapes if shape.shape_id != title_id]
        texts = [text.strip() for text in _shape_texts(others) if text.strip()]
        notes = ""
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            notes = slide.notes_slide.notes_text_frame.text.strip()
        if not (title or texts or notes):
            continue
        lines = [f"Slide {number}" + (f": {title}" if title else ""), *texts]
        if notes:
            lines.append(f"Notes: {notes}")
        yield "\n".join(lines) + "\n\n", {"slide": number}


class SlidesKind(OfficeKind, BlocksKind):
    name = "pptx"
    media_type = _PPTX
    hint_media_types = (_PPTM,)
    extensions = (".pptx", ".pptm", ".potx", ".ppsx")
    main_content_types: ClassVar[dict[str, str]] = {
        "application/vnd.openxmlformats-officedocument.presentationml.presentation.main+xml": _PPTX,
        "application/vnd.openxmlformats-officedocument.presentationml.slideshow.main+xml": _PPTX,
        "application/vnd.openxmlformats-officedocument.presentationml.template.main+xml": _PPTX,
        "application/vnd.ms-powerpoint.presentation.macroenabled.main+xml": _PPTM,
        "application/vnd.ms-powerpoint.slideshow.macroenabled.main+xml": _PPTM,
    }

    def parse(self, data: bytes, options: ParseOptions = DEFAULT_PARSE_OPTIONS) -> ParsedDocument:
        from lxml import etree  # when first needed: see LAZY_LIBRARIES
        from pptx import Presentation

        package = open_package(data, options)
        try:
            blocks = list(_slide_blocks(Presentation(package)))
        except (zipfile.BadZipFile, KeyError, ValueError, etree.XMLSyntaxError, EOFError):
            raise damaged() from None
        parsed = blocks_document(blocks, "presentation")
        parsed.media_type = self.original_media_type(data)
        return parsed
