"""A streamed answer: the upstream's events relayed as they arrive, its citations resolved on
the way, and what arrived stored when the stream ends, however it ends."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any

import anyio

from app.answers.answer import AnswerOut
from app.answers.context import AnswerContext
from app.answers.request import Prepared, release
from app.answers.store import Reply, store_answer
from app.answers.streaming import AnswerStream, Event
from app.auth.keys import Principal
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
    retries, the upstream ending first) fails here, as an ordinary error response."""
    stack = AsyncExitStack()
    try:
        await context.limits.check_tokens(principal)
        upstream = await stack.enter_async_context(
            context.upstream.stream_message(prepared.request, headers)
        )
        frames = upstream.frames()
        stack.push_async_callback(frames.aclose)
        answer = AnswerStream(prepared.indexes, prepared.passages, prepared.sent)
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
    except BaseException:
        with anyio.CancelScope(shield=True):
            try:
                await stack.aclose()
            finally:
                await release(context, prepared)
        raise
    return RelayedAnswer(context, principal, prepared, stack, upstream, frames, early, answer)


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
        self.failure: CitegateError | None = None  # why ``frames`` ended early, if it did

    async def close(self, status: str = "cancelled") -> AnswerOut | None:
        """Store what arrived with this status; None when it was closed before."""
        if self._closed:
            return None
        self._closed = True
        answer, prepared = self._answer, self._prepared
        reply = Reply(
            status,
            answer.content(),
            answer.model or prepared.request["model"],
            answer.stop_reason,
            answer.usage,
            answer.message_id,
            self.request_id,
        )
        with anyio.CancelScope(shield=True):
            try:
                try:
                    await self._stack.aclose()
                except Exception:  # what arrived is stored all the same
                    log.exception("closing the upstream stream of answer %s failed", prepared.id)
                return await store_answer(self._context, self._principal, prepared, reply)
            finally:
                await release(self._context, prepared)
        return None  # only when the scope swallowed a cancellation meant for it

    async def events(self) -> AsyncGenerator[Sequence[Relayed], None]:
        """Relay the stream: the events each upstream event makes (a list, one write); end
        with ``answer.done`` (the stored Answer), or ``error`` and a failed answer."""
        prepared, answer = self._prepared, self._answer
        failure: CitegateError | None = None
        started = {
            "id": prepared.id,
            "conversation_id": prepared.conversation_id,
            "model": answer.model or prepared.request["model"],
            "documents": prepared.documents,
        }
        try:
            yield [("answer.started", started)]
            async for frame in self._frames:
                if frame.type == "error":
                    raise self._upstream.error_of(frame)
                if made := answer.feed(frame.event):  # a ping makes none
                    yield made
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
        try:
            stored = await self.close("failed" if failure else "completed")
        except Exception:
            log.exception("streamed answer %s could not be stored", prepared.id)
            stored, failure = None, failure or _broken()
        if failure is not None:
            log.warning("streamed answer %s failed: %s", prepared.id, failure.code)
            yield [("error", problem_of(failure))]
        elif stored is not None:
            yield [("answer.done", stored)]

    async def frames(self) -> AsyncGenerator[tuple[Frame, list[Event]], None]:
        """The upstream's events as it sent them, pings and an error event included, each
        with the Citegate events made of it. The answer is stored when they end: completed;
        failed after an error event, or when the stream broke (``failure`` then says why);
        cancelled when the client went away."""
        answer = self._answer
        failed = False
        try:
            for frame in self._early:
                yield frame, []
            async for frame in self._frames:
                if frame.type == "error":
                    failed = True
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
            await self.close("cancelled")
            raise
        await self.close("failed" if failed or self.failure else "completed")

    def _check_finished(self) -> None:
        if not self._answer.finished:
            raise UpstreamError(
                "The upstream stream ended before the answer did.",
                code=ErrorCode.UPSTREAM_STREAM_INTERRUPTED,
                request_id=self.request_id,
            )


def _broken() -> CitegateError:
    return CitegateError("The answer could not be streamed.", code=ErrorCode.INTERNAL_ERROR)
