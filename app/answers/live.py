"""The streams a process is relaying, kept in their rows while they last, and the streams of a
process that died marked ``interrupted``.

A stream's row is inserted ``in_progress`` when it begins, naming this process as its owner,
and finished by the relay when it ends. In between, ``LiveAnswers`` saves the text that
arrived: at most once every ``SAVE_SECONDS`` per stream, and never in a stream's first
``SAVE_SECONDS``, so a stream that ends sooner (the common one) costs its insert and its final
update and no more. Each save is one statement for every stream that is due, and only a row
still ``in_progress`` takes it: a save that reaches the database after the stream's final
update changes nothing.

Which rows in progress belong to a dead process cannot be told from the rows alone: several
processes (workers, replicas) share one database, each with its own streams. So each process
has a row of its own in ``service_processes``, which it touches every third of
``CITEGATE_STREAM_LEASE_SECONDS`` and deletes when it stops. At its start and at each touch, a
process marks ``interrupted`` the rows in progress whose owner was not seen within the lease
(or has no row: it stopped, or was forgotten), and frees their conversations. A process killed
outright has its streams marked once the lease runs out, by whichever process runs then (the
restarted one too); one that stops cleanly deletes its row, and what it left in progress is
marked at once. A live process is never taken for dead unless it cannot reach the database (or
its event loop stalls) for longer than the lease; the final update of each of its streams then
sets its true status all the same.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol, cast

from sqlalchemy import Table, bindparam, delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.conversations import service as conversations
from app.db.models import Answer, ServiceProcess, utcnow
from app.ids import new_id
from app.settings import Settings

log = logging.getLogger(__name__)

SAVE_SECONDS = 1.0
"""How often at most a stream's text is saved, and how old it is when first saved."""

_ANSWERS = cast(Table, Answer.__table__)
# A stream's progress: the text and segments that arrived, only while it is in progress.
_SAVE = (
    update(_ANSWERS)
    .where(_ANSWERS.c.id == bindparam("key_id"), _ANSWERS.c.status == "in_progress")
    .values(text=bindparam("text"), segments=bindparam("segments"))
)
# A stream whose final update failed, once the database answers again.
_ABANDON = _SAVE.values(status="interrupted")


class Progress(Protocol):
    """A stream being relayed, as its saves see it."""

    @property
    def changes(self) -> int:
        """How many times what arrived has grown."""

    def partial(self) -> dict[str, Any]:
        """What arrived so far: the row's ``text`` and ``segments``."""


@dataclass(slots=True)
class _Live:
    stream: Progress
    saved_at: float  # time.monotonic() of the insert or the last save
    saved: int = 0  # its ``changes`` as last saved
    abandoned: bool = False  # its final update failed: to be marked interrupted


class LiveAnswers:
    """This process's streams in progress (``owner`` names it in their rows), and the task
    that saves them and watches for the streams of dead processes (``run``)."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], settings: Settings) -> None:
        self.owner = new_id("proc")
        self._sessions = sessions
        self._lease = timedelta(seconds=settings.stream_lease_seconds)
        self._beat = settings.stream_lease_seconds / 3
        self._hold = conversations.claim_hold(settings)
        self._streams: dict[str, _Live] = {}

    def add(self, answer_id: str, stream: Progress) -> None:
        """A stream whose row was just inserted, in progress."""
        self._streams[answer_id] = _Live(stream, time.monotonic())

    def discard(self, answer_id: str) -> None:
        """A stream about to be finished: no more saves."""
        self._streams.pop(answer_id, None)

    def abandon(self, answer_id: str, stream: Progress) -> None:
        """A stream whose final update failed (the database out of reach): its row is marked
        interrupted, with what arrived, as soon as the database takes it."""
        self._streams[answer_id] = _Live(stream, 0.0, -1, abandoned=True)

    async def start(self) -> None:
        """Say this process is alive, then mark the streams of dead ones interrupted."""
        await self._touch()
        await self.sweep()

    async def stop(self) -> None:
        """This process stops: what it leaves in progress is for the next sweep to mark."""
        async with self._sessions() as session:
            await session.execute(delete(ServiceProcess).where(ServiceProcess.id == self.owner))
            await session.commit()

    async def run(self) -> None:
        """Save the streams that are due each second; say this process is alive and sweep
        every third of the lease. A failure (the database away) is logged, and tried again."""
        tick = min(SAVE_SECONDS, self._beat)
        next_beat = time.monotonic() + self._beat
        while True:
            await asyncio.sleep(tick)
            try:
                await self.save_due()
            except Exception as error:
                log.warning("the text of streams in progress was not saved: %r", error)
            if time.monotonic() < next_beat:
                continue
            next_beat = time.monotonic() + self._beat
            try:
                await self._touch()
                await self.sweep()
            except Exception as error:
                log.warning("this process could not say it is alive: %r", error)

    async def save_due(self) -> None:
        """Save the text of every stream that grew and was not saved for ``SAVE_SECONDS``."""
        now = time.monotonic()
        due = [
            (answer_id, live)
            for answer_id, live in self._streams.items()
            if live.stream.changes != live.saved and now - live.saved_at >= SAVE_SECONDS
        ]
        if not due:
            return
        saves: list[dict[str, Any]] = []
        abandoned: list[dict[str, Any]] = []
        marks: list[tuple[_Live, int]] = []
        for answer_id, live in due:
            marks.append((live, live.stream.changes))
            row = {"key_id": answer_id, **live.stream.partial()}
            (abandoned if live.abandoned else saves).append(row)
        async with self._sessions() as session:
            for statement, rows in ((_SAVE, saves), (_ABANDON, abandoned)):
                if rows:
                    await session.execute(statement, rows)
            await session.commit()
        for live, changes in marks:  # saved: else tried again at the next tick
            live.saved, live.saved_at = changes, now
        for row in abandoned:
            self._streams.pop(row["key_id"], None)

    async def sweep(self) -> int:
        """Mark interrupted every stream in progress whose owner was not seen within the lease,
        and free their conversations; forget the processes not seen. How many were marked."""
        cutoff = utcnow() - self._lease
        alive = select(ServiceProcess.id).where(ServiceProcess.seen_at >= cutoff)
        async with self._sessions() as session:
            marked = (
                await session.execute(
                    update(_ANSWERS)
                    .where(
                        _ANSWERS.c.status == "in_progress",
                        or_(
                            _ANSWERS.c.stream_owner.is_(None),
                            _ANSWERS.c.stream_owner.not_in(alive),
                        ),
                    )
                    .values(status="interrupted")
                    .returning(_ANSWERS.c.id, _ANSWERS.c.conversation_id, _ANSWERS.c.created_at)
                )
            ).all()
            for answer_id, conversation_id, begun in marked:
                log.warning("answer %s was cut off by its process's end: interrupted", answer_id)
                if conversation_id is not None:
                    await conversations.free_after_interrupted(
                        session, conversation_id, begun, self._hold
                    )
            await session.execute(delete(ServiceProcess).where(ServiceProcess.seen_at < cutoff))
            await session.commit()
        return len(marked)

    async def _touch(self) -> None:
        now = utcnow()
        async with self._sessions() as session:
            seen = await session.execute(
                update(ServiceProcess).where(ServiceProcess.id == self.owner).values(seen_at=now)
            )
            if seen.rowcount != 1:  # type: ignore[attr-defined]  # new, or forgotten
                session.add(ServiceProcess(id=self.owner, started_at=now, seen_at=now))
            await session.commit()
