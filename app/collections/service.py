"""Collections: named sets of a tenant's documents. Takes a session and plain arguments."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.dialects.postgresql import insert as postgres_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import Collection, CollectionDocument, Document
from app.db.tenancy import get_owned, list_newest
from app.errors import ErrorCode, NotFound
from app.ids import new_id
from app.pagination import Page, decode_cursor, paginate


@dataclass(frozen=True, slots=True)
class CountedCollection:
    collection: Collection
    document_count: int
    processing: int = 0  # of them, still being read by OCR
    failed: int = 0  # of them, that could not be read


async def create_collection(
    session: AsyncSession,
    tenant_id: str,
    name: str,
    description: str | None,
    metadata: dict[str, Any],
) -> CountedCollection:
    collection = Collection(
        id=new_id("col"),
        tenant_id=tenant_id,
        name=name,
        description=description,
        user_metadata=metadata,
    )
    session.add(collection)
    await session.commit()
    return CountedCollection(collection, 0)


async def get_collection(
    session: AsyncSession, tenant_id: str, collection_id: str
) -> CountedCollection:
    """The tenant's collection; any other id, including another tenant's, is not found."""
    collection = await _owned(session, tenant_id, collection_id)
    counts = await _document_counts(session, [collection.id])
    return _counted(collection, counts)


async def list_collections(
    session: AsyncSession, tenant_id: str, limit: int, cursor: str | None
) -> Page[CountedCollection]:
    """Newest first."""
    page = await list_newest(session, Collection, tenant_id, limit, cursor)
    counts = await _document_counts(session, [c.id for c in page.items])
    items = [_counted(c, counts) for c in page.items]
    return Page(items, page.next_cursor)


async def counted(
    session: AsyncSession, collections: Sequence[Collection]
) -> list[CountedCollection]:
    """These collections, each with its number of documents."""
    counts = await _document_counts(session, [c.id for c in collections])
    return [_counted(c, counts) for c in collections]


async def get_membership(
    session: AsyncSession, tenant_id: str, collection_id: str, document_id: str
) -> tuple[Document, datetime]:
    """The document in the tenant's collection, and when it was added; 404 when the collection
    is not the tenant's (``collection_not_found``) or the document is not in it."""
    collection = await _owned(session, tenant_id, collection_id)
    row = (
        await session.execute(
            select(Document, CollectionDocument.added_at)
            .join(CollectionDocument, CollectionDocument.document_id == Document.id)
            .where(
                CollectionDocument.collection_id == collection.id,
                CollectionDocument.document_id == document_id,
            )
        )
    ).first()
    if row is None:
        raise NotFound(f"No document with id {document_id!r}.", code=ErrorCode.DOCUMENT_NOT_FOUND)
    return row[0], row[1]


async def delete_collection(session: AsyncSession, tenant_id: str, collection_id: str) -> None:
    """Delete the collection; its documents stay."""
    collection = await _owned(session, tenant_id, collection_id)
    await session.execute(
        delete(CollectionDocument).where(CollectionDocument.collection_id == collection.id)
    )
    await session.delete(collection)
    await session.commit()


async def add_documents(
    session: AsyncSession, tenant_id: str, collection_id: str, document_ids: Sequence[str]
) -> CountedCollection:
    """Add the documents; those already in it stay as they are. One that is not the tenant's
    is 404 and then none is added."""
    collection = await _owned(session, tenant_id, collection_id)
    unique = await owned_document_ids(session, tenant_id, document_ids)
    rows = [
        {"collection_id": collection.id, "document_id": document_id, "tenant_id": tenant_id}
        for document_id in unique
    ]
    if not rows:
        return await get_collection(session, tenant_id, collection.id)
    connection = await session.connection()
    upsert = postgres_insert if connection.dialect.name == "postgresql" else sqlite_insert
    # ON CONFLICT DO NOTHING: a concurrent add of the same document is not an error either.
    await session.execute(upsert(CollectionDocument).on_conflict_do_nothing(), rows)
    await session.commit()
    return await get_collection(session, tenant_id, collection.id)


async def remove_document(
    session: AsyncSession, tenant_id: str, collection_id: str, document_id: str
) -> None:
    """Take the document out of the collection (the document stays); 404 when it is not in it."""
    collection = await _owned(session, tenant_id, collection_id)
    result = await session.execute(
        delete(CollectionDocument)
        .where(
            CollectionDocument.collection_id == collection.id,
            CollectionDocument.document_id == document_id,
        )
        .returning(CollectionDocument.document_id)
    )
    if result.first() is None:
        raise NotFound(f"No document with id {document_id!r}.", code=ErrorCode.DOCUMENT_NOT_FOUND)
    await session.commit()


async def list_documents(
    session: AsyncSession,
    tenant_id: str,
    collection_id: str,
    limit: int,
    cursor: str | None,
    *,
    status: str | None = None,
) -> Page[Document]:
    """The collection's documents, newest first (only those of ``status`` when it is given:
    ``ready``, ``processing`` or ``failed``)."""
    collection = await _owned(session, tenant_id, collection_id)
    query = (
        select(Document)
        .join(CollectionDocument, CollectionDocument.document_id == Document.id)
        .where(CollectionDocument.collection_id == collection.id)
    )
    if status is not None:
        query = query.where(Document.status == status)
    if cursor is not None:
        query = query.where(Document.id < decode_cursor(cursor))
    rows = (await session.scalars(query.order_by(Document.id.desc()).limit(limit + 1))).all()
    return paginate(rows, limit, key=lambda document: document.id)


async def collection_document_ids(
    session: AsyncSession, tenant_id: str, collection_id: str
) -> list[str]:
    """The ids of the collection's documents (404 ``collection_not_found``)."""
    collection = await _owned(session, tenant_id, collection_id)
    ids = await session.scalars(
        select(CollectionDocument.document_id)
        .where(CollectionDocument.collection_id == collection.id)
        .order_by(CollectionDocument.document_id)
    )
    return list(ids)


async def owned_document_ids(
    session: AsyncSession, tenant_id: str, document_ids: Sequence[str]
) -> list[str]:
    """The ids, each once, in order, when every one is the tenant's document; else 404
    ``document_not_found`` for the first that is not."""
    unique = list(dict.fromkeys(document_ids))
    found = set(
        await session.scalars(
            select(Document.id).where(Document.tenant_id == tenant_id, Document.id.in_(unique))
        )
    )
    for document_id in unique:
        if document_id not in found:
            raise NotFound(
                f"No document with id {document_id!r}.", code=ErrorCode.DOCUMENT_NOT_FOUND
            )
    return unique


async def _owned(session: AsyncSession, tenant_id: str, collection_id: str) -> Collection:
    return await get_owned(session, Collection, tenant_id, collection_id, "collection")


async def _document_counts(
    session: AsyncSession, collection_ids: list[str]
) -> dict[str, dict[str, int]]:
    """Each collection's documents counted by their status."""
    if not collection_ids:
        return {}
    rows = await session.execute(
        select(CollectionDocument.collection_id, Document.status, func.count())
        .join(Document, Document.id == CollectionDocument.document_id)
        .where(CollectionDocument.collection_id.in_(collection_ids))
        .group_by(CollectionDocument.collection_id, Document.status)
    )
    counts: dict[str, dict[str, int]] = {}
    for collection_id, status, count in rows.all():
        counts.setdefault(collection_id, {})[status] = count
    return counts


def _counted(collection: Collection, counts: dict[str, dict[str, int]]) -> CountedCollection:
    by_status = counts.get(collection.id, {})
    return CountedCollection(
        collection,
        sum(by_status.values()),
        by_status.get("processing", 0),
        by_status.get("failed", 0),
    )
