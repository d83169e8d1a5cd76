"""The registry of document kinds, keyed by name and by media type.

Adding a kind is one module implementing ``DocumentKind`` and one line in ``_KINDS``; the rest
of Citegate finds it here. ``tests/unit/test_kinds.py`` walks the registry so that a kind
missing a part fails.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from app.documents.kinds.base import (
    ChunkSpan,
    DocumentKind,
    PageWindow,
    ParsedDocument,
    ParseOptions,
    SentPart,
    StoredParts,
)
from app.documents.kinds.content import ContentKind
from app.documents.kinds.html import HtmlKind
from app.documents.kinds.markdown import MarkdownKind
from app.documents.kinds.ooxml import refuse_encrypted
from app.documents.kinds.pdf import PdfKind
from app.documents.kinds.slides import SlidesKind
from app.documents.kinds.spreadsheet import CsvKind, TsvKind, WorkbookKind
from app.documents.kinds.text import UTF16_32_BOMS, TextKind
from app.documents.kinds.word import WordKind
from app.errors import ErrorCode, InvalidDocument, UnsupportedMediaType

# Libraries a kind imports when it first parses (or, for pypdf, first falls back to it), not
# when the registry is built: a worker that never reads a Word file never holds python-docx,
# and these libraries are a large share of a fresh worker's memory. numpy comes with
# blingfire's package, which chunking never imports (it loads the library itself). Checked by
# tests/unit/test_lazy_imports.py.
LAZY_LIBRARIES = (
    "docx",
    "pptx",
    "openpyxl",
    "lxml",
    "selectolax",
    "pypdf",
    "PIL",
    "numpy",
    "pytesseract",
)

TEXT = TextKind()
PDF = PdfKind()
CONTENT = ContentKind()

# In the order ``identify`` asks them whether the bytes are theirs.
_KINDS: dict[str, DocumentKind] = {
    kind.name: kind
    for kind in (
        TEXT,
        PDF,
        CONTENT,
        WordKind(),
        WorkbookKind(),
        SlidesKind(),
        HtmlKind(),
        MarkdownKind(),
        CsvKind(),
        TsvKind(),
    )
}
_BY_MEDIA_TYPE: dict[str, DocumentKind] = {
    media_type.lower(): kind
    for kind in _KINDS.values()
    for media_type in (kind.media_type, *kind.hint_media_types)
}
_BY_EXTENSION: dict[str, DocumentKind] = {
    extension: kind for kind in _KINDS.values() for extension in kind.extensions
}
# Text is what bytes are when no signature says otherwise; its parser refuses what is not text.
_FALLBACK = TEXT

# Magic numbers of common binary formats, so that e.g. an image gets 415 rather than 422.
_BINARY_SIGNATURES = (
    b"\x89PNG",
    b"\xff\xd8\xff",
    b"GIF8",
    b"PK\x03\x04",
    b"\x1f\x8b",
    b"II*\x00",
    b"MM\x00*",
    b"RIFF",
    b"\xd0\xcf\x11\xe0",
    b"\x7fELF",
)


def all_kinds() -> list[DocumentKind]:
    return list(_KINDS.values())


def kind_named(name: str) -> DocumentKind:
    """The kind a stored document names."""
    return _KINDS[name]


def kind_for_media_type(media_type: str | None) -> DocumentKind | None:
    """The kind stored under this media type (parameters such as ``charset`` ignored)."""
    if media_type is None:
        return None
    return _BY_MEDIA_TYPE.get(media_type.split(";", 1)[0].strip().lower())


def kind_for_filename(filename: str | None) -> DocumentKind | None:
    """The kind a filename's extension names."""
    if not filename:
        return None
    return _BY_EXTENSION.get(PurePosixPath(filename.lower()).suffix)


def identify(data: bytes, declared: DocumentKind | None = None) -> DocumentKind:
    """The kind of ``data``, read from the bytes. A declared kind is only a hint, except that
    bytes declared as a kind with a signature (a PDF) must carry it, and that text declared
    as a text-based kind (Markdown, CSV) is taken as it: nothing in the bytes tells them from
    plain text."""
    if not data:
        raise InvalidDocument("The document is empty.", code=ErrorCode.EMPTY_DOCUMENT)
    for kind in _KINDS.values():
        if kind.recognises(data):
            return kind
    refuse_encrypted(data)
    binary = not data.startswith(UTF16_32_BOMS) and (
        data.startswith(_BINARY_SIGNATURES) or b"\x00" in data
    )
    if binary:
        raise UnsupportedMediaType(
            "Supported documents are PDF, Word (.docx), Excel (.xlsx), PowerPoint (.pptx), "
            "HTML, Markdown, CSV, TSV and plain text."
        )
    if declared is not None and declared.mismatch is not None:
        detail, code = declared.mismatch
        raise InvalidDocument(detail, code=code)
    if declared is not None and declared.trusts_declared_text:
        return declared
    # Text (in an encoding its parser reads, or refuses naming it).
    return _FALLBACK


__all__ = [
    "CONTENT",
    "LAZY_LIBRARIES",
    "PDF",
    "TEXT",
    "ChunkSpan",
    "DocumentKind",
    "PageWindow",
    "ParseOptions",
    "ParsedDocument",
    "SentPart",
    "StoredParts",
    "all_kinds",
    "identify",
    "kind_for_filename",
    "kind_for_media_type",
    "kind_named",
]
