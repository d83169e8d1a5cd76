"""Conversations: their documents are fixed at creation; their answers are their turns."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.collections.service import collection_document_ids
from app.conversations.schemas import ConversationRequest
from app.db.models import Answer, Conversation, utcnow
from app.db.tenancy import get_owned, list_newest, titles_of
from app.db.unavailable import unreachable
from app.documents.sources import RequestLimits, SourceCache, describe_sources, load_sources
from app.errors import Conflict, ErrorCode
from app.ids import new_id
from app.pagination import Page
from app.settings import Settings

log = logging.getLogger(__name__)


async def create_conversation(
    session: AsyncSession,
    tenant_id: str,
    body: ConversationRequest,
    cache: SourceCache,
    limits: RequestLimits,
) -> tuple[Conversation, list[dict[str, Any]]]:
    """A new conversation on the tenant's citable documents, sent whole with every turn
    (checked as a question would be), or on a collection."""
    sources = []
    if body.collection_id is not None:
        await collection_document_ids(session, tenant_id, body.collection_id)  # 404 if not ours
    else:
        assert body.document_ids is not None
        sources = await load_sources(session, tenant_id, body.document_ids, cache, limits)
    conversation = Conversation(
        id=new_id("conv"),
        tenant_id=tenant_id,
        title=body.title,
        system=body.system,
        model=body.model,
        document_ids=list(body.document_ids or ()),
        collection_id=body.collection_id,
    )
    session.add(conversation)
    await session.commit()
    return conversation, describe_sources(sources)


async def describe_documents(
    session: AsyncSession, tenant_id: str, conversations: Sequence[Conversation]
) -> list[list[dict[str, Any]]]:
    """Each conversation's documents as its answers list them; a deleted one has no title."""
    ids = {document_id for c in conversations for document_id in c.document_ids}
    titles = await titles_of(session, tenant_id, ids)
    return [
        [
            {"document_index": index, "document_id": document_id, "title": titles.get(document_id)}
            for index, document_id in enumerate(conversation.document_ids)
        ]
        for conversation in conversations
    ]


async def get_conversation(
    session: AsyncSession, tenant_id: str, conversation_id: str
) -> Conversation:
    return await get_owned(session, Conversation, tenant_id, conversation_id, "conversation")


async def list_conversations(
    session: AsyncSession, tenant_id: str, limit: int, cursor: str | None
) -> Page[Conversation]:
    """Newest first."""
    return await list_newest(session, Conversation, tenant_id, limit, cursor)


async def answers_of(session: AsyncSession, conversation_id: str) -> list[Answer]:
    """Every turn, in order (answer ids are time-ordered)."""
    query = select(Answer).where(Answer.conversation_id == conversation_id).order_by(Answer.id)
    return list((await session.scalars(query)).all())


async def delete_conversation(session: AsyncSession, tenant_id: str, conversation_id: str) -> None:
    """Delete the conversation with its answers."""
    conversation = await get_conversation(session, tenant_id, conversation_id)
    await session.execute(delete(Answer).where(Answer.conversation_id == conversation.id))
    await session.delete(conversation)
    await session.commit()


async def claim(session: AsyncSession, conversation: Conversation, hold: timedelta) -> datetime:
    """Take the conversation for one follow-up; a second at the same time gets 409.

    Two follow-ups at once would both build on the same history and store two answers to it,
    so the rule is one at a time. The claim expires after ``hold`` in case a process dies; its
    expiry time identifies it, so that ``release`` never frees someone else's claim.
    """
    now = utcnow()
    until = now + hold
    result = await session.execute(
        update(Conversation)
        .where(
            Conversation.id == conversation.id,
            or_(Conversation.busy_until.is_(None), Conversation.busy_until < now),
        )
        .values(busy_until=until)
        .execution_options(synchronize_session=False)
    )
    await session.commit()
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise Conflict(
            "The conversation is answering another follow-up; ask again when it is done.",
            code=ErrorCode.CONVERSATION_BUSY,
            headers={"Retry-After": "1"},
        )
    return until


def claim_hold(settings: Settings) -> timedelta:
    """How long a claim lasts if its process dies: longer than any answer can take (every
    attempt timing out, plus the retry budget), and at least 15 minutes for long streams."""
    longest = (
        settings.upstream_read_timeout * settings.upstream_max_attempts
        + settings.upstream_max_retry_seconds
        + 60
    )
    return timedelta(seconds=max(longest, 900))


async def free_after_interrupted(
    session: AsyncSession, conversation_id: str, begun: datetime, hold: timedelta
) -> None:
    """Free the conversation of a follow-up begun at ``begun`` whose process died: its claim,
    taken before it began, ends by ``begun + hold``; a later follow-up's claim, taken only
    once that one had expired, ends after it and is left alone. Not committed."""
    await session.execute(
        update(Conversation)
        .where(Conversation.id == conversation_id, Conversation.busy_until <= begun + hold)
        .values(busy_until=None)
        .execution_options(synchronize_session=False)
    )


async def release(
    sessions: async_sessionmaker[AsyncSession], conversation_id: str, claimed: datetime
) -> None:
    """Free the conversation, if the claim is still the one taken. While the database cannot
    be reached it is freed in the background once it can be: a follow-up that ended while the
    database was away must not keep its conversation busy until the claim expires."""
    try:
        await _release(sessions, conversation_id, claimed)
    except Exception as error:
        if not unreachable(error):
            raise
        task = asyncio.create_task(_release_once_reachable(sessions, conversation_id, claimed))
        _RELEASING.add(task)
        task.add_done_callback(_RELEASING.discard)


# Releases waiting for the database, held here: the event loop keeps only weak references.
_RELEASING: set[asyncio.Task[None]] = set()


async def _release_once_reachable(
    sessions: async_sessionmaker[AsyncSession], conversation_id: str, claimed: datetime
) -> None:
    wait = 0.5
    while utcnow() < claimed:  # past it the claim has expired, and frees nothing
        await asyncio.sleep(wait)
        try:
            await _release(sessions, conversation_id, claimed)
        except Exception as error:
            if not unreachable(error):
                log.exception("conversation %s could not be freed", conversation_id)
                return
            wait = min(wait * 2, 30.0)
        else:
            return


async def _release(
    sessions: async_sessionmaker[AsyncSession], conversation_id: str, claimed: datetime
) -> None:
    async with sessions() as session:
        await session.execute(
            update(Conversation)
            .where(Conversation.id == conversation_id, Conversation.busy_until == claimed)
            .values(busy_until=None)
        )
        await session.commit()
