"""What a person looks at to check a citation: a stored PDF's pages as PNG, and the boxes of
the cited characters on them. PDFium's work runs in worker threads (``app.documents.pages``)."""

from __future__ import annotations

import copy
import logging
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

from anyio import to_thread
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import Document, DocumentBlob, DocumentPageRow
from app.documents.kinds import kind_named
from app.documents.pages import PageLayout, PdfPages, PdfUnavailable
from app.documents.service import get_document
from app.errors import ErrorCode, InvalidRequest, NotFound

log = logging.getLogger(__name__)

DEFAULT_WIDTH = 1000
MIN_WIDTH, MAX_WIDTH = 100, 2000


async def _blob(session: AsyncSession, document_id: str) -> bytes | None:
    data: bytes | None = await session.scalar(
        select(DocumentBlob.data).where(DocumentBlob.document_id == document_id)
    )
    return data


async def page_layout(session: AsyncSession, document_id: str) -> list[PageLayout] | None:
    """Each page's layout as the document recorded it; None for a PDF stored before pages
    were recorded (its text is its text layers', as PDFium reads them)."""
    rows = (
        await session.execute(
            select(
                DocumentPageRow.start_char,
                DocumentPageRow.char_count,
                DocumentPageRow.text_source,
                DocumentPageRow.words,
            )
            .where(DocumentPageRow.document_id == document_id)
            .order_by(DocumentPageRow.page_number)
        )
    ).all()
    if not rows:
        return None
    return [PageLayout(row[0], row[1], row[2], row[3]) for row in rows]


async def page_image(
    session: AsyncSession, pages: PdfPages, document: Document, page: int, width: int
) -> bytes:
    """Page ``page`` of the PDF as a PNG ``width`` pixels wide: 404 ``page_not_found`` past
    its last page, 422 ``document_not_pdf`` for any other kind."""
    if not kind_named(document.kind).has_page_images:
        raise InvalidRequest(
            f"Document {document.id!r} is a {document.kind} document; only PDF pages are pictures.",
            code=ErrorCode.DOCUMENT_NOT_PDF,
        )
    if not 1 <= page <= (document.page_count or 0):
        raise NotFound(
            f"Document {document.id!r} has {document.page_count} pages; there is no page {page}.",
            code=ErrorCode.PAGE_NOT_FOUND,
        )
    cached = pages.cached_image(document.id, page, width)
    if cached is not None:
        return cached
    data = None if pages.is_open(document.id) else await _blob(session, document.id)
    try:
        return await to_thread.run_sync(pages.image, document.id, data, page, width)
    except KeyError:  # closed meanwhile, to make room for another
        data = await _blob(session, document.id)
        if data is None:
            raise NotFound(
                f"No document with id {document.id!r}.", code=ErrorCode.DOCUMENT_NOT_FOUND
            ) from None
        return await to_thread.run_sync(pages.image, document.id, data, page, width)


async def owned_page_image(
    session: AsyncSession, pages: PdfPages, tenant_id: str, document_id: str, page: int, width: int
) -> tuple[Document, bytes]:
    document = await get_document(session, tenant_id, document_id)
    return document, await page_image(session, pages, document, page, width)


def _spans(segments: Sequence[dict[str, Any]]) -> Iterator[tuple[str | None, dict[str, Any]]]:
    for segment in segments:
        for citation in segment["citations"]:
            if citation.get("span") is not None:
                yield citation.get("document_id"), citation["span"]


def lacks_boxes(segments: Sequence[dict[str, Any]]) -> bool:
    return any("boxes" not in span for _, span in _spans(segments))


def boxes_wanted(segments: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Gives every span that has no ``boxes`` an empty list of them (in place), and returns
    those of them that PDFium can measure (a span has pages only in a PDF), by document."""
    wanted: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for document_id, span in _spans(segments):
        if "boxes" in span:
            continue
        span["boxes"] = []
        if document_id is not None and span.get("start_page") is not None:
            wanted[document_id].append(span)
    return wanted


async def measure_boxes(
    session: AsyncSession, pages: PdfPages, wanted: dict[str, list[dict[str, Any]]]
) -> None:
    """PDFium's boxes on the spans ``boxes_wanted`` returned. A PDF deleted since, or one
    PDFium cannot open, gets no boxes."""
    for document_id, spans in wanted.items():
        found = await _document_boxes(session, pages, document_id, spans)
        for span, boxes in zip(spans, found, strict=True):
            span["boxes"] = boxes


async def with_boxes(
    session: AsyncSession, pages: PdfPages, segments: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The segments with ``boxes`` on every span that has none yet (a copy; the stored
    segments are left alone): PDFium's boxes for spans of PDFs, an empty list otherwise."""
    if not lacks_boxes(segments):
        return segments
    segments = copy.deepcopy(segments)
    await measure_boxes(session, pages, boxes_wanted(segments))
    return segments


async def _document_boxes(
    session: AsyncSession, pages: PdfPages, document_id: str, spans: list[dict[str, Any]]
) -> list[list[dict[str, Any]]]:
    ranges = [
        (span["start_char"], span["end_char"], span["start_page"], span["end_page"])
        for span in spans
    ]
    layout = await page_layout(session, document_id)
    for attempt in range(2):
        data = None
        if attempt or not pages.is_open(document_id):
            data = await _blob(session, document_id)
            if data is None:
                return [[] for _ in spans]  # deleted
        try:
            found = await to_thread.run_sync(pages.boxes, document_id, data, ranges, layout)
        except KeyError:  # closed meanwhile, to make room for another
            continue
        except PdfUnavailable:
            log.info("PDFium cannot open document %s: its spans have no boxes", document_id)
            return [[] for _ in spans]
        return [[box.as_dict() for box in boxes] for boxes in found]
    return [[] for _ in spans]
