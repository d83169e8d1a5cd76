"""A streamed answer: the upstream's events relayed as they arrive, its citations resolved on
the way; its row inserted in progress once it has begun, its text saved as it arrives (by
``live``), and what arrived stored when the stream ends, however it ends."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, aclosing
from datetime import datetime
from typing import Any

import anyio

from app.answers import spending
from app.answers.answer import AnswerOut
from app.answers.citations import build_segments
from app.answers.context import AnswerContext
from app.answers.request import Prepared, release
from app.answers.store import Reply, begin_answer, store_answer
from app.answers.streaming import AnswerStream, Event
from app.auth.budgets import NO_RESERVATION
from app.auth.keys import Principal
from app.db.unavailable import database_unavailable
from app.errors import CitegateError, ErrorCode, problem_of
from app.upstream.errors import UpstreamError
from app.upstream.stream import Frame, UpstreamStream

log = logging.getLogger(__name__)

# An event of Citegate's stream: its name and data (``answer.done`` carries the stored Answer).
Relayed = tuple[str, dict[str, Any] | AnswerOut]


async def open_relay(
    context: AnswerContext,
    principal: Principal,
    prepared: Prepared,
    headers: Mapping[str, str] | None = None,
) -> RelayedAnswer:
    """Open the upstream stream of a prepared request and read it up to ``message_start``.
    Everything that can fail before the answer begins (the checks, the upstream's status,
    retries, the upstream ending first) fails here, as an ordinary error response. The caller's
    budgets are reserved here (``spending``) and settled when the stream is stored, however it
    ends; released when it fails before it begins."""
    stack = AsyncExitStack()
    reservation = NO_RESERVATION
    try:
        await context.limits.check_tokens(principal)
        reservation = await spending.reserve(context, principal, prepared.request, prepared.sources)
        upstream = await stack.enter_async_context(
            context.upstream.stream_message(prepared.request, headers)
        )
        frames = upstream.frames()
        stack.push_async_callback(frames.aclose)
        answer = AnswerStream(prepared.indexes, prepared.passages, prepared.sent, prepared.support)
        early: list[Frame] = []
        async for frame in frames:  # up to message_start: the upstream has begun
            if frame.type == "error":
                raise upstream.error_of(frame)
            early.append(frame)
            answer.feed(frame.event)
            if answer.started:
                break
        if not answer.started:
            raise UpstreamError(
                "The upstream API ended the stream before it began.",
                code=ErrorCode.UPSTREAM_BAD_RESPONSE,
                request_id=upstream.request_id,
            )
        relayed = RelayedAnswer(
            context, principal, prepared, stack, upstream, frames, early, answer
        )
        await relayed.begin()
    except BaseException:
        with anyio.CancelScope(shield=True):
            try:
                await stack.aclose()
            finally:
                await spending.release(context, reservation)
                await release(context, prepared)
        raise
    relayed.reservation = reservation
    return relayed


class RelayedAnswer:
    """A streamed answer on its way: its events, and ``close``, which stores what arrived.

    ``begin`` inserts its row in progress; from then on ``context.live`` saves what arrived
    (``changes``, ``partial``). ``events`` relays it as Citegate's events; ``frames`` as the
    upstream sent it (the Anthropic-compatible API). ``close`` runs once, shielded from
    cancellation: it closes the upstream response (which stops the upstream at once), finishes
    the answer's row and frees the conversation. The relay calls it when it ends; the response
    calls it again afterwards, for a stream that was never read.
    """

    def __init__(
        self,
        context: AnswerContext,
        principal: Principal,
        prepared: Prepared,
        stack: AsyncExitStack,
        upstream: UpstreamStream,
        frames: AsyncIterator[Frame],
        early: list[Frame],
        answer: AnswerStream,
    ) -> None:
        self._context = context
        self._principal = principal
        self._prepared = prepared
        self._stack = stack
        self._upstream = upstream
        self._frames = frames
        self._early = early  # read (and fed to ``answer``) before the relay began
        self._answer = answer
        self.request_id = upstream.request_id  # the upstream's
        self._closed = False
        self.failure: CitegateError | None = None  # why the answer failed, if it did
        self.stored: AnswerOut | None = None  # the stored Answer, once ``frames`` has ended
        self._begun: datetime | None = None  # when its row was inserted
        self.reservation = NO_RESERVATION  # of the caller's budgets, settled by ``close``

    async def begin(self) -> None:
        """Insert the answer's row, in progress, and have its text saved as it arrives."""
        reply = self._reply("in_progress")
        context = self._context
        self._begun = await begin_answer(context, self._principal, self._prepared, reply)
        context.live.add(self._prepared.id, self)

    @property
    def changes(self) -> int:
        return self._answer.changes

    def partial(self) -> dict[str, Any]:
        """The text and segments that arrived so far, as the row keeps them."""
        prepared = self._prepared
        text, segments = build_segments(
            self._answer.content(), prepared.indexes, prepared.passages, prepared.sent
        )
        return {"text": text, "segments": segments}

    def _reply(self, status: str) -> Reply:
        answer, prepared = self._answer, self._prepared
        return Reply(
            status,
            answer.content(),
            answer.model or prepared.request["model"],
            answer.stop_reason,
            answer.usage,
            answer.message_id,
            self.request_id,
        )

    async def close(self, status: str = "cancelled") -> AnswerOut | None:
        """Store what arrived with this status; None when it was closed before."""
        if self._closed:
            return None
        self._closed = True
        context, prepared = self._context, self._prepared
        context.live.discard(prepared.id)
        reply = self._reply(status)
        with anyio.CancelScope(shield=True):
            try:
                try:
                    await self._stack.aclose()
                except Exception:  # what arrived is stored all the same
                    log.exception("closing the upstream stream of answer %s failed", prepared.id)
                # What arrived is what it cost, as the stored answer's usage says.
                await spending.settle(context, self.reservation, reply.model, reply.usage)
                try:
                    return await store_answer(
                        context, self._principal, prepared, reply, begun=self._begun
                    )
                except Exception:
                    # Left in progress, it would stay so while this process lives.
                    context.live.abandon(prepared.id, self)
                    raise
            finally:
                await release(context, prepared)
        return None  # only when the scope swallowed a cancellation meant for it

    async def events(self) -> AsyncGenerator[Sequence[Relayed], None]:
        """Relay the stream as Citegate's events: those each upstream event makes (a list, one
        write); end with ``answer.done`` (the stored Answer), or ``error`` and a failed
        answer."""
        prepared, answer = self._prepared, self._answer
        started = {
            "id": prepared.id,
            "conversation_id": prepared.conversation_id,
            "model": answer.model or prepared.request["model"],
            "documents": prepared.documents,
        }
        yield [("answer.started", started)]
        async with aclosing(self.frames()) as frames:
            async for _, made in frames:
                if made:  # a ping, and what came before the answer began, make none
                    yield made
        if self.failure is not None:
            log.warning("streamed answer %s failed: %s", prepared.id, self.failure.code)
            yield [("error", problem_of(self.failure))]
        elif self.stored is not None:
            yield [("answer.done", self.stored)]

    async def frames(self) -> AsyncGenerator[tuple[Frame, list[Event]], None]:
        """The upstream's events as it sent them, pings and an error event included, each
        with the Citegate events made of it. When they end the answer is stored (``stored``):
        completed; failed after an error event or when the stream broke, or when it could not
        be stored (``failure`` then says why); cancelled when the client went away."""
        answer = self._answer
        try:
            for frame in self._early:
                yield frame, []
            async for frame in self._frames:
                if frame.type == "error":
                    self.failure = self._upstream.error_of(frame)
                    yield frame, []
                    break
                yield frame, answer.feed(frame.event)
            else:
                self._check_finished()
        except UpstreamError as exc:
            self.failure = exc
        except Exception:
            log.exception("streamed answer %s broke", self._prepared.id)
            self.failure = _broken()
        except BaseException:
            # The client went away (cancelled) or stopped reading: keep what arrived.
            await self.close("cancelled")
            raise
        try:
            self.stored = await self.close("failed" if self.failure else "completed")
        except Exception as exc:
            unavailable = database_unavailable(exc)
            if unavailable is None:
                log.exception("streamed answer %s could not be stored", self._prepared.id)
            self.failure = self.failure or unavailable or _broken()

    def _check_finished(self) -> None:
        if not self._answer.finished:
            raise UpstreamError(
                "The upstream stream ended before the answer did.",
                code=ErrorCode.UPSTREAM_STREAM_INTERRUPTED,
                request_id=self.request_id,
            )


def _broken() -> CitegateError:
    return CitegateError("The answer could not be streamed.", code=ErrorCode.INTERNAL_ERROR)
