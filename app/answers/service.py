"""Asking questions: build the request, call the upstream, resolve citations, store the answer.

One path for a whole answer and one for a stream; both store what arrived through ``_store``
and build segments with ``build_segments``, so the same question gives the same stored answer.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import anyio
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.answers.citations import build_segments
from app.answers.prompt import (
    PromptDocument,
    Turn,
    assistant_blocks,
    build_message_request,
    passage_blocks,
)
from app.answers.schemas import AnswerRequest, Retrieval
from app.answers.streaming import AnswerStream, Event
from app.auth.keys import Principal
from app.auth.limits import KeyLimits
from app.collections.service import collection_document_ids
from app.conversations import service as conversations
from app.db.engine import RowInserter
from app.db.models import Answer, Conversation, utcnow
from app.db.tenancy import get_owned
from app.documents.index import DocumentIndex
from app.documents.pages import PdfPages
from app.documents.pictures import boxes_wanted, lacks_boxes, measure_boxes, with_boxes
from app.documents.sources import (
    DocumentsTooLarge,
    SourceCache,
    SourceDocument,
    describe,
    describe_sources,
    load_sources,
    request_limits,
    sent_blocks,
)
from app.errors import CitegateError, ErrorCode, problem_of
from app.ids import new_id
from app.observability import Metrics
from app.search.service import Passage, search_collection_passages, search_passages
from app.settings import Settings
from app.upstream.client import Frame, UpstreamAnswer, UpstreamClient, UpstreamStream
from app.upstream.errors import UpstreamError
from app.upstream.wire import Message

log = logging.getLogger(__name__)

# A stored answer as its row's values (``answer_values``): what was inserted, read without
# making an ORM ``Answer`` of it.
StoredAnswer = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class AnswerContext:
    """The process-wide parts that answering needs."""

    upstream: UpstreamClient
    sources: SourceCache
    limits: KeyLimits
    settings: Settings
    engine: AsyncEngine
    answers: RowInserter  # stores an answer's row
    sessions: async_sessionmaker[AsyncSession]  # bound to ``engine``
    metrics: Metrics
    pages: PdfPages  # the boxes of PDF spans


@dataclass(frozen=True, slots=True)
class Prepared:
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

    @property
    def documents(self) -> list[dict[str, Any]]:
        return describe_sources(self.sources)

    @property
    def indexes(self) -> list[DocumentIndex | None]:
        """What each citation's ``document_index`` points at."""
        return [None if source is None else source.index for source in self.sources]


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


async def _prepare(
    session: AsyncSession,
    tenant_id: str,
    body: AnswerRequest,
    context: AnswerContext,
    claim: bool,
) -> Prepared:
    """Check everything that can be checked before the upstream is called; build the request.

    A follow-up (``claim``) first takes its conversation, then reads its history, so that no
    other follow-up can add a turn in between; the caller gives it back with ``_release``.
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
        claimed = await conversations.claim(session, conversation, _claim_hold(settings))
    try:
        history: list[Turn] = []
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
    earlier = [passage for turn in history for passage in turn.passages]
    retrieval = {
        "mode": mode,
        "passages": [stored_passage(passage) for passage in [*earlier, *passages]],
        "first_new_passage": len(earlier),
    }
    return Prepared(
        new_id("ans"),
        body.question,
        body.conversation_id,
        sources,
        request,
        retrieval,
        [*earlier, *passages],
        claimed,
        sent_blocks(sources),
    )


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


def stored_passage(passage: Passage) -> dict[str, Any]:
    """A passage as an answer stores it: as the API shows it, and its chunks' lengths, so
    that a follow-up can send it again block for block."""
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


# What an answer stores of each passage beside what the API shows: enough to send it again.
_STORED_ONLY = ("chunk_lengths", "chunk_locators")


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


def _retrieval_out(retrieval: dict[str, Any] | None) -> dict[str, Any]:
    if not retrieval:  # stored before retrieval existed: whole documents
        return {"mode": "documents", "passages": [], "first_new_passage": 0}
    passages = [
        {k: v for k, v in stored.items() if k not in _STORED_ONLY}
        for stored in retrieval["passages"]
    ]
    return {**retrieval, "passages": passages}


def _claim_hold(settings: Settings) -> timedelta:
    """How long a claim lasts if its process dies: longer than any answer can take (every
    attempt timing out, plus the retry budget), and at least 15 minutes for long streams."""
    longest = (
        settings.upstream_read_timeout * settings.upstream_max_attempts
        + settings.upstream_max_retry_seconds
        + 60
    )
    return timedelta(seconds=max(longest, 900))


async def _release(context: AnswerContext, prepared: Prepared) -> None:
    """Give the conversation back, shielded: a cancelled request must not keep it busy."""
    if prepared.conversation_id is not None and prepared.claim is not None:
        with anyio.CancelScope(shield=True):
            await conversations.release(context.sessions, prepared.conversation_id, prepared.claim)


async def prepare(
    session: AsyncSession, tenant_id: str, body: AnswerRequest, context: AnswerContext
) -> Prepared:
    """What ``create_answer`` checks and builds before it calls the upstream, for a question
    that is not a follow-up (there is no conversation to claim): each question of a batch."""
    return await _prepare(session, tenant_id, body, context, claim=False)


async def count_tokens(
    session: AsyncSession, principal: Principal, body: AnswerRequest, context: AnswerContext
) -> int:
    """What the question would cost in input tokens, as the upstream counts them."""
    prepared = await _prepare(session, principal.tenant_id, body, context, claim=False)
    request = {k: v for k, v in prepared.request.items() if k != "max_tokens"}
    return await context.upstream.count_tokens(request)


async def create_answer(
    session: AsyncSession, principal: Principal, body: AnswerRequest, context: AnswerContext
) -> StoredAnswer:
    """Ask the upstream, resolve every citation to a stored span, store the answer."""
    prepared = await _prepare(session, principal.tenant_id, body, context, claim=True)
    try:
        answer, _ = await answer_prepared(context, principal, prepared)
        return answer
    finally:
        await _release(context, prepared)


async def answer_prepared(
    context: AnswerContext,
    principal: Principal,
    prepared: Prepared,
    headers: Mapping[str, str] | None = None,
) -> tuple[StoredAnswer, UpstreamAnswer]:
    """Send a prepared request (with these extra upstream headers), store the answer; the
    stored answer's row and the upstream's reply."""
    await context.limits.check_tokens(principal)
    reply = await context.upstream.create_message(prepared.request, headers)
    message = reply.message
    usage = usage_of(message)
    content = [block.model_dump(exclude_none=True) for block in message.content]
    answer = await _store(
        context,
        principal,
        prepared,
        status="completed",
        content=content,
        model=message.model,
        stop_reason=message.stop_reason,
        usage=usage,
        message_id=message.id,
        request_id=reply.request_id,
    )
    return answer, reply


async def open_stream(
    session: AsyncSession, principal: Principal, body: AnswerRequest, context: AnswerContext
) -> RelayedAnswer:
    """Start a streamed answer. Everything that can fail before the first event (the checks,
    the upstream's HTTP status, retries) fails here, as an ordinary error response."""
    prepared = await _prepare(session, principal.tenant_id, body, context, claim=True)
    return await open_relay(context, principal, prepared)


async def open_relay(
    context: AnswerContext,
    principal: Principal,
    prepared: Prepared,
    headers: Mapping[str, str] | None = None,
) -> RelayedAnswer:
    """Open the upstream stream of a prepared request and read it up to ``message_start``;
    an error before that (or the upstream ending first) is raised here."""
    stack = AsyncExitStack()
    try:
        await context.limits.check_tokens(principal)
        upstream = await stack.enter_async_context(
            context.upstream.stream_message(prepared.request, headers)
        )
        batches = upstream.batches()
        answer = AnswerStream(prepared.indexes, prepared.passages, prepared.sent)
        early: list[Frame] = []
        unfed: list[Frame] = []
        async for batch in batches:  # up to message_start: the upstream has begun
            for position, frame in enumerate(batch):
                if frame.type == "error":
                    raise upstream.error_of(frame)
                early.append(frame)
                answer.feed(frame.event)
                if answer.started:
                    unfed = batch[position + 1 :]
                    break
            if answer.started:
                break
        if not answer.started:
            raise UpstreamError(
                "The upstream API ended the stream before it began.",
                code=ErrorCode.UPSTREAM_BAD_RESPONSE,
                request_id=upstream.request_id,
            )
    except BaseException:
        with anyio.CancelScope(shield=True):
            await stack.aclose()
            await _release(context, prepared)
        raise
    return RelayedAnswer(
        context, principal, prepared, stack, upstream, batches, early, unfed, answer
    )


class RelayedAnswer:
    """A streamed answer on its way: its events, and ``close``, which stores what arrived.

    ``events`` relays it as Citegate's events; ``frames`` as the upstream sent it (the
    Anthropic-compatible API). ``close`` runs once, shielded from cancellation: it closes the
    upstream response (which stops the upstream at once), stores the answer and frees the
    conversation. The relay calls it when it ends; the response calls it again afterwards, for
    a stream that was never read.
    """

    def __init__(
        self,
        context: AnswerContext,
        principal: Principal,
        prepared: Prepared,
        stack: AsyncExitStack,
        upstream: UpstreamStream,
        batches: AsyncIterator[list[Frame]],
        early: list[Frame],
        unfed: list[Frame],
        answer: AnswerStream,
    ) -> None:
        self._context = context
        self._principal = principal
        self._prepared = prepared
        self._stack = stack
        self._upstream = upstream
        self._batches = batches
        self._early = early  # read (and fed to ``answer``) before the relay began
        self._unfed = unfed  # read with them, after message_start
        self._answer = answer
        self._request_id = upstream.request_id
        self._closed = False
        self.failure: CitegateError | None = None  # why ``frames`` ended early, if it did

    @property
    def request_id(self) -> str | None:
        """The upstream's request id."""
        return self._request_id

    async def close(self, status: str = "cancelled") -> StoredAnswer | None:
        """Store what arrived with this status (its row); None when it was closed before."""
        if self._closed:
            return None
        self._closed = True
        answer = self._answer
        with anyio.CancelScope(shield=True):
            try:
                await self._stack.aclose()
                return await _store(
                    self._context,
                    self._principal,
                    self._prepared,
                    status=status,
                    content=answer.content(),
                    model=answer.model or self._prepared.request["model"],
                    stop_reason=answer.stop_reason,
                    usage=answer.usage,
                    message_id=answer.message_id,
                    request_id=self._request_id,
                )
            finally:
                await _release(self._context, self._prepared)
        return None  # only when the scope swallowed a cancellation meant for it

    def _feed(self, frames: list[Frame], made: list[Event]) -> None:
        """Feed the frames to the answer, adding the events they make to ``made``; an error
        frame raises, after the events of those before it."""
        for frame in frames:
            if frame.type == "error":
                raise self._upstream.error_of(frame)
            made += self._answer.feed(frame.event)  # a ping makes none

    async def events(self) -> AsyncIterator[list[Event]]:
        """Relay the stream, a list of events for each read of the upstream (relayed, each
        list is one write); end with ``answer.done``, or ``error`` and a failed answer."""
        prepared, answer = self._prepared, self._answer
        failure: CitegateError | None = None
        started = {
            "id": prepared.id,
            "conversation_id": prepared.conversation_id,
            "model": answer.model or prepared.request["model"],
            "documents": prepared.documents,
        }
        made: list[Event] = [("answer.started", started)]
        try:
            self._feed(self._unfed, made)
            yield made
            made = []
            async for batch in self._batches:
                self._feed(batch, made)
                if made:
                    yield made
                    made = []
            self._check_finished()
        except UpstreamError as exc:
            failure = exc
        except Exception:
            log.exception("streamed answer %s broke", prepared.id)
            failure = _broken()
        except BaseException:
            # The client went away (cancelled) or stopped reading: keep what arrived.
            await self.close("cancelled")
            raise
        stored = await self.close("failed" if failure else "completed")
        if failure is not None:
            log.warning("streamed answer %s failed: %s", prepared.id, failure.code)
            made.append(("error", problem_of(failure)))
        elif stored is not None:
            made.append(("answer.done", answer_payload(stored)))
        if made:
            yield made

    async def frames(self) -> AsyncGenerator[list[tuple[Frame, list[Event]]], None]:
        """The upstream's events as it sent them, pings and an error event included, each
        with the Citegate events made of it, a list for each read of the upstream. The answer
        is stored when they end: completed; failed after an error event, or when the stream
        broke (``failure`` then says why); cancelled when the client went away."""
        answer = self._answer
        failed = False
        relayed: list[tuple[Frame, list[Event]]] = [(frame, []) for frame in self._early]
        try:
            batch: list[Frame] | None = self._unfed
            while batch is not None:
                for frame in batch:
                    if frame.type == "error":
                        failed = True
                        relayed.append((frame, []))
                        break
                    relayed.append((frame, answer.feed(frame.event)))
                if relayed:
                    yield relayed
                    relayed = []
                if failed:
                    break
                batch = await anext(self._batches, None)
            else:
                self._check_finished()
        except UpstreamError as exc:
            self.failure = exc
        except Exception:
            log.exception("streamed answer %s broke", self._prepared.id)
            self.failure = _broken()
        except BaseException:
            await self.close("cancelled")
            raise
        await self.close("failed" if failed or self.failure else "completed")

    def _check_finished(self) -> None:
        if not self._answer.finished:
            raise UpstreamError(
                "The upstream stream ended before the answer did.",
                code=ErrorCode.UPSTREAM_STREAM_INTERRUPTED,
                request_id=self._request_id,
            )


def _broken() -> CitegateError:
    return CitegateError("The answer could not be streamed.", code=ErrorCode.INTERNAL_ERROR)


async def _store(
    context: AnswerContext,
    principal: Principal,
    prepared: Prepared,
    *,
    status: str,
    content: list[dict[str, Any]],
    model: str,
    stop_reason: str | None,
    usage: dict[str, int],
    message_id: str | None,
    request_id: str | None,
) -> StoredAnswer:
    await context.limits.spend_tokens(principal, sum(usage.values()))
    values = answer_values(
        prepared,
        principal.tenant_id,
        status=status,
        content=content,
        model=model,
        stop_reason=stop_reason,
        usage=usage,
        message_id=message_id,
        request_id=request_id,
    )
    # The segments were made just now: their spans get boxes in place, and a database session
    # only when some of them are in PDFs.
    if wanted := boxes_wanted(values["segments"]):
        async with context.sessions() as session:
            await measure_boxes(session, context.pages, wanted)
    # Not the ORM's unit of work, nor Core's execution: each costs more than the insert itself.
    await context.answers.insert(values)
    count_stored(context.metrics, values)
    return values  # an ORM Answer made of them cost 43 us, for nothing read but its fields


def answer_values(
    prepared: Prepared,
    tenant_id: str,
    *,
    status: str,
    content: list[dict[str, Any]],
    model: str,
    stop_reason: str | None,
    usage: dict[str, int],
    message_id: str | None,
    request_id: str | None,
    batch_id: str | None = None,
    documents: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The row of an answer to ``prepared`` from the upstream's content blocks, every citation
    resolved. Pure: the same for an answer asked alone and for one of a batch (``documents``
    as described when the batch was made)."""
    text, segments = build_segments(content, prepared.indexes, prepared.passages, prepared.sent)
    return {
        "id": prepared.id,
        "tenant_id": tenant_id,
        "conversation_id": prepared.conversation_id,
        "status": status,
        "question": prepared.question,
        "system": system_text(prepared.request.get("system")),
        "model": model,
        "max_tokens": prepared.request["max_tokens"],
        "stop_reason": stop_reason,
        "text": text,
        "segments": segments,
        "documents": prepared.documents if documents is None else documents,
        "retrieval": prepared.retrieval,
        "usage": usage,
        "upstream_message_id": message_id,
        "upstream_request_id": request_id,
        "batch_id": batch_id,
        "created_at": utcnow(),
    }


def usage_of(message: Message) -> dict[str, int]:
    """An upstream message's usage as an answer stores it."""
    return {
        "input_tokens": message.usage.input_tokens,
        "output_tokens": message.usage.output_tokens,
        "cache_creation_input_tokens": message.usage.cache_creation_input_tokens or 0,
        "cache_read_input_tokens": message.usage.cache_read_input_tokens or 0,
    }


def count_stored(metrics: Metrics, values: dict[str, Any]) -> None:
    """Count a stored answer (its row's ``values``) in the metrics."""
    metrics.answers.labels(values["status"]).inc()
    metrics.count_usage(values["usage"])
    if any(
        not citation["verified"] and citation["document_id"] is not None
        for segment in values["segments"]
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


async def answer_out(session: AsyncSession, pages: PdfPages, answer: Answer) -> dict[str, Any]:
    """The Answer as the API shows it, read back: an answer stored before spans had boxes
    gets them here (measured again on each read; PDFium's open documents are kept)."""
    payload = answer_payload({field: getattr(answer, field) for field in _PAYLOAD_FIELDS})
    if lacks_boxes(payload["segments"]):
        payload["segments"] = await with_boxes(session, pages, payload["segments"])
    return payload


# The fields of a stored answer that ``answer_payload`` reads.
_PAYLOAD_FIELDS = (
    "id conversation_id status question model stop_reason text segments documents retrieval "
    "usage upstream_message_id upstream_request_id created_at"
).split()


def answer_payload(answer: StoredAnswer) -> dict[str, Any]:
    """The Answer as the API shows it, from its row (``answer_values``; ``answer_out`` reads
    one back), the same on create, at the end of a stream and on read."""
    return {
        "id": answer["id"],
        "conversation_id": answer["conversation_id"],
        "status": answer["status"],
        "question": answer["question"],
        "model": answer["model"],
        "stop_reason": answer["stop_reason"],
        "text": answer["text"],
        "segments": answer["segments"],
        "documents": answer["documents"],
        "retrieval": _retrieval_out(answer["retrieval"]),
        "usage": answer["usage"],
        "upstream": {
            "message_id": answer["upstream_message_id"],
            "request_id": answer["upstream_request_id"],
        },
        "created_at": answer["created_at"].isoformat().replace("+00:00", "Z"),
    }
