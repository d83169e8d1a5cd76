"""The conversations routes. A follow-up is createAnswer with conversation_id."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Response, status

from app.answers.schemas import ConversationOut, ConversationPage
from app.answers.store import answer_out
from app.api.deps import (
    DEFAULT_LIMIT,
    ContextDep,
    LimitQuery,
    PageCursorDep,
    PdfPagesDep,
    SessionDep,
    TenantDep,
)
from app.api.problems import AUTH_PROBLEMS, BODY_PROBLEMS, ProblemResponse, links, problems
from app.conversations import service
from app.conversations.schemas import ConversationRequest
from app.db.models import Conversation
from app.documents.sources import request_limits
from app.ids import NO_NUL

ConversationId = Annotated[
    str, Path(pattern=NO_NUL, description="The conversation's id, `conv_…`.")
]
router = APIRouter(
    prefix="/v1/conversations", tags=["conversations"], responses=problems(*AUTH_PROBLEMS)
)


def conversation_out(
    conversation: Conversation, documents: list[dict[str, Any]]
) -> ConversationOut:
    """The conversation without its answers (which only getConversation shows)."""
    return ConversationOut.model_validate(
        {
            "id": conversation.id,
            "title": conversation.title,
            "system": conversation.system,
            "model": conversation.model,
            "documents": documents,
            "collection_id": conversation.collection_id,
            "created_at": conversation.created_at,
        }
    )


@router.post(
    "",
    operation_id="createConversation",
    summary="Start a conversation on fixed documents",
    status_code=status.HTTP_201_CREATED,
    response_model=ConversationOut,
    responses={
        201: {"links": links("conversation_id", "getConversation", "deleteConversation")},
        **problems(*BODY_PROBLEMS, 404),
    },
)
async def create_conversation(
    body: ConversationRequest, session: SessionDep, tenant_id: TenantDep, context: ContextDep
) -> ConversationOut:
    conversation, documents = await service.create_conversation(
        session, tenant_id, body, context.sources, request_limits(context.settings)
    )
    return conversation_out(conversation, documents)


@router.get(
    "",
    operation_id="listConversations",
    summary="List conversations, newest first",
    response_model=ConversationPage,
    responses=problems(422),
)
async def list_conversations(
    session: SessionDep,
    tenant_id: TenantDep,
    cursor: PageCursorDep,
    limit: LimitQuery = DEFAULT_LIMIT,
) -> ConversationPage:
    page = await service.list_conversations(session, tenant_id, limit, cursor.value)
    described = await service.describe_documents(session, tenant_id, page.items)
    return ConversationPage(
        data=[conversation_out(c, d) for c, d in zip(page.items, described, strict=True)],
        next_cursor=cursor.next(page.next_cursor),
    )


@router.get(
    "/{conversation_id}",
    operation_id="getConversation",
    summary="Get a conversation with its answers in order",
    response_model=ConversationOut,
    response_model_exclude_unset=True,  # its answers as AnswerOut.shown
    responses=problems(404, 422),
)
async def get_conversation(
    conversation_id: ConversationId, session: SessionDep, tenant_id: TenantDep, pages: PdfPagesDep
) -> ConversationOut:
    conversation = await service.get_conversation(session, tenant_id, conversation_id)
    answers = await service.answers_of(session, conversation.id)
    [documents] = await service.describe_documents(session, tenant_id, [conversation])
    out = conversation_out(conversation, documents)
    out.answers = [await answer_out(session, pages, answer) for answer in answers]
    return out


@router.delete(
    "/{conversation_id}",
    operation_id="deleteConversation",
    summary="Delete a conversation and its answers",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=ProblemResponse,  # every body it sends is a problem: see app.api.problems
    response_description="Deleted.",
    responses=problems(*AUTH_PROBLEMS, 404, 422, model=True),
)
async def delete_conversation(
    conversation_id: ConversationId, session: SessionDep, tenant_id: TenantDep
) -> Response:
    await service.delete_conversation(session, tenant_id, conversation_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
