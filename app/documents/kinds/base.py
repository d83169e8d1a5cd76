"""What a document kind is: one small interface that every kind implements.

A kind turns stored bytes into the document text and the chunks that tile it (with their
locators: page, block), says how a document of its kind is sent upstream, and maps a citation
of such a document back to offsets in that text. Everything else (storing, loading, building
requests, resolving citations) asks the kind through ``app.documents.kinds`` and never
switches on a kind's name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from app.documents.index import DocumentIndex, resolve_char_offsets
from app.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class ChunkSpan:
    """One chunk of a parsed document: offsets into its text, and where it stands."""

    start: int
    end: int
    page_number: int | None = None
    block_index: int | None = None
    locator: dict[str, Any] | None = None
    """Where it stands in the original, for converted kinds: ``{"paragraph": 12}``,
    ``{"sheet": "Q3", "rows": [14]}``, ``{"slide": 4}``; None for text and PDF."""


@dataclass(frozen=True, slots=True)
class ParseOptions:
    """What a parser is told besides the bytes: the caller's hints and the limits in force."""

    charset: str | None = None
    """The ``charset=`` of the declared media type, for text-based kinds."""
    max_rows: int = 100_000
    """Rows a spreadsheet may have, in all its sheets."""
    max_unpacked_bytes: int = 128 * 1024 * 1024
    """What the members of an Office (ZIP) file may add up to once uncompressed."""


DEFAULT_PARSE_OPTIONS = ParseOptions()


@dataclass(frozen=True, slots=True)
class PageFacts:
    """How one page of a paged document was read: where its text starts in the document text,
    how long it is, where it came from (``text_layer``, ``ocr``, or ``none``) and what to know
    about it (``text_layer_garbage``: the text layer was unreadable and left out)."""

    number: int
    start_char: int
    char_count: int
    text_source: str
    warnings: tuple[str, ...] = ()
    ocr_confidence: float | None = None
    words: tuple[tuple[int, int, float, float, float, float], ...] | None = None
    """OCR'd words: (start, end) in the page's text and their box (x0, y0, x1, y1) in
    fractions of the displayed page, origin top left."""


@dataclass(slots=True)
class ParsedDocument:
    """A document's text (what the upstream sees and cites) and its index."""

    text: str
    chunks: list[ChunkSpan]
    page_count: int | None = None
    citable: bool = True
    warnings: list[str] = field(default_factory=list)
    media_type: str | None = None
    """The media type of the original bytes when it is not the kind's own (a macro-enabled
    workbook, text in UTF-16)."""
    pages: list[PageFacts] | None = None
    """How each page was read, for paged kinds (PDF)."""


@dataclass(frozen=True, slots=True)
class StoredParts:
    """What is loaded of a stored document to send it upstream."""

    text: str
    chunk_texts: Sequence[str]
    data: bytes | None = None  # the original bytes, loaded only for kinds that send them
    read_by_ocr: bool = False  # some pages' text came from OCR (a PDF's)


PageWindow = tuple[int, int]
"""The first and last page (1-based, inclusive) of the original that a window holds."""


@dataclass(frozen=True, slots=True)
class SentPart:
    """One document block a stored document is sent as: the whole of it, or a page window."""

    source: dict[str, Any]
    window: PageWindow | None = None
    size_bytes: int | None = None  # a window's own bytes (a whole document's are stored)


class DocumentKind(ABC):
    """A kind of document. Instances are stateless; the registry holds one of each."""

    name: ClassVar[str]
    """Stored with the document and shown as ``Document.kind``."""
    media_type: ClassVar[str]
    """The media type of the stored bytes, as ``getDocumentContent`` serves them."""
    content_schema: ClassVar[dict[str, Any]]
    """The OpenAPI schema of those bytes."""
    citation_type: ClassVar[str]
    """The citation the upstream gives for this kind's documents."""
    also_cited_by: ClassVar[frozenset[str]] = frozenset()
    """Other citations it may get, when some of its documents are sent another way (a PDF
    with OCR'd pages, sent as content blocks)."""
    signature: ClassVar[bytes | None] = None
    """Bytes that mark this kind near the start of a file; None for kinds never sniffed."""
    signature_within: ClassVar[int] = 0
    hint_media_types: ClassVar[tuple[str, ...]] = ()
    """Other declared media types that name this kind (beside ``media_type``)."""
    extensions: ClassVar[tuple[str, ...]] = ()
    """Filename extensions (lower case, with the dot) that name this kind."""
    trusts_declared_text: ClassVar[bool] = False
    """Whether text bytes declared (or named) as this kind are taken as this kind: nothing in
    the bytes tells Markdown or CSV from plain text."""
    mismatch: ClassVar[tuple[str, ErrorCode] | None] = None
    """The (detail, code) of the error for bytes declared as this kind that lack its signature."""
    sends_original: ClassVar[bool] = False
    """Whether the upstream gets the original bytes (so loading must read them)."""
    has_page_images: ClassVar[bool] = False
    """Whether its pages can be shown as pictures with the cited characters boxed (PDFium's)."""
    serial: ClassVar[bool] = False
    """Whether its parser can run only one call at a time in the process."""

    def request_bytes(self, size_bytes: int, char_count: int) -> int:
        """About how many bytes of an upstream request a document of this kind takes."""
        return max(size_bytes, char_count)

    def estimated_tokens(self, char_count: int, page_count: int | None) -> int:
        """About how many input tokens a document of this kind costs (a rough, English-like
        four characters a token: the budget it is checked against is a setting)."""
        return char_count // 4

    def page_windows(
        self, page_count: int | None, size_bytes: int, max_pages: int, max_bytes: int
    ) -> list[PageWindow] | None:
        """The page windows a stored document is sent as when one document block cannot hold
        it (over ``max_pages`` pages, or ``max_bytes`` of a request); None: sent whole."""
        return None

    def sent_parts(
        self, parts: StoredParts, windows: Sequence[PageWindow] | None
    ) -> list[SentPart]:
        """The document blocks a stored document is sent as: itself whole, or one per window
        of ``page_windows``. Blocking: run it off the event loop when ``parts.data`` is set."""
        assert windows is None, f"{self.name} documents have no page windows"
        return [SentPart(self.upstream_source(parts))]

    def from_window(self, citation: dict[str, Any], window: PageWindow) -> dict[str, Any] | None:
        """A citation of a window, as a citation of the whole original; None when it points
        outside the window."""
        return citation

    def recognises(self, data: bytes) -> bool:
        """Whether ``data`` carries this kind's signature."""
        return self.signature is not None and self.signature in data[: self.signature_within]

    @abstractmethod
    def parse(self, data: bytes, options: ParseOptions = DEFAULT_PARSE_OPTIONS) -> ParsedDocument:
        """The document text and its chunks. Pure and synchronous: run it off the event loop."""

    @abstractmethod
    def upstream_source(self, parts: StoredParts) -> dict[str, Any]:
        """The Messages API document ``source`` for a stored document of this kind."""

    @abstractmethod
    def locate(self, citation: dict[str, Any], index: DocumentIndex) -> tuple[int, int] | None:
        """Offsets into the document text of what ``citation`` (of ``citation_type``) cites."""


class SentAsText(DocumentKind):
    """A kind whose stored text is sent as a plain-text document: cited by character offsets
    into that text (plain text, and what is converted to prose)."""

    citation_type = "char_location"

    def upstream_source(self, parts: StoredParts) -> dict[str, Any]:
        # The exact stored text, never the original bytes: the upstream's offsets cite it.
        return {"type": "text", "media_type": "text/plain", "data": parts.text}

    def locate(self, citation: dict[str, Any], index: DocumentIndex) -> tuple[int, int] | None:
        return resolve_char_offsets(citation, index)


class SentAsBlocks(DocumentKind):
    """A kind whose chunks are sent as content blocks: cited by block index (content
    documents, and records converted to blocks: rows, slides)."""

    citation_type = "content_block_location"

    def upstream_source(self, parts: StoredParts) -> dict[str, Any]:
        return {
            "type": "content",
            "content": [{"type": "text", "text": text} for text in parts.chunk_texts],
        }

    def locate(self, citation: dict[str, Any], index: DocumentIndex) -> tuple[int, int] | None:
        first, end = citation.get("start_block_index"), citation.get("end_block_index")
        if not isinstance(first, int) or not isinstance(end, int):
            return None
        return index.block_range(first, end)
