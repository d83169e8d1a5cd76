"""Load the documents a question is about: checked for the tenant, ready for the prompt and
for citation resolution. Stored documents never change, so what was built for one request is
kept (bounded) for the next: a repeated question costs one query."""

from __future__ import annotations

import base64
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from anyio import to_thread
from sqlalchemy import Row, bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.answers.citations import DocumentIndex, IndexedChunk
from app.answers.prompt import PromptDocument
from app.db.models import Document, DocumentBlob, DocumentChunk
from app.errors import InvalidRequest, NotFound


@dataclass(frozen=True, slots=True)
class SourceDocument:
    document_id: str
    title: str | None
    prompt: PromptDocument
    index: DocumentIndex
    size: int  # characters held, for the cache's bound


class SourceCache:
    """Least recently used source documents, bounded by the characters they hold."""

    def __init__(self, max_chars: int) -> None:
        self._max_chars = max_chars
        self._held = 0
        self._entries: OrderedDict[str, SourceDocument] = OrderedDict()

    def get(self, document_id: str) -> SourceDocument | None:
        entry = self._entries.get(document_id)
        if entry is not None:
            self._entries.move_to_end(document_id)
        return entry

    def put(self, source: SourceDocument) -> None:
        if source.size > self._max_chars or source.document_id in self._entries:
            return
        self._entries[source.document_id] = source
        self._held += source.size
        while self._held > self._max_chars:
            _, evicted = self._entries.popitem(last=False)
            self._held -= evicted.size


# Built once, as every question runs it: building a statement costs more than running it. On the
# table, not the entity: rows of plain columns skip the ORM's loading, which costs more again.
_documents = Document.__table__.c
_DOCUMENTS = select(
    _documents.id,
    _documents.kind,
    _documents.title,
    _documents.context,
    _documents.page_count,
    _documents.citable,
    _documents.warnings,
).where(
    _documents.tenant_id == bindparam("tenant_id"),
    _documents.id.in_(bindparam("ids", expanding=True)),
)
Described = Row[*tuple[Any, ...]]  # a row of _DOCUMENTS


async def load_sources(
    session: AsyncSession,
    tenant_id: str,
    document_ids: Sequence[str],
    cache: SourceCache,
    max_pdf_pages: int,
) -> list[SourceDocument]:
    """The tenant's documents in the order asked; 404 for any other id, 422 if not citable."""
    if len(set(document_ids)) != len(document_ids):
        raise InvalidRequest(
            "document_ids lists a document more than once.", code="duplicate_document_ids"
        )
    rows = await session.execute(_DOCUMENTS, {"tenant_id": tenant_id, "ids": document_ids})
    found = {document.id: document for document in rows}
    documents = []
    for document_id in document_ids:
        if document_id not in found:
            raise NotFound(f"No document with id {document_id!r}.", code="document_not_found")
        document = found[document_id]
        if not document.citable:
            raise InvalidRequest(
                f"Document {document_id!r} has no text to cite ({', '.join(document.warnings)}).",
                code="document_not_citable",
            )
        documents.append(document)
    pages = sum(document.page_count or 0 for document in documents)
    if pages > max_pdf_pages:
        raise InvalidRequest(
            f"The PDFs have {pages} pages in all; one request takes at most {max_pdf_pages}.",
            code="too_many_pdf_pages",
        )
    sources = {d.id: hit for d in documents if (hit := cache.get(d.id)) is not None}
    for source in await _build(session, [d for d in documents if d.id not in sources]):
        sources[source.document_id] = source
        cache.put(source)
    return [sources[d.id] for d in documents]


async def _build(session: AsyncSession, documents: list[Described]) -> list[SourceDocument]:
    if not documents:
        return []
    ids = [document.id for document in documents]
    chunk_rows = await session.execute(
        select(
            DocumentChunk.document_id,
            DocumentChunk.text,
            DocumentChunk.start_char,
            DocumentChunk.end_char,
            DocumentChunk.page_number,
            DocumentChunk.block_index,
        )
        .where(DocumentChunk.document_id.in_(ids))
        .order_by(DocumentChunk.document_id, DocumentChunk.chunk_index)
    )
    chunks: dict[str, list[tuple[str, IndexedChunk]]] = {document_id: [] for document_id in ids}
    for document_id, text, start, end, page, block in chunk_rows.all():
        chunks[document_id].append((text, IndexedChunk(start, end, page, block)))
    pdf_ids = [document.id for document in documents if document.kind == "pdf"]
    blobs: dict[str, bytes] = {}
    if pdf_ids:
        blob_rows = await session.execute(
            select(DocumentBlob.document_id, DocumentBlob.data).where(
                DocumentBlob.document_id.in_(pdf_ids)
            )
        )
        blobs = {document_id: data for document_id, data in blob_rows.all()}
    sources = []
    for document in documents:
        texts = [text for text, _ in chunks[document.id]]
        text = "".join(texts)
        pdf_base64 = None
        if document.kind == "pdf":
            pdf_base64 = await to_thread.run_sync(_base64, blobs[document.id])
        prompt = PromptDocument(
            kind=document.kind,
            title=document.title,
            context=document.context,
            text=text if document.kind == "text" else None,
            pdf_base64=pdf_base64,
            blocks=texts if document.kind == "content" else (),
        )
        index = DocumentIndex(
            document.id,
            document.kind,
            text,
            [chunk for _, chunk in chunks[document.id]],
            document.page_count,
        )
        size = len(text) + len(pdf_base64 or "")
        sources.append(SourceDocument(document.id, document.title, prompt, index, size))
    return sources


def _base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
