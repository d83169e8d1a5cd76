"""Storing an answer and reading it back.

An answer's row is built from what the upstream answered (``Reply``), every citation resolved;
the API's Answer (``AnswerOut``) is made of the row, the same on create, at the end of a
stream, in a batch and on read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncSession

from app.answers.answer import USAGE_FIELDS, AnswerOut
from app.answers.citations import build_segments
from app.answers.context import AnswerContext
from app.answers.judging import judge_segments
from app.answers.request import Prepared
from app.auth.keys import Principal
from app.db.models import Answer, AnswerShareLink, utcnow
from app.db.tenancy import get_owned
from app.documents.pages import PdfPages
from app.documents.pictures import boxes_wanted, lacks_boxes, measure_boxes, with_boxes
from app.observability import Metrics
from app.upstream.wire import Message


@dataclass(frozen=True, slots=True)
class Reply:
    """What the upstream answered: a whole message, or as much of a stream as arrived."""

    status: str  # the answer's: completed, failed, cancelled; in_progress while it streams
    content: list[dict[str, Any]]  # content blocks
    model: str
    stop_reason: str | None
    usage: dict[str, int]
    message_id: str | None = None
    request_id: str | None = None

    @classmethod
    def of_message(cls, message: Message, request_id: str | None) -> Reply:
        return cls(
            "completed",
            [block.model_dump(exclude_none=True) for block in message.content],
            message.model,
            message.stop_reason,
            usage_of(message),
            message.id,
            request_id,
        )


def usage_of(message: Message) -> dict[str, int]:
    """An upstream message's usage as an answer stores it."""
    return {field: getattr(message.usage, field) or 0 for field in USAGE_FIELDS}


# What a streamed answer's end sets in the row inserted at its start.
ENDING_COLUMNS = (
    "status",
    "model",
    "stop_reason",
    "text",
    "segments",
    "usage",
    "upstream_message_id",
    "upstream_request_id",
)


async def store_answer(
    context: AnswerContext,
    principal: Principal,
    prepared: Prepared,
    reply: Reply,
    *,
    begun: datetime | None = None,
) -> AnswerOut:
    """Resolve, store and count the answer to ``prepared``; the Answer as the API shows it.
    ``begun``: its row was inserted then, when its stream began (``begin_answer``), and is
    now finished (``ENDING_COLUMNS``)."""
    await context.limits.spend_tokens(principal, sum(reply.usage.values()))
    row = answer_row(prepared, principal.tenant_id, reply, key_id=principal.key_id)
    if prepared.support == "judge" and reply.status == "completed":
        judged = await judge_segments(context, row["segments"], reply.model, principal)
        if judged is not None:
            row["usage"] = {**row["usage"], "support_check": judged}
            await context.limits.spend_tokens(principal, sum(judged.values()))
    if begun is not None:
        row["created_at"] = begun
    # The segments were made just now: their spans get boxes in place, and a database session
    # only when some of them are in PDFs.
    if wanted := boxes_wanted(row["segments"]):
        async with context.sessions() as session:
            await measure_boxes(session, context.pages, wanted)
    answer = AnswerOut.of_row(row)  # before the row is stored: nothing stored that is not shown
    if begun is not None:
        await context.answer_ends.update(row)
    else:
        await context.answers.insert(row)
    count_stored(context.metrics, row)
    return answer


async def begin_answer(
    context: AnswerContext, principal: Principal, prepared: Prepared, reply: Reply
) -> datetime:
    """Insert the row of a stream that has begun, in progress and owned by this process, with
    what arrived so far; when it was made (the Answer's ``created_at``)."""
    row = answer_row(
        prepared, principal.tenant_id, reply, owner=context.live.owner, key_id=principal.key_id
    )
    await context.answers.insert(row)
    return row["created_at"]  # type: ignore[no-any-return]


def answer_row(
    prepared: Prepared,
    tenant_id: str,
    reply: Reply,
    *,
    batch_id: str | None = None,
    documents: list[dict[str, Any]] | None = None,
    owner: str | None = None,
    key_id: str | None = None,
) -> dict[str, Any]:
    """The row of the answer ``reply`` gives to ``prepared``, every citation resolved. Pure:
    the same for an answer asked alone and for one of a batch (``documents`` as described when
    the batch was made). ``owner``: the process relaying it, for a stream in progress."""
    # A stream's row in progress gets its citations' support when it ends.
    support = None if reply.status == "in_progress" else prepared.support
    text, segments = build_segments(
        reply.content, prepared.indexes, prepared.passages, prepared.sent, support
    )
    return {
        "id": prepared.id,
        "tenant_id": tenant_id,
        "conversation_id": prepared.conversation_id,
        "status": reply.status,
        "question": prepared.question,
        "system": system_text(prepared.request.get("system")),
        "model": reply.model,
        "max_tokens": prepared.request["max_tokens"],
        "stop_reason": reply.stop_reason,
        "text": text,
        "segments": segments,
        "documents": prepared.documents if documents is None else documents,
        "retrieval": prepared.retrieval,
        "usage": reply.usage,
        "upstream_message_id": reply.message_id,
        "upstream_request_id": reply.request_id,
        "batch_id": batch_id,
        "created_at": utcnow(),
        "stream_owner": owner,
        "api_key_id": key_id,
    }


def count_stored(metrics: Metrics, row: Mapping[str, Any]) -> None:
    """Count a stored answer (its row) in the metrics."""
    metrics.answers.labels(row["status"]).inc()
    metrics.count_usage(row["usage"])
    if any(
        not citation["verified"] and citation["document_id"] is not None
        for segment in row["segments"]
        for citation in segment["citations"]
    ):
        metrics.unverified.inc()


def system_text(system: Any) -> str | None:
    """A request's ``system`` as an answer stores it: its text, also when given as blocks."""
    if isinstance(system, list):
        system = "".join(
            str(block.get("text") or "")
            for block in system
            if isinstance(block, dict) and block.get("type") == "text"
        )
    if not isinstance(system, str):
        return None
    return system.replace("\x00", "\ufffd")  # PostgreSQL text holds no NUL


async def get_answer(session: AsyncSession, tenant_id: str, answer_id: str) -> Answer:
    return await get_owned(session, Answer, tenant_id, answer_id, "answer")


async def delete_answer(session: AsyncSession, tenant_id: str, answer_id: str) -> None:
    """Delete the tenant's answer; its share links stop working with it."""
    answer = await get_answer(session, tenant_id, answer_id)
    await session.execute(delete(AnswerShareLink).where(AnswerShareLink.answer_id == answer.id))
    await session.delete(answer)
    await session.commit()


async def answer_out(session: AsyncSession, pages: PdfPages, answer: Answer) -> AnswerOut:
    """A stored answer as the API shows it. One stored before spans had boxes gets them here
    (measured again on each read; PDFium's open documents are kept)."""
    row = {column.key: getattr(answer, column.key) for column in Answer.__table__.columns}
    if lacks_boxes(row["segments"]):
        row["segments"] = await with_boxes(session, pages, row["segments"])
    return AnswerOut.of_row(row)
