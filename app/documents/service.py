"""Storing, reading and deleting documents. Takes a session and plain arguments, never a Request."""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path
from typing import Any, TypeVar

import orjson
from anyio import to_thread
from sqlalchemy import Select, bindparam, case, delete, func, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

from app.db.blobs import insert_blob
from app.db.models import (
    CollectionDocument,
    Document,
    DocumentBlob,
    DocumentChunk,
    DocumentPageRow,
    OcrJob,
)
from app.db.tenancy import get_owned, list_newest
from app.db.unavailable import driver_calls
from app.documents.kinds import (
    CONTENT,
    PDF,
    TEXT,
    DocumentKind,
    ParsedDocument,
    ParseOptions,
    identify,
    kind_for_filename,
    kind_for_media_type,
)
from app.documents.reading import OcrOptions, check_page_limit, pages_to_read
from app.documents.schemas import Base64PdfSource, DocumentSource, PagesRead, TextSource
from app.documents.sources import SourceCache
from app.errors import ErrorCode, InvalidDocument, PayloadTooLarge
from app.ids import new_id
from app.observability import note_ingested
from app.pagination import Page, decode_index_cursor, paginate
from app.search.index import index_document
from app.search.terms import indexed_text

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DocumentFields:
    """What the caller says about a document besides its bytes."""

    title: str | None = None
    context: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    filename: str | None = None


@dataclass(frozen=True, slots=True)
class StoredDocument:
    document: Document
    created: bool  # False when identical bytes were already stored: the existing document

    @property
    def processing(self) -> bool:
        """Whether its pages are still being read (OCR, in the background)."""
        return self.document.status == "processing"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# Some parsers (PDFium) do one call at a time in the process, so their kinds are parsed on a
# thread of their own: uploads waiting their turn queue here, not in the worker threads that
# everything else needs (hashing, base64 for questions, the local engine).
_SERIAL_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="citegate-serial-parse")


async def parse_off_loop(
    data: bytes, kind: DocumentKind, options: ParseOptions | None = None
) -> ParsedDocument:
    options = options or ParseOptions()
    if kind.serial:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_SERIAL_THREAD, kind.parse, data, options)
    return await to_thread.run_sync(kind.parse, data, options)


async def parse_pdf_file_off_loop(path: Path) -> ParsedDocument:
    """A PDF parsed from the file at ``path`` (on the serial parsing thread, as
    ``parse_off_loop``): its bytes are read by PDFium as it needs them, not held in memory."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_SERIAL_THREAD, PDF.parse, path)


def _charset(media_type: str | None) -> str | None:
    """The ``charset=`` parameter of a declared media type."""
    if not media_type:
        return None
    message = Message()
    message["Content-Type"] = media_type
    charset = message.get_param("charset")
    return charset if isinstance(charset, str) and charset else None


def _hinted_kind(media_type: str | None, filename: str | None) -> DocumentKind | None:
    """The kind the caller's media type or filename names: the filename's when the media type
    says no more than text (browsers send .md and .csv as text/plain or octet-stream)."""
    declared = kind_for_media_type(media_type)
    named = kind_for_filename(filename)
    if named is not None and (declared is None or declared is TEXT):
        return named
    return declared


async def store_upload(
    session: AsyncSession,
    tenant_id: str,
    data: bytes,
    fields: DocumentFields,
    *,
    max_bytes: int,
    declared_media_type: str | None = None,
    limits: ParseOptions | None = None,
    ocr: OcrOptions | None = None,
) -> StoredDocument:
    """Store uploaded bytes; the kind is read from the bytes, the declared type and the
    filename only hints (and the declared ``charset=`` that of text without a BOM). PDF pages
    are read by OCR as ``ocr`` says (none when it is None)."""
    declared = _hinted_kind(declared_media_type, fields.filename)
    limits = limits or ParseOptions()
    options = ParseOptions(
        charset=_charset(declared_media_type),
        max_rows=limits.max_rows,
        max_unpacked_bytes=limits.max_unpacked_bytes,
    )
    return await store_bytes(
        session,
        tenant_id,
        data,
        fields,
        max_bytes=max_bytes,
        declared=declared,
        options=options,
        ocr=ocr,
    )


async def store_source(
    session: AsyncSession,
    tenant_id: str,
    source: DocumentSource,
    fields: DocumentFields,
    *,
    max_bytes: int,
    ocr: OcrOptions | None = None,
) -> StoredDocument:
    """Store a document given as a Messages API document source (text, base64 PDF, content)."""
    if isinstance(source, TextSource):
        data = _encode_text(source.data)
        return await store_bytes(session, tenant_id, data, fields, max_bytes=max_bytes, kind=TEXT)
    if isinstance(source, Base64PdfSource):
        data = _decode_base64(source.data)
        declared = kind_for_media_type(source.media_type)
        return await store_bytes(
            session, tenant_id, data, fields, max_bytes=max_bytes, declared=declared, ocr=ocr
        )
    blocks = [block.text for block in source.content]
    if any("\x00" in block for block in blocks):
        raise InvalidDocument("The text contains a NUL character.", code=ErrorCode.INVALID_TEXT)
    # Its size is that of its stored form, made (and hashed) off the event loop.
    data = await to_thread.run_sync(CONTENT.stored_form, blocks)
    return await store_bytes(session, tenant_id, data, fields, max_bytes=max_bytes, kind=CONTENT)


def _decode_base64(data: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidDocument(
            "source.data is not valid base64.", code=ErrorCode.INVALID_BASE64
        ) from exc


def _encode_text(text: str) -> bytes:
    """The UTF-8 bytes of text given as JSON (its parser already refused lone surrogates)."""
    if "\x00" in text:
        raise InvalidDocument("The text contains a NUL character.", code=ErrorCode.INVALID_TEXT)
    return text.encode("utf-8")


async def store_bytes(
    session: AsyncSession,
    tenant_id: str,
    data: bytes,
    fields: DocumentFields,
    *,
    max_bytes: int,
    kind: DocumentKind | None = None,
    declared: DocumentKind | None = None,
    options: ParseOptions | None = None,
    ocr: OcrOptions | None = None,
) -> StoredDocument:
    """Store a document: of ``kind`` when the caller's source says so, else of the kind its
    bytes are (``declared`` being a hint). Identical bytes of the same kind give the document
    stored before. A PDF with pages to read by OCR (``ocr``) is stored ``processing`` with a
    job that reads them in the background; more of them than ``ocr.max_pages`` is refused
    first, with nothing stored."""
    if len(data) > max_bytes:
        raise PayloadTooLarge(f"The document exceeds the limit of {max_bytes} bytes.")
    digest, identified = await to_thread.run_sync(_digest_and_identify, data, kind, declared)
    kind = identified
    if existing := await _find_same(session, tenant_id, kind.name, digest):
        return StoredDocument(existing, created=False)
    # End the read transaction: no connection is held while the document is parsed.
    await session.commit()
    started = time.perf_counter()
    parsed = await parse_off_loop(data, kind, options)
    needed = pages_to_read(parsed, ocr.mode) if ocr is not None else []
    check_page_limit(len(needed), ocr.max_pages if ocr is not None else 0)
    log.info(
        "parsed %s document: %d bytes, %d chunks in %.3fs",
        kind.name,
        len(data),
        len(parsed.chunks),
        time.perf_counter() - started,
    )
    if needed and ocr is not None:
        return await _store_for_ocr(
            session, tenant_id, kind, parsed, data, digest, fields, needed, ocr
        )
    return await _store(session, tenant_id, kind, parsed, data, digest, fields, started)


async def _store_for_ocr(
    session: AsyncSession,
    tenant_id: str,
    kind: DocumentKind,
    parsed: ParsedDocument,
    data: bytes,
    digest: str,
    fields: DocumentFields,
    needed: list[int],
    ocr: OcrOptions,
) -> StoredDocument:
    """Blob, a ``processing`` document row (no chunks yet), its pages (those to read
    ``pending``) and its OCR job, in one transaction; this process's reader is woken to take
    the job, which another replica takes if this one has no room."""
    document = _document_row(tenant_id, kind, parsed, data, digest, fields)
    document.status, document.pages_done = "processing", 0
    document.char_count = document.chunk_count = 0
    document.citable = False
    session.add(document)
    pending = set(needed)
    rows = [
        row | {"text_source": "pending", "char_count": 0, "text": None, "words": None}
        if row["page_number"] in pending
        else row
        for row in page_rows(document.id, tenant_id, parsed)
    ]
    try:
        await session.flush()
        await insert_blob(session, document.id, tenant_id, data)
        await session.execute(insert(DocumentPageRow), rows)
        session.add(
            OcrJob(
                document_id=document.id,
                tenant_id=tenant_id,
                created_at=time.time(),
                languages=ocr.languages,
                attempts=0,
            )
        )
        await session.commit()
    except IntegrityError:
        await session.rollback()
        if existing := await _find_same(session, tenant_id, kind.name, digest):
            return StoredDocument(existing, created=False)
        raise
    ocr.jobs.wake()
    return StoredDocument(document, created=True)


def _digest_and_identify(
    data: bytes, kind: DocumentKind | None, declared: DocumentKind | None
) -> tuple[str, DocumentKind]:
    return sha256_hex(data), kind or identify(data, declared)


async def _find_same(
    session: AsyncSession, tenant_id: str, kind: str, digest: str
) -> Document | None:
    query = select(Document).where(
        Document.tenant_id == tenant_id, Document.kind == kind, Document.sha256 == digest
    )
    return (await session.execute(query)).scalar_one_or_none()


def _document_row(
    tenant_id: str,
    kind: DocumentKind,
    parsed: ParsedDocument,
    data: bytes,
    digest: str,
    fields: DocumentFields,
) -> Document:
    return Document(
        id=new_id("doc"),
        tenant_id=tenant_id,
        kind=kind.name,
        media_type=parsed.media_type or kind.media_type,
        title=fields.title,
        context=fields.context,
        user_metadata=fields.metadata,
        filename=fields.filename,
        sha256=digest,
        size_bytes=len(data),
        page_count=parsed.page_count,
        char_count=len(parsed.text),
        chunk_count=len(parsed.chunks),
        citable=parsed.citable,
        warnings=parsed.warnings,
        status="ready",
    )


async def _store(
    session: AsyncSession,
    tenant_id: str,
    kind: DocumentKind,
    parsed: ParsedDocument,
    data: bytes,
    digest: str,
    fields: DocumentFields,
    started: float,
) -> StoredDocument:
    """Blob, document row and chunk rows in one transaction: all of them or nothing."""
    document = _document_row(tenant_id, kind, parsed, data, digest, fields)
    session.add(document)
    try:
        await session.flush()
        await insert_blob(session, document.id, tenant_id, data)
        await insert_chunks(session, document.id, tenant_id, parsed)
        await insert_pages(session, document.id, tenant_id, parsed)
        await index_document(session, document.id)
        await session.commit()
    except IntegrityError:
        # The same bytes were stored by a concurrent request: answer with that document.
        await session.rollback()
        if existing := await _find_same(session, tenant_id, kind.name, digest):
            return StoredDocument(existing, created=False)
        raise
    note_ingested(kind.name, time.perf_counter() - started)
    return StoredDocument(document, created=True)


_CHUNK_COLUMNS = (
    "document_id",
    "chunk_index",
    "tenant_id",
    "text",
    "start_char",
    "end_char",
    "page_number",
    "block_index",
    "search_text",
    "locator",
)


# Chunk rows are made and written this many at a time: a spreadsheet of 100,000 rows makes
# 100,000 chunks, and all their rows (and the statement's parameters) at once cost more memory
# than the rest of the upload.
_CHUNK_BATCH = 5_000


def _chunk_rows(
    document_id: str, tenant_id: str, parsed: ParsedDocument, first: int, json_text: bool
) -> list[tuple[Any, ...]]:
    """The index rows of ``_CHUNK_BATCH`` chunks from ``first`` (CPU work: for a thread), the
    locator as JSON text when ``json_text`` (COPY takes a JSON column as its text)."""
    rows = []
    for index in range(first, min(first + _CHUNK_BATCH, len(parsed.chunks))):
        chunk = parsed.chunks[index]
        chunk_text = parsed.text[chunk.start : chunk.end]
        locator = chunk.locator
        rows.append(
            (
                document_id,
                index,
                tenant_id,
                chunk_text,
                chunk.start,
                chunk.end,
                chunk.page_number,
                chunk.block_index,
                indexed_text(chunk_text),
                orjson.dumps(locator).decode() if json_text and locator is not None else locator,
            )
        )
    return rows


async def insert_chunks(
    session: AsyncSession, document_id: str, tenant_id: str, parsed: ParsedDocument
) -> None:
    """The index rows, in the session's transaction, a batch at a time, each batch made on a
    thread while the database takes the one before. PostgreSQL gets them by COPY: a long text
    makes tens of thousands of rows, and batched INSERTs of them cost more than parsing did."""
    connection = await session.connection()
    copy = connection.dialect.driver == "asyncpg"
    if copy and len(parsed.chunks) > _CHUNK_BATCH:
        # The GIN index's pending list is merged into the index during these inserts, in
        # work_mem: the default 4 MB makes a 100,000-row spreadsheet merge many times over.
        await connection.exec_driver_sql("SET LOCAL work_mem = '64MB'")

    def batch(first: int) -> asyncio.Task[list[tuple[Any, ...]]]:
        work = to_thread.run_sync(_chunk_rows, document_id, tenant_id, parsed, first, copy)
        return asyncio.ensure_future(work)

    upcoming: asyncio.Task[list[tuple[Any, ...]]] | None = None
    try:
        for first in range(0, len(parsed.chunks), _CHUNK_BATCH):
            rows = await (upcoming or batch(first))
            following = first + _CHUNK_BATCH
            upcoming = batch(following) if following < len(parsed.chunks) else None
            if copy:
                raw = await connection.get_raw_connection()
                # asyncpg's own call, outside SQLAlchemy: a connection lost under it told
                # as one lost under SQLAlchemy is.
                with driver_calls(raw.driver_connection):
                    await raw.driver_connection.copy_records_to_table(  # type: ignore[union-attr]
                        DocumentChunk.__tablename__, records=rows, columns=_CHUNK_COLUMNS
                    )
            else:
                # Core, not the ORM's bulk insert: the rows are plain values, and its
                # bookkeeping per row cost as much as the database's work.
                await connection.execute(
                    insert(DocumentChunk),
                    [dict(zip(_CHUNK_COLUMNS, row, strict=True)) for row in rows],
                )
    finally:
        if upcoming is not None:
            upcoming.cancel()


def page_rows(document_id: str, tenant_id: str, parsed: ParsedDocument) -> list[dict[str, Any]]:
    """The ``document_pages`` rows of a parsed paged document (none for other kinds)."""
    return [
        {
            "document_id": document_id,
            "page_number": page.number,
            "tenant_id": tenant_id,
            "start_char": page.start_char,
            "char_count": page.char_count,
            "text_source": page.text_source,
            "ocr_confidence": page.ocr_confidence,
            "warnings": list(page.warnings),
            "text": (
                parsed.text[page.start_char : page.start_char + page.char_count]
                if page.text_source == "ocr"
                else None
            ),
            "words": [list(word) for word in page.words] if page.words is not None else None,
        }
        for page in parsed.pages or ()
    ]


async def insert_pages(
    session: AsyncSession, document_id: str, tenant_id: str, parsed: ParsedDocument
) -> None:
    """How each page was read, in the session's transaction."""
    rows = page_rows(document_id, tenant_id, parsed)
    if rows:
        await session.execute(insert(DocumentPageRow), rows)


async def list_pages(
    session: AsyncSession, tenant_id: str, document_id: str, limit: int, cursor: str | None
) -> Page[DocumentPageRow]:
    """How each page of a PDF was read, in page order (none for other kinds)."""
    document = await get_document(session, tenant_id, document_id)
    query = select(DocumentPageRow).where(DocumentPageRow.document_id == document.id)
    return await _in_order(session, query, DocumentPageRow.page_number, limit, cursor)


async def pages_read(session: AsyncSession, document_ids: Sequence[str]) -> dict[str, PagesRead]:
    """How the pages of these documents were read, counted by one aggregate query over their
    pages (a document without pages has no entry)."""
    if not document_ids:
        return {}
    rows = await session.execute(_PAGES_READ, {"ids": list(document_ids)})
    counts: dict[str, dict[str, Any]] = {}
    for document_id, source, count, confidence in rows.all():
        found = counts.setdefault(document_id, dict.fromkeys(_SOURCES, 0))
        found[source] = count
        if source == "ocr" and confidence is not None:
            found["ocr_confidence"] = round(float(confidence), 4)
    return {
        document_id: PagesRead(**{"ocr_confidence": None} | found)
        for document_id, found in counts.items()
    }


# Built once, as every route that shows documents runs it, on the table, not the entity: plain
# rows skip the ORM's loading (half the time of the query on SQLite).
_pages = DocumentPageRow.__table__.c
_PAGES_READ = (
    select(
        _pages.document_id,
        _pages.text_source,
        func.count(),
        func.avg(case((_pages.text_source == "ocr", _pages.ocr_confidence))),
    )
    .where(_pages.document_id.in_(bindparam("ids", expanding=True)))
    .group_by(_pages.document_id, _pages.text_source)
)
_SOURCES = ("text_layer", "ocr", "none", "pending")


async def get_document(session: AsyncSession, tenant_id: str, document_id: str) -> Document:
    """The tenant's document; any other id, including another tenant's, is not found."""
    return await get_owned(session, Document, tenant_id, document_id, "document")


async def list_documents(
    session: AsyncSession, tenant_id: str, limit: int, cursor: str | None
) -> Page[Document]:
    """Newest first."""
    return await list_newest(session, Document, tenant_id, limit, cursor)


async def get_content(
    session: AsyncSession, tenant_id: str, document_id: str
) -> tuple[Document, bytes]:
    document = await get_document(session, tenant_id, document_id)
    data = await session.scalar(
        select(DocumentBlob.data).where(DocumentBlob.document_id == document.id)
    )
    assert data is not None, "every document has its blob"
    return document, data


async def list_chunks(
    session: AsyncSession, tenant_id: str, document_id: str, limit: int, cursor: str | None
) -> Page[DocumentChunk]:
    """In document order."""
    document = await get_document(session, tenant_id, document_id)
    query = select(DocumentChunk).where(DocumentChunk.document_id == document.id)
    return await _in_order(session, query, DocumentChunk.chunk_index, limit, cursor)


Row = TypeVar("Row")


async def _in_order(
    session: AsyncSession,
    query: Select[Row],
    position: InstrumentedAttribute[int],
    limit: int,
    cursor: str | None,
) -> Page[Row]:
    """A page of a document's rows (its pages, its chunks) in the order of their position."""
    if cursor is not None:
        query = query.where(position > decode_index_cursor(cursor))
    rows = (await session.scalars(query.order_by(position).limit(limit + 1))).all()
    return paginate(rows, limit, key=lambda row: getattr(row, position.key))


async def delete_document(
    session: AsyncSession, tenant_id: str, document_id: str, sources: SourceCache
) -> None:
    """Delete the document with its bytes and its index; no question is answered from it again."""
    document = await get_document(session, tenant_id, document_id)
    for table in (CollectionDocument, DocumentChunk, DocumentPageRow, OcrJob, DocumentBlob):
        await session.execute(delete(table).where(table.document_id == document.id))
    await session.delete(document)
    await session.commit()
    sources.forget(document_id)
