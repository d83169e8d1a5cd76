"""Share links: a token that shows one answer, read-only and without a key, until it expires.

A token is 256 random bits, shown once in the link; only its SHA-256 is stored (a secret of that
entropy needs no slow hash, as for API keys). An unknown or expired token, or one whose answer
was deleted, finds nothing, and says no more than that.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import Answer, AnswerShareLink, Document, DocumentChunk, utcnow
from app.db.tenancy import get_owned
from app.ids import new_id

MIN_EXPIRES_IN = 60
MAX_EXPIRES_IN = 90 * 24 * 3600
DEFAULT_EXPIRES_IN = 7 * 24 * 3600


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class NewLink:
    token: str  # shown once
    expires_at: datetime


async def create_link(
    session: AsyncSession, tenant_id: str, answer_id: str, expires_in: int
) -> NewLink:
    """A new link to the tenant's answer (404 for any other id)."""
    answer = await get_owned(session, Answer, tenant_id, answer_id, "answer")
    token = secrets.token_urlsafe(32)
    expires_at = utcnow() + timedelta(seconds=expires_in)
    session.add(
        AnswerShareLink(
            id=new_id("shr"),
            tenant_id=tenant_id,
            answer_id=answer.id,
            token_hash=hash_token(token),
            expires_at=expires_at,
        )
    )
    await session.commit()
    return NewLink(token, expires_at)


async def shared_answer(session: AsyncSession, token: str) -> Answer | None:
    """The answer the token shows, while it is valid; None otherwise."""
    if not token or len(token) > 100:
        return None
    answer: Answer | None = await session.scalar(
        select(Answer)
        .join(AnswerShareLink, AnswerShareLink.answer_id == Answer.id)
        .where(AnswerShareLink.token_hash == hash_token(token))
        .where(AnswerShareLink.expires_at > utcnow())
        .where(AnswerShareLink.tenant_id == Answer.tenant_id)
    )
    return answer


def _cited_ids(answer: Answer) -> set[str]:
    """The documents an answer may show: those it was asked about and those it cites."""
    ids = {document["document_id"] for document in answer.documents}
    for segment in answer.segments:
        for citation in segment["citations"]:
            if citation.get("document_id"):
                ids.add(citation["document_id"])
    return ids


async def shared_documents(session: AsyncSession, answer: Answer) -> dict[str, Document]:
    """The answer's documents that still exist, by id."""
    rows = await session.scalars(
        select(Document).where(
            Document.tenant_id == answer.tenant_id, Document.id.in_(_cited_ids(answer))
        )
    )
    return {document.id: document for document in rows}


async def shared_document(
    session: AsyncSession, answer: Answer, document_id: str
) -> Document | None:
    """One of the answer's documents; None for any other id."""
    if document_id not in _cited_ids(answer):
        return None
    document = await session.get(Document, document_id)
    if document is None or document.tenant_id != answer.tenant_id:
        return None
    return document


async def document_text(session: AsyncSession, document_id: str) -> str:
    """The stored text: the chunks, which tile it, joined."""
    texts = await session.scalars(
        select(DocumentChunk.text)
        .where(DocumentChunk.document_id == document_id)
        .order_by(DocumentChunk.chunk_index)
    )
    return "".join(texts)
