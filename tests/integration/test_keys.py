"""API keys in the database: the bootstrap key, ensured by replicas starting together, and
what a process remembers of keys between requests."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from sqlalchemy import func, select
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
    """Authentication through one KeyCache, on a clock the test sets."""

    def __init__(self, database_url: str, seconds: float) -> None:
        self.database_url = database_url
        self.now = 1000.0
        self.cache = keys.KeyCache(seconds, lambda: self.now)
        self.sessions_opened = 0

    def check(self, key: str | None) -> keys.Principal | None:
        async def run() -> keys.Principal | None:
            engine = create_engine(self.database_url)
            sessions = create_session_factory(engine)

            def opening() -> AsyncSession:
                self.sessions_opened += 1
                session: AsyncSession = sessions()
                return session

            try:
                return await keys.authenticate(opening, key, self.cache)
            finally:
                await engine.dispose()

        return asyncio.run(run())

    def make_key(self, key: str | None = None) -> tuple[str, str]:
        row, made = run_in_session(self.database_url, lambda s: keys.create_key(s, "them", key))
        return row.id, made

    def revoke(self, key_id: str) -> None:  # as `citegate keys revoke` does, from outside
        run_in_session(self.database_url, lambda s: keys.revoke_key(s, key_id))


OPEN = keys.Principal(DEFAULT_TENANT_ID, None)


def test_a_revoked_key_works_until_the_cache_forgets_it(client: Any, database_url: str) -> None:
    auth = Remembering(database_url, seconds=5)
    key_id, key = auth.make_key()
    principal = auth.check(key)
    assert principal is not None and principal.key_id == key_id
    assert auth.sessions_opened == 1
    auth.revoke(key_id)
    auth.now = 1004.9
    assert auth.check(key) == principal
    assert auth.sessions_opened == 1  # remembered: the database was not asked again
    auth.now = 1005.0
    assert auth.check(key) is None
    assert auth.check(key) is None  # and the refusal stands


def test_a_refused_key_is_not_remembered(client: Any, database_url: str) -> None:
    auth = Remembering(database_url, seconds=5)
    key = keys.generate_key()
    assert auth.check(key) is None
    key_id, _ = auth.make_key(key)
    principal = auth.check(key)  # at the same moment
    assert principal is not None and principal.key_id == key_id


def test_an_open_service_asks_for_keys_once_the_cache_forgets(
    client: Any, database_url: str
) -> None:
    auth = Remembering(database_url, seconds=5)
    assert auth.check(None) == OPEN
    auth.make_key()
    auth.now = 1004.9
    assert auth.check(None) == OPEN
    auth.now = 1005.0
    assert auth.check(None) is None


def test_with_no_cache_every_request_asks_the_database(client: Any, database_url: str) -> None:
    auth = Remembering(database_url, seconds=0)
    assert auth.check(None) == OPEN
    key_id, key = auth.make_key()
    assert auth.check(None) is None
    assert auth.check(key) is not None
    auth.revoke(key_id)
    assert auth.check(key) is None
