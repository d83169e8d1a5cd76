"""API keys in the database: the bootstrap key, ensured by replicas starting together."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from sqlalchemy import func, select

from app.auth import keys
from app.db.engine import create_engine, create_session_factory
from app.db.models import ApiKey


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
