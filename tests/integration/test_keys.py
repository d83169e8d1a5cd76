"""API keys in the database: the bootstrap key, ensured by replicas starting together, and
what a process remembers of keys between requests: until the key version moves, or its
clock passes the key's expiry or a rotation's grace."""

from __future__ import annotations

import asyncio
import secrets
import time
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth import keys
from app.db.engine import create_engine, create_session_factory, run_in_session
from app.db.models import DEFAULT_TENANT_ID, ApiKey


def test_replicas_ensuring_the_same_bootstrap_key_make_one(client: Any, database_url: str) -> None:
    key = "cg_" + secrets.token_urlsafe(32)

    async def start_replicas() -> tuple[list[str], int]:
        engine = create_engine(database_url)
        sessions = create_session_factory(engine)

        async def replica() -> str:
            async with sessions() as session:
                return (await keys.ensure_key(session, "default", key)).id

        try:
            ids = list(await asyncio.gather(*(replica() for _ in range(4))))
            async with sessions() as session:
                count = await session.scalar(
                    select(func.count()).where(ApiKey.key_hash == keys.hash_key(key))
                )
            return ids, int(count or 0)
        finally:
            await engine.dispose()

    ids, count = asyncio.run(start_replicas())
    assert count == 1
    assert len(set(ids)) == 1


class Remembering:
    """Authentication through one KeyCache, on a clock the test sets, counting the sessions
    it opens (to read a key) and the reads of the key version."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self.now = float(int(time.time()))  # whole seconds: exact in floats and datetimes
        self.cache = keys.KeyCache(clock=lambda: self.now)
        self.sessions_opened = 0
        self.version_reads = 0

    def check(self, key: str | None, times: int = 1) -> keys.Principal | None:
        async def run() -> keys.Principal | None:
            engine = create_engine(self.database_url)
            self.cache.bind(engine)
            sessions = create_session_factory(engine)
            reader = self.cache._version_reader
            assert reader is not None
            read = reader.read

            async def counting() -> int:  # the reader itself reads; this only counts
                self.version_reads += 1
                return await read()

            reader.read = counting  # type: ignore[method-assign]
            read_now = reader.read_now

            def counting_now() -> int | None:  # SQLite's read at once
                value = read_now()
                self.version_reads += value is not None
                return value

            reader.read_now = counting_now  # type: ignore[method-assign]

            def opening() -> AsyncSession:
                self.sessions_opened += 1
                session: AsyncSession = sessions()
                return session

            try:
                answers = await asyncio.gather(
                    *(keys.authenticate(opening, key, self.cache) for _ in range(times))
                )
                assert len(set(answers)) == 1
                return answers[0]
            finally:
                await self.cache.aclose()
                await engine.dispose()

        return asyncio.run(run())

    def make_key(self, key: str | None = None) -> tuple[str, str]:
        row, made = run_in_session(self.database_url, lambda s: keys.create_key(s, "them", key))
        return row.id, made

    def revoke(self, key_id: str) -> None:  # as `citegate keys revoke` does, from outside
        run_in_session(self.database_url, lambda s: keys.revoke_key(s, key_id))

    def change(self, key_id: str, **values: Any) -> None:
        """Change a key's row behind the service's back, bumping the version or not."""
        bump = values.pop("bump", True)

        async def work(session: AsyncSession) -> None:
            await session.execute(update(ApiKey).where(ApiKey.id == key_id).values(**values))
            if bump:
                await keys.bump_version(session)
            await session.commit()

        run_in_session(self.database_url, work)


OPEN = keys.Principal(DEFAULT_TENANT_ID, None)


def test_an_unchanged_key_is_read_once_and_a_revoked_one_refused_at_once(
    client: Any, database_url: str
) -> None:
    auth = Remembering(database_url)
    key_id, key = auth.make_key()
    principal = auth.check(key)
    assert principal is not None and principal.key_id == key_id
    assert principal.scopes == {"read", "write", "admin"}
    for _ in range(3):
        assert auth.check(key) == principal
    assert auth.sessions_opened == 1  # the key was read once; only the version each time
    assert auth.version_reads == 4
    auth.revoke(key_id)  # from another process
    assert auth.check(key) is None
    assert auth.check(key) is None  # and the refusal stands


def test_the_version_is_what_tells_a_change(client: Any, database_url: str) -> None:
    auth = Remembering(database_url)
    key_id, key = auth.make_key()
    assert auth.check(key) is not None
    # A change that does not bump the version is not seen: the version is the signal.
    auth.change(key_id, status="disabled", bump=False)
    assert auth.check(key) is not None
    auth.change(key_id, scopes=["read"])
    assert auth.check(key) is None  # disabled, now that the version moved
    auth.change(key_id, status="active")
    enabled = auth.check(key)
    assert enabled is not None and enabled.scopes == {"read"}


def test_expiry_and_grace_are_kept_by_the_clock(client: Any, database_url: str) -> None:
    auth = Remembering(database_url)
    key_id, key = auth.make_key()
    ends = datetime.fromtimestamp(auth.now + 60, UTC)
    auth.change(key_id, expires_at=ends)
    assert auth.check(key) is not None
    opened = auth.sessions_opened
    auth.now += 59.5
    assert auth.check(key) is not None
    auth.now += 0.5
    assert auth.check(key) is None
    assert auth.sessions_opened == opened  # the clock, not the database, said so
    # A previous secret, as a rotation leaves it: good until its grace ends.
    old = keys.generate_key()
    auth.change(
        key_id,
        expires_at=None,
        previous_hash=keys.hash_key(old),
        previous_until=datetime.fromtimestamp(auth.now + 10, UTC),
    )
    assert auth.check(old) is not None and auth.check(key) is not None
    auth.now += 10
    assert auth.check(old) is None
    assert auth.check(key) is not None


def test_a_refused_key_works_once_made(client: Any, database_url: str) -> None:
    auth = Remembering(database_url)
    key = keys.generate_key()
    assert auth.check(key) is None
    key_id, _ = auth.make_key(key)
    principal = auth.check(key)
    assert principal is not None and principal.key_id == key_id


def test_an_open_service_asks_for_a_key_once_one_exists(client: Any, database_url: str) -> None:
    auth = Remembering(database_url)
    assert auth.check(None) == OPEN
    assert auth.check(None) == OPEN
    assert auth.sessions_opened == 1
    auth.make_key()
    assert auth.check(None) is None


def test_requests_arriving_together_share_reads_of_the_version_from_a_server(
    client: Any, database_url: str
) -> None:
    auth = Remembering(database_url)
    _, key = auth.make_key()
    assert auth.check(key, times=50) is not None
    if database_url.startswith("sqlite"):
        assert auth.version_reads == 50  # each read at once, in microseconds: nothing to share
        return
    # One read under way and the next one, for all who arrived while the first ran.
    assert 1 <= auth.version_reads <= 2
