"""Messages and token counts over stored documents, through the machinery of ``/v1/answers``:
the same source loading, upstream client, citation resolver and answer store."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy.ext.asyncio import AsyncSession

from app.answers.answer import whole_documents
from app.answers.context import AnswerContext
from app.answers.request import Prepared
from app.compat.messages import MessagesRequest, ground
from app.documents.sources import load_sources, request_limits
from app.ids import new_id


async def prepare(
    session: AsyncSession, tenant_id: str, request: MessagesRequest, context: AnswerContext
) -> Prepared:
    """The request with its files replaced by the tenant's stored documents (404
    ``document_not_found`` for any other id, 422 for one with nothing to cite or more than one
    request takes) and documents marked for the prompt cache; ready to send and to store."""
    file_ids = request.file_ids
    named = list(dict.fromkeys(file_id for file_id in file_ids if file_id is not None))
    loaded = await load_sources(
        session, tenant_id, named, context.sources, request_limits(context.settings)
    )
    # End the read transaction: no connection is held while the upstream answers.
    await session.commit()
    by_id = {source.document_id: source for source in loaded}
    sources = [None if file_id is None else by_id[file_id] for file_id in file_ids]
    ground(request, sources)
    return Prepared(
        id=new_id("ans"),
        question=request.question.replace("\x00", "\ufffd"),  # PostgreSQL text holds no NUL
        conversation_id=None,
        sources=sources,
        request=request.body,
        retrieval=whole_documents(),
        support=context.settings.support_check,
    )


def upstream_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The caller's headers that go upstream with its request: the API version and betas."""
    return {
        name: value
        for name in ("anthropic-version", "anthropic-beta")
        if (value := headers.get(name)) is not None
    }
