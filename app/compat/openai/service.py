"""A Responses request through the machinery of ``/v1``: a new response is the first turn of a
new conversation (on its documents, or its vector store's collection); ``previous_response_id``
asks a follow-up in the conversation of that response, claimed as ``/v1/answers`` claims it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import anyio
from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.answers.context import AnswerContext
from app.answers.request import Prepared, prepare, release
from app.answers.store import get_answer
from app.compat.openai.errors import invalid, unsupported
from app.compat.openai.files import filenames
from app.compat.openai.responses import Echo, ResponseQuestion
from app.conversations import service as conversations
from app.db.models import Answer, Conversation
from app.ids import new_id


async def prepare_response(
    session: AsyncSession, tenant_id: str, asked: ResponseQuestion, context: AnswerContext
) -> tuple[Prepared, Echo, bool]:
    """The question ready to send, what its response echoes, and whether a conversation was
    made for it (to discard, should the answer never be stored). A follow-up's conversation is
    claimed: ``answers.request.release`` gives it back.

    A response over documents is stored as a plain answer (its row says everything a
    conversation on it needs) and its conversation is made by its first follow-up; one over a
    vector store starts its conversation at once, the only place its collection is kept."""
    made = False
    if asked.previous_response_id is None:
        body = asked.answer_request()
        prepared = await prepare(session, tenant_id, body, context, earlier=asked.earlier)
        if body.collection_id is not None:
            conversation = Conversation(
                id=new_id("conv"),
                tenant_id=tenant_id,
                title=None,
                system=body.system,
                model=body.model,
                document_ids=[],
                collection_id=body.collection_id,
            )
            session.add(conversation)
            await session.commit()
            prepared = replace(prepared, conversation_id=conversation.id)
            made = True
        instructions, tools = body.system, asked.tools
    else:
        conversation = await _conversation_of(session, tenant_id, asked)
        _check_follow_up(asked, conversation)
        body = asked.follow_up(conversation.id)
        prepared = await prepare(session, tenant_id, body, context, claim=True)
        instructions, tools = conversation.system, asked.tools or tools_of(conversation)
    try:
        names = {
            source.document_id: source.filename or source.title or source.document_id
            for source in prepared.sources
            if source is not None
        }
        if prepared.passages:
            names |= await filenames(session, tenant_id, cited_ids(prepared))
        if session.in_transaction():
            await session.commit()
    except BaseException:
        with anyio.CancelScope(shield=True):
            await session.rollback()
            await release(context, prepared)
            await discard(context, prepared, made)
        raise
    echo = Echo(
        instructions=instructions,
        tools=tools,
        previous_response_id=asked.previous_response_id,
        include_results=asked.include_results,
        max_output_tokens=asked.max_tokens,
        filenames=names,
    )
    return prepared, echo, made


def cited_ids(prepared: Prepared) -> list[str]:
    """The documents the answer may cite: those sent whole and those of the passages."""
    ids = [source.document_id for source in prepared.sources if source is not None]
    return list(dict.fromkeys([*ids, *(passage.document_id for passage in prepared.passages)]))


def tools_of(conversation: Conversation | None) -> list[dict[str, Any]]:
    """The file_search tool of a conversation over a collection."""
    if conversation is None or conversation.collection_id is None:
        return []
    return [{"type": "file_search", "vector_store_ids": [conversation.collection_id]}]


async def _conversation_of(
    session: AsyncSession, tenant_id: str, asked: ResponseQuestion
) -> Conversation:
    """The conversation ``previous_response_id`` is a turn of; for a response over documents
    asked outside one, a conversation made now on its documents, instructions and the model
    the follow-up names, with that response as its first turn. Two follow-ups of it at once
    make one conversation: the second finds the first's."""
    assert asked.previous_response_id is not None
    answer = await get_answer(session, tenant_id, asked.previous_response_id)  # 404
    if answer.conversation_id is None:
        mode = (answer.retrieval or {}).get("mode", "documents")
        if mode != "documents" or not answer.documents:
            raise invalid(
                "previous_response_id",
                "This answer retrieved passages outside a conversation: it cannot be continued.",
            )
        conversation = Conversation(
            id=new_id("conv"),
            tenant_id=tenant_id,
            title=None,
            system=answer.system,
            model=asked.model,
            document_ids=[document["document_id"] for document in answer.documents],
            collection_id=None,
        )
        session.add(conversation)
        await session.flush()
        adopted = await session.execute(
            update(Answer)
            .where(Answer.id == answer.id, Answer.conversation_id.is_(None))
            .values(conversation_id=conversation.id)
        )
        if adopted.rowcount == 1:  # type: ignore[attr-defined]
            await session.commit()
            return conversation
        await session.rollback()  # another follow-up made its conversation first
        answer = await get_answer(session, tenant_id, asked.previous_response_id)
        assert answer.conversation_id is not None
    return await conversations.get_conversation(session, tenant_id, answer.conversation_id)


def _check_follow_up(asked: ResponseQuestion, conversation: Conversation) -> None:
    """A follow-up asks about its conversation's documents, with its instructions and model."""
    if asked.document_ids or asked.earlier:
        raise unsupported(
            "input",
            "A follow-up's input is the next user message: the conversation keeps its files "
            "and its earlier turns.",
        )
    if asked.vector_store_id not in (None, conversation.collection_id):
        raise unsupported("tools", "A follow-up searches its conversation's vector store.")
    if asked.system not in (None, conversation.system):
        raise unsupported("instructions", "A conversation keeps its first instructions.")
    if conversation.model is not None and asked.model != conversation.model:
        raise unsupported("model", f"This conversation answers with {conversation.model}.")


async def discard(context: AnswerContext, prepared: Prepared, made: bool) -> None:
    """Delete the conversation made for a response whose answer was never stored."""
    if not made or prepared.conversation_id is None:
        return
    with anyio.CancelScope(shield=True):
        async with context.sessions() as session:
            stored = await session.scalar(
                select(Answer.id).where(Answer.conversation_id == prepared.conversation_id)
            )
            if stored is None:
                await session.execute(
                    delete(Conversation).where(Conversation.id == prepared.conversation_id)
                )
                await session.commit()


async def response_echo(
    session: AsyncSession, tenant_id: str, answer: Answer, include_results: bool
) -> Echo:
    """What a stored response shows of its request: the instructions its answer was asked
    with, its conversation's vector store, the turn before it."""
    conversation = None
    previous = None
    if answer.conversation_id is not None:
        conversation = await conversations.get_conversation(
            session, tenant_id, answer.conversation_id
        )
        earlier = await session.scalar(
            select(Answer.id)
            .where(Answer.conversation_id == answer.conversation_id, Answer.id < answer.id)
            .order_by(Answer.id.desc())
            .limit(1)
        )
        previous = earlier
    ids: Sequence[str] = [
        *(document["document_id"] for document in answer.documents or []),
        *(passage["document_id"] for passage in (answer.retrieval or {}).get("passages", [])),
    ]
    return Echo(
        instructions=answer.system,
        tools=tools_of(conversation),
        previous_response_id=previous,
        include_results=include_results,
        max_output_tokens=answer.max_tokens,
        filenames=await filenames(session, tenant_id, list(dict.fromkeys(ids))),
    )
