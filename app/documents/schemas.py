"""The documents half of the HTTP contract: request and response bodies."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import UploadFile
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from app.documents.kinds import all_kinds
from app.ids import NO_NUL

Title = Annotated[
    str,
    Field(min_length=1, max_length=500, pattern=NO_NUL, description="1 to 500 characters."),
]
Context = Annotated[
    str,
    Field(
        min_length=1, pattern=NO_NUL, description="Metadata sent with the document; never cited."
    ),
]


class TextSource(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["text"]
    media_type: Literal["text/plain"] = "text/plain"
    data: str = Field(min_length=1)


class Base64PdfSource(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["base64"]
    media_type: Literal["application/pdf"]
    data: str = Field(min_length=1, description="The PDF's bytes, base64-encoded.")


class ContentBlock(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["text"]
    text: str = Field(min_length=1, pattern=r"\S", description="Non-empty text.")


class ContentSource(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["content"]
    content: list[ContentBlock] = Field(min_length=1)


DocumentSource = Annotated[
    TextSource | Base64PdfSource | ContentSource, Field(discriminator="type")
]


class CreateDocumentRequest(BaseModel):
    """Mirrors the Messages API document block."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "source": {
                        "type": "text",
                        "media_type": "text/plain",
                        "data": "The grass is green. The sky is blue.",
                    },
                    "title": "My Document",
                    "context": "Not citable metadata",
                    "metadata": {"team": "search"},
                }
            ]
        },
    )

    source: DocumentSource
    title: Title | None = None
    context: Context | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class DocumentUpload(BaseModel):
    """The multipart form of `uploadDocument`."""

    file: UploadFile = Field(
        description="The document: PDF or UTF-8 text (the type is read from the bytes).",
        json_schema_extra={"format": "binary"},
    )
    title: Title | SkipJsonSchema[None] = None
    context: Context | SkipJsonSchema[None] = None


class Progress(BaseModel):
    """How far the reading of a document's pages has come."""

    pages_done: int = Field(description="Pages read by OCR so far.")
    pages_total: int = Field(description="The document's pages.")


class PagesRead(BaseModel):
    """How a PDF's pages were read, counted from its pages (`listDocumentPages` has each)."""

    text_layer: int = Field(description="Pages read from their PDF text layer.")
    ocr: int = Field(description="Pages read by OCR.")
    none: int = Field(description="Pages with no text: no text layer, and none found by OCR.")
    pending: int = Field(description="Pages waiting for OCR (while `processing`).")
    ocr_confidence: float | None = Field(
        description="The mean of the OCR'd pages' confidence (0 to 1); null when none was."
    )


class DocumentError(BaseModel):
    """Why a document could not be read."""

    code: str = Field(examples=["ocr_failed"])
    detail: str


class DocumentOut(BaseModel):
    """A stored document. Immutable once created (and its pages read)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "doc_01jf3k2m4n5p",
                    "kind": "pdf",
                    "media_type": "application/pdf",
                    "title": "Q3 report",
                    "context": "Internal; figures unaudited.",
                    "metadata": {"team": "finance"},
                    "filename": "q3-report.pdf",
                    "sha256": "9f2c4a7e1b3d5f6a8c0e2b4d6f8a0c2e4b6d8f0a2c4e6b8d0f2a4c6e8b0d2f4a",
                    "size_bytes": 482113,
                    "page_count": 4,
                    "char_count": 14633,
                    "chunk_count": 120,
                    "citable": True,
                    "warnings": [],
                    "created_at": "2025-01-01T12:00:00Z",
                    "status": "ready",
                    "progress": None,
                    "error": None,
                    "pages_read": {
                        "text_layer": 3,
                        "ocr": 1,
                        "none": 0,
                        "pending": 0,
                        "ocr_confidence": 0.93,
                    },
                }
            ]
        }
    )

    id: str = Field(examples=["doc_01jf3k2m4n5p6q7r8s9t0v1w2x"])
    kind: str = Field(
        description="What the document is, which decides how it is sent and cited.",
        json_schema_extra={"enum": [kind.name for kind in all_kinds()]},
    )
    media_type: str
    title: str | None
    context: str | None
    metadata: dict[str, Any]
    filename: str | None
    sha256: str
    size_bytes: int
    page_count: int | None
    char_count: int
    chunk_count: int
    citable: bool
    warnings: list[str]
    created_at: datetime
    status: Literal["ready", "processing", "failed"] = Field(
        default="ready",
        description="`processing` while pages are read by OCR in the background (the document "
        "cannot be asked about yet: 409 `document_processing`); `failed` when they could not "
        "be (see `error`).",
    )
    progress: Progress | None = Field(
        default=None, description="While `processing`: pages read so far of the document's."
    )
    error: DocumentError | None = Field(default=None, description="Set when `failed`.")
    pages_read: PagesRead | None = Field(
        default=None,
        description="A PDF's pages by where their text came from; null for documents that "
        "are not PDFs (and PDFs stored before pages were recorded).",
    )


class ChunkOut(BaseModel):
    """One entry of the document index: the smallest citable unit."""

    index: int
    text: str
    start_char: int = Field(description="Code point offset into the document text.")
    end_char: int = Field(description="Exclusive end offset.")
    page_number: int | None = Field(description="1-based page of a PDF chunk.")
    block_index: int | None = Field(description="0-based block of a content chunk.")
    locator: dict[str, Any] | None = Field(
        default=None,
        description="Where the chunk stands in a converted document's original: "
        '`{"paragraph": 12}` (Word, HTML), `{"table": 2, "row": 3}` (a Word table), '
        '`{"line": 7}` (Markdown), `{"sheet": "Q3", "rows": [14]}` (a spreadsheet; no '
        '`sheet` for CSV and TSV), `{"slide": 4}`; null for text, PDF and content documents.',
    )


class PageOut(BaseModel):
    """How one page of a PDF was read."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "page_number": 3,
                    "text_source": "ocr",
                    "ocr_confidence": 0.93,
                    "char_count": 2811,
                    "warnings": ["text_layer_garbage"],
                }
            ]
        }
    )

    page_number: int = Field(description="1-based.")
    text_source: Literal["text_layer", "ocr", "none", "pending"] = Field(
        description="Where the page's text came from: its PDF text layer, OCR, or nowhere (no "
        "text layer and no OCR); `pending` while the page waits for OCR."
    )
    ocr_confidence: float | None = Field(
        description="Tesseract's mean word confidence (0 to 1) for an OCR'd page; else null."
    )
    char_count: int = Field(description="Characters of the page's stored text.")
    warnings: list[str] = Field(
        description="`text_layer_garbage`: the page's text layer was unreadable (control, "
        "private-use or replacement characters, glyph soup) and was left out."
    )


_NEXT_CURSOR = "`cursor` for the next page; null on the last page."


class DocumentPage(BaseModel):
    """A page of documents, newest first."""

    data: list[DocumentOut]
    next_cursor: str | None = Field(description=_NEXT_CURSOR)


class PagePage(BaseModel):
    """A page of a document's pages, in order."""

    data: list[PageOut]
    next_cursor: str | None = Field(description=_NEXT_CURSOR)


class ChunkPage(BaseModel):
    """A page of a document's chunks, in order."""

    data: list[ChunkOut]
    next_cursor: str | None = Field(description=_NEXT_CURSOR)
