"""Asking questions: build the request, call the upstream, resolve citations, store the answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.answers.citations import build_segments
from app.answers.prompt import build_message_request
from app.answers.schemas import AnswerRequest
from app.answers.sources import SourceCache, SourceDocument, load_sources
from app.auth.keys import Principal
from app.auth.limits import KeyLimits
from app.db.models import Answer
from app.errors import NotFound
from app.ids import new_id
from app.settings import Settings
from app.upstream.client import UpstreamClient


@dataclass(frozen=True, slots=True)
class AnswerContext:
    """The process-wide parts that answering needs."""

    upstream: UpstreamClient
    sources: SourceCache
    limits: KeyLimits
    settings: Settings


async def _prepare(
    session: AsyncSession, tenant_id: str, body: AnswerRequest, context: AnswerContext
) -> tuple[list[SourceDocument], dict[str, Any]]:
    settings = context.settings
    sources = await load_sources(
        session, tenant_id, body.document_ids, context.sources, settings.max_pdf_pages_per_request
    )
    # End the read transaction: no connection is held while the upstream answers.
    await session.commit()
    request = build_message_request(
        [source.prompt for source in sources],
        body.question,
        model=body.model or settings.default_model,
        max_tokens=body.max_tokens or settings.max_tokens,
        system=body.system or settings.system_prompt,
    )
    return sources, request


async def count_tokens(
    session: AsyncSession, principal: Principal, body: AnswerRequest, context: AnswerContext
) -> int:
    """What the question would cost in input tokens, as the upstream counts them."""
    _, request = await _prepare(session, principal.tenant_id, body, context)
    request.pop("max_tokens")
    return await context.upstream.count_tokens(request)


async def create_answer(
    session: AsyncSession, principal: Principal, body: AnswerRequest, context: AnswerContext
) -> Answer:
    """Ask the upstream, resolve every citation to a stored span, store the answer."""
    sources, request = await _prepare(session, principal.tenant_id, body, context)
    await context.limits.check_tokens(principal)
    reply = await context.upstream.create_message(request)
    message = reply.message
    usage = {
        "input_tokens": message.usage.input_tokens,
        "output_tokens": message.usage.output_tokens,
        "cache_creation_input_tokens": message.usage.cache_creation_input_tokens or 0,
        "cache_read_input_tokens": message.usage.cache_read_input_tokens or 0,
    }
    await context.limits.spend_tokens(principal, sum(usage.values()))
    content = [block.model_dump(exclude_none=True) for block in message.content]
    text, segments = build_segments(content, [source.index for source in sources])
    answer = Answer(
        id=new_id("ans"),
        tenant_id=principal.tenant_id,
        status="completed",
        question=body.question,
        system=request.get("system"),
        model=message.model,
        max_tokens=request["max_tokens"],
        stop_reason=message.stop_reason,
        text=text,
        segments=segments,
        documents=[
            {"document_index": index, "document_id": source.document_id, "title": source.title}
            for index, source in enumerate(sources)
        ],
        usage=usage,
        upstream_message_id=message.id,
        upstream_request_id=reply.request_id,
    )
    session.add(answer)
    await session.commit()
    return answer


async def get_answer(session: AsyncSession, tenant_id: str, answer_id: str) -> Answer:
    answer = await session.get(Answer, answer_id)
    if answer is None or answer.tenant_id != tenant_id:
        raise NotFound(f"No answer with id {answer_id!r}.", code="answer_not_found")
    return answer


def answer_payload(answer: Answer) -> dict[str, Any]:
    """The Answer as the API shows it, the same on create and on every read."""
    return {
        "id": answer.id,
        "conversation_id": None,
        "status": answer.status,
        "model": answer.model,
        "stop_reason": answer.stop_reason,
        "text": answer.text,
        "segments": answer.segments,
        "documents": answer.documents,
        "usage": answer.usage,
        "upstream": {
            "message_id": answer.upstream_message_id,
            "request_id": answer.upstream_request_id,
        },
        "created_at": answer.created_at.isoformat().replace("+00:00", "Z"),
    }
