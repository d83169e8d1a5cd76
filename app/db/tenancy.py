"""Reading a tenant's rows: another tenant's id is not found, exactly like a missing one."""

from __future__ import annotations

from collections.abc import Set
from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import Answer, AnswerBatch, Collection, Conversation, Document
from app.errors import ErrorCode, NotFound
from app.pagination import Page, decode_cursor, paginate

Owned = TypeVar("Owned", Document, Answer, Conversation, Collection, AnswerBatch)

_NOT_FOUND: dict[type[Document | Answer | Conversation | Collection | AnswerBatch], ErrorCode] = {
    Document: ErrorCode.DOCUMENT_NOT_FOUND,
    Answer: ErrorCode.ANSWER_NOT_FOUND,
    Conversation: ErrorCode.CONVERSATION_NOT_FOUND,
    Collection: ErrorCode.COLLECTION_NOT_FOUND,
    AnswerBatch: ErrorCode.ANSWER_BATCH_NOT_FOUND,
}


async def get_owned(
    session: AsyncSession, model: type[Owned], tenant_id: str, row_id: str, what: str
) -> Owned:
    """The tenant's row with that id, else 404 ``document_not_found`` (or answer, conversation)."""
    row = await session.get(model, row_id)
    if row is None or row.tenant_id != tenant_id:
        raise NotFound(f"No {what} with id {row_id!r}.", code=_NOT_FOUND[model])
    return row


async def list_newest(
    session: AsyncSession, model: type[Owned], tenant_id: str, limit: int, cursor: str | None
) -> Page[Owned]:
    """A page of the tenant's rows, newest first (ids are time-ordered)."""
    query = select(model).where(model.tenant_id == tenant_id)
    if cursor is not None:
        query = query.where(model.id < decode_cursor(cursor))
    rows = (await session.scalars(query.order_by(model.id.desc()).limit(limit + 1))).all()
    return paginate(rows, limit, key=lambda row: row.id)


async def list_around(
    session: AsyncSession,
    model: type[Owned],
    tenant_id: str,
    limit: int,
    *,
    before_id: str | None = None,
    after_id: str | None = None,
) -> tuple[list[Owned], bool]:
    """A page of the tenant's rows, newest first, as the Messages API pages its lists: those
    just after ``after_id`` (older), or just before ``before_id`` (newer); and whether there
    are more beyond the page in that direction."""
    query = select(model).where(model.tenant_id == tenant_id)
    if before_id is not None:
        query = query.where(model.id > before_id).order_by(model.id.asc())
    else:
        if after_id is not None:
            query = query.where(model.id < after_id)
        query = query.order_by(model.id.desc())
    rows = list((await session.scalars(query.limit(limit + 1))).all())
    more = len(rows) > limit
    rows = rows[:limit]
    if before_id is not None:
        rows.reverse()
    return rows, more


async def titles_of(
    session: AsyncSession, tenant_id: str, document_ids: Set[str]
) -> dict[str, str | None]:
    """The titles of those of the tenant's documents that exist, by id."""
    if not document_ids:
        return {}
    rows = await session.execute(
        select(Document.id, Document.title).where(
            Document.tenant_id == tenant_id, Document.id.in_(document_ids)
        )
    )
    return {document_id: title for document_id, title in rows.all()}
