"""The request's citable sources (documents and search results) cut into citable chunks, as the
upstream cuts them.

Plain text and PDF pages are split into sentences (``split_sentences``: trailing whitespace
belongs to the sentence, so "The grass is green. " is 0-20); the text blocks of a content document
or of a search result are its chunks, as given. Each chunk keeps exactly the text a citation of it
quotes (``cited_text``) and where it is: character offsets, a page number, or a block index.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from app.documents.chunking import split_sentences
from app.local_engine.wire import (
    Base64PdfSource,
    CitableBlock,
    ContentSource,
    DocumentBlockParam,
    PlainTextSource,
    SearchResultBlockParam,
    UncitedTextBlockParam,
)

DocumentKind = Literal["text", "pdf", "content", "search_result"]

# PDFium marks a line-break hyphenation with U+FFFE; the upstream's own extraction (its PDF
# cited_text) has U+0002 there.
_PDFIUM_HYPHEN = "\ufffe"
_UPSTREAM_HYPHEN = "\u0002"


@dataclass(frozen=True, slots=True)
class Chunk:
    """The smallest citable unit of a document.

    ``start``/``end`` (end exclusive) are character offsets into a text document's data, the
    1-based page number and the next for a PDF, the block index and the next for content and
    search results.
    ``text`` is what a citation of this chunk alone quotes.
    """

    position: int
    text: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class RequestDocument:
    """A citable source of the request, chunked: a document block, whose ``index`` is its
    ``document_index``, or a search result (kind ``search_result``), whose ``index`` is its
    ``search_result_index`` and whose ``source`` is its ``source``."""

    index: int
    title: str | None
    kind: DocumentKind
    citations_enabled: bool
    chunks: tuple[Chunk, ...]
    # The text the model reads: the data, each page, or each text block (for the token estimate).
    text_parts: tuple[str, ...]
    source: str | None = None


@dataclass(frozen=True, slots=True)
class ChunkedPdf:
    """A PDF's page texts as the upstream extracts them, and their sentence chunks."""

    pages: tuple[str, ...]
    chunks: tuple[Chunk, ...]


PdfLoader = Callable[[str], ChunkedPdf]


def upstream_page_text(pdfium_text: str) -> str:
    """A page's PDFium text as the upstream quotes it (U+0002 at hyphenation breaks)."""
    return pdfium_text.replace(_PDFIUM_HYPHEN, _UPSTREAM_HYPHEN)


def chunk_plain_text(data: str) -> tuple[Chunk, ...]:
    """Sentence chunks of a plain-text document, with character offsets into ``data``."""
    return tuple(
        Chunk(position, data[start:end], start, end)
        for position, (start, end) in enumerate(split_sentences(data))
    )


def chunk_pdf_pages(pdfium_pages: Sequence[str]) -> ChunkedPdf:
    """Sentence chunks of each page (a sentence never spans two pages), numbered from 1."""
    pages = tuple(upstream_page_text(text) for text in pdfium_pages)
    chunks: list[Chunk] = []
    for number, text in enumerate(pages, start=1):
        for start, end in split_sentences(text):
            chunks.append(Chunk(len(chunks), text[start:end], number, number + 1))
    return ChunkedPdf(pages, tuple(chunks))


def chunk_content_blocks(source: ContentSource) -> tuple[Chunk, ...]:
    """One chunk per text block of a content document (images are not citable)."""
    if isinstance(source.content, str):
        return (Chunk(0, source.content, 0, 1),)
    chunks: list[Chunk] = []
    for index, block in enumerate(source.content):
        if isinstance(block, UncitedTextBlockParam):
            chunks.append(Chunk(len(chunks), block.text, index, index + 1))
    return tuple(chunks)


def content_texts(source: ContentSource) -> tuple[str, ...]:
    """The text of each text block of a content document."""
    if isinstance(source.content, str):
        return (source.content,)
    return tuple(block.text for block in source.content if isinstance(block, UncitedTextBlockParam))


def chunk_document(block: DocumentBlockParam, index: int, load_pdf: PdfLoader) -> RequestDocument:
    """Chunk one document block; ``load_pdf`` turns base64 PDF data into its chunked pages."""
    source = block.source
    kind: DocumentKind
    chunks: tuple[Chunk, ...]
    parts: tuple[str, ...]
    if isinstance(source, PlainTextSource):
        kind, chunks, parts = "text", chunk_plain_text(source.data), (source.data,)
    elif isinstance(source, Base64PdfSource):
        pdf = load_pdf(source.data)
        kind, chunks, parts = "pdf", pdf.chunks, pdf.pages
    elif isinstance(source, ContentSource):
        kind, chunks, parts = "content", chunk_content_blocks(source), content_texts(source)
    else:  # request validation refuses url and file sources
        raise ValueError(f"unsupported document source {source.type!r}")
    return RequestDocument(
        index=index,
        title=block.title,
        kind=kind,
        citations_enabled=block.citations_enabled,
        chunks=chunks,
        text_parts=parts,
    )


def chunk_search_result(block: SearchResultBlockParam, index: int) -> RequestDocument:
    """One chunk per text block of a search result; ``index`` is its ``search_result_index``."""
    texts = tuple(item.text for item in block.content)
    return RequestDocument(
        index=index,
        title=block.title,
        kind="search_result",
        citations_enabled=block.citations_enabled,
        chunks=tuple(Chunk(place, text, place, place + 1) for place, text in enumerate(texts)),
        text_parts=texts,
        source=block.source,
    )


def chunk_documents(blocks: Sequence[CitableBlock], load_pdf: PdfLoader) -> list[RequestDocument]:
    """Chunk every document and search result of a request, in request order; documents and
    search results are numbered each on their own, as ``document_index`` and
    ``search_result_index`` count them."""
    chunked: list[RequestDocument] = []
    documents = search_results = 0
    for block in blocks:
        if isinstance(block, SearchResultBlockParam):
            chunked.append(chunk_search_result(block, search_results))
            search_results += 1
        else:
            chunked.append(chunk_document(block, documents, load_pdf))
            documents += 1
    return chunked
