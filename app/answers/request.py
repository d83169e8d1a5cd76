"""A question made ready to ask: every check that can be made before the upstream is called,
and the Messages request built (whole documents, or the passages that matter)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import anyio
from sqlalchemy.ext.asyncio import AsyncSession

from app.answers.answer import SupportMode
from app.answers.context import AnswerContext
from app.answers.prompt import Turn, assistant_blocks, build_message_request, passage_blocks
from app.answers.schemas import AnswerRequest, Retrieval
from app.collections.service import collection_document_ids
from app.conversations import service as conversations
from app.db.models import Conversation
from app.documents.index import DocumentIndex
from app.documents.sources import (
    DocumentsTooLarge,
    PromptDocument,
    SourceDocument,
    describe,
    describe_sources,
    load_sources,
    request_limits,
    sent_blocks,
)
from app.ids import new_id
from app.search.service import Passage, search_collection_passages, search_passages


@dataclass(frozen=True, slots=True)
class Prepared:
    """A question ready to send: its request, and what its citations resolve against."""

    id: str
    question: str
    conversation_id: str | None
    # The request's document blocks in order; None for one that is not a stored document.
    sources: Sequence[SourceDocument | None]
    request: dict[str, Any]
    retrieval: dict[str, Any]  # as stored: mode, every passage sent, the first new one
    passages: list[Passage] = field(default_factory=list)  # every passage sent, in order
    claim: datetime | None = None  # the conversation's claim, released with exactly this value
    # The document blocks sent, when they are not ``sources`` one for one (page windows).
    sent: Sequence[PromptDocument] | None = None
    support: SupportMode = "off"  # how its citations' support is checked

    @property
    def documents(self) -> list[dict[str, Any]]:
        return describe_sources(self.sources)

    @property
    def indexes(self) -> list[DocumentIndex | None]:
        """What each citation's ``document_index`` points at."""
        return [None if source is None else source.index for source in self.sources]


async def prepare(
    session: AsyncSession,
    tenant_id: str,
    body: AnswerRequest,
    context: AnswerContext,
    *,
    claim: bool = False,
    earlier: Sequence[Turn] = (),
) -> Prepared:
    """Check everything that can be checked before the upstream is called; build the request.

    A follow-up asked with ``claim`` first takes its conversation, then reads its history, so
    that no other follow-up can add a turn in between; ``release`` gives it back. ``earlier``
    are turns the caller sent with a question outside a conversation (a chat's history, in the
    OpenAI-compatible API), replayed before it.
    """
    settings = context.settings
    model, system = body.model, body.system
    conversation = None
    claimed = None
    if body.conversation_id is not None:
        conversation = await conversations.get_conversation(
            session, tenant_id, body.conversation_id
        )
        model, system = conversation.model, conversation.system
    target = await _target(session, tenant_id, body, conversation)
    if conversation is not None and claim:
        claimed = await conversations.claim(
            session, conversation, conversations.claim_hold(settings)
        )
    try:
        history: list[Turn] = list(earlier)
        if conversation is not None:
            # The turns the request replays: completed ones with text to send back (the
            # upstream refuses an empty assistant turn). Their passages are sent again in order,
            # so they are also what this answer's search_result_index counts over.
            history = [
                Turn(answer.question, answer.segments, passages_asked(answer.retrieval))
                for answer in await conversations.answers_of(session, conversation.id)
                if answer.status == "completed" and assistant_blocks(answer.segments)
            ]
        mode, sources, passages = await _ground(session, tenant_id, body.question, target, context)
        # End the read transaction: no connection is held while the upstream answers. (Whether
        # one began: questions about recently read documents do not touch the database.)
        if session.in_transaction():
            await session.commit()
        request = build_message_request(
            sent_blocks(sources),
            body.question,
            model=model or settings.default_model,
            max_tokens=body.max_tokens or settings.max_tokens,
            system=system or settings.system_prompt,
            passages=passages,
            history=history,
        )
    except BaseException:
        if claimed is not None and body.conversation_id is not None:
            with anyio.CancelScope(shield=True):
                # Give this session's connection back first: SQLite has only the one.
                await session.rollback()
                await conversations.release(context.sessions, body.conversation_id, claimed)
        raise
    replayed = [passage for turn in history for passage in turn.passages]
    sent = [*replayed, *passages]
    retrieval = {
        "mode": mode,
        "passages": [stored_passage(passage) for passage in sent],
        "first_new_passage": len(replayed),
    }
    return Prepared(
        id=new_id("ans"),
        question=body.question,
        conversation_id=body.conversation_id,
        sources=sources,
        request=request,
        retrieval=retrieval,
        passages=sent,
        claim=claimed,
        sent=sent_blocks(sources),
        support=body.support or settings.support_check,
    )


async def release(context: AnswerContext, prepared: Prepared) -> None:
    """Give the conversation back, shielded: a cancelled request must not keep it busy."""
    if prepared.conversation_id is not None and prepared.claim is not None:
        with anyio.CancelScope(shield=True):
            await conversations.release(context.sessions, prepared.conversation_id, prepared.claim)


@dataclass(frozen=True, slots=True)
class _Target:
    """What a question is about, and how its documents are sent."""

    document_ids: list[str]
    mode: str  # "auto" | "documents" | "passages"
    collection_id: str | None
    max_passages: int


async def _target(
    session: AsyncSession, tenant_id: str, body: AnswerRequest, conversation: Conversation | None
) -> _Target:
    retrieval = body.retrieval or Retrieval()
    if conversation is not None:
        if conversation.collection_id is not None:
            # Over a collection, each turn retrieves its own passages.
            return _Target([], "passages", conversation.collection_id, retrieval.max_passages)
        return _Target(conversation.document_ids, "documents", None, retrieval.max_passages)
    if body.collection_id is not None:
        ids = []
        if retrieval.mode != "passages":  # whole documents, if they fit: which are they?
            ids = await collection_document_ids(session, tenant_id, body.collection_id)
        return _Target(ids, retrieval.mode, body.collection_id, retrieval.max_passages)
    assert body.document_ids is not None
    return _Target(body.document_ids, retrieval.mode, None, retrieval.max_passages)


async def _ground(
    session: AsyncSession, tenant_id: str, question: str, target: _Target, context: AnswerContext
) -> tuple[str, list[SourceDocument], list[Passage]]:
    """Whole documents, or the passages that matter for the question: the mode used, and
    what is sent."""
    settings = context.settings
    limits = request_limits(settings, budget=target.mode == "auto")
    # A collection's scans, or a document deleted meanwhile, are no reason to refuse a question.
    from_collection = target.collection_id is not None
    fits_by_count = len(target.document_ids) <= limits.documents
    if target.mode == "documents" or (target.mode == "auto" and fits_by_count):
        try:
            sources = await load_sources(
                session,
                tenant_id,
                target.document_ids,
                context.sources,
                limits,
                from_collection=from_collection,
            )
            return "documents", sources, []
        except DocumentsTooLarge:
            if target.mode == "documents":
                raise
    options = {
        "window": settings.search_window_chunks,
        "per_document": settings.search_max_passages_per_document,
    }
    if target.collection_id is not None:
        found = await search_collection_passages(
            session, tenant_id, question, target.collection_id, target.max_passages, **options
        )
    else:
        await describe(session, tenant_id, target.document_ids)  # 404 or 422 as for documents
        found = await search_passages(
            session, tenant_id, question, target.document_ids, target.max_passages, **options
        )
    # A passage of blank chunks would be an empty search result, which the upstream refuses.
    return "passages", [], [passage for passage in found if passage_blocks(passage)]


# What an answer stores of each passage beside what the API shows: enough to send it again.
_STORED_ONLY = ("chunk_lengths", "chunk_locators")


def stored_passage(passage: Passage) -> dict[str, Any]:
    """A passage as an answer stores it: as the API shows it, and its chunks' lengths and
    locators, so that a follow-up can send it again block for block."""
    return {
        "document_id": passage.document_id,
        "title": passage.title,
        "text": passage.text,
        "start_char": passage.start_char,
        "end_char": passage.end_char,
        "start_page": passage.start_page,
        "end_page": passage.end_page,
        "chunk_indices": passage.chunk_indices,
        "score": passage.score,
        "chunk_lengths": [len(text) for text in passage.chunk_texts],
        "chunk_locators": passage.chunk_locators,
    }


def passages_asked(retrieval: dict[str, Any] | None) -> list[Passage]:
    """The passages an earlier answer retrieved for its own question."""
    if not retrieval:
        return []
    passages = []
    for stored in retrieval["passages"][retrieval["first_new_passage"] :]:
        texts, start = [], 0
        for length in stored["chunk_lengths"]:
            texts.append(stored["text"][start : start + length])
            start += length
        fields = {k: v for k, v in stored.items() if k not in _STORED_ONLY}
        locators = stored.get("chunk_locators") or []
        passages.append(Passage(**fields, chunk_texts=texts, chunk_locators=locators))
    return passages
