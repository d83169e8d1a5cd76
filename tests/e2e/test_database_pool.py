"""A worker's PostgreSQL connections stay within CITEGATE_DATABASE_POOL_SIZE and
CITEGATE_DATABASE_MAX_OVERFLOW however many answers run at once: requests wait their turn for
a connection; none fails and none opens more."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from sqlalchemy import event

from app.main import create_app
from app.settings import Settings
from tests.conftest import Served


def test_many_answers_at_once_share_a_pool_of_two(
    client: httpx.Client, settings: Settings, database_url: str
) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("the pool settings are PostgreSQL's: on SQLite a worker has one connection")
    app = create_app(
        settings.model_copy(update={"database_pool_size": 2, "database_max_overflow": 0})
    )
    opened: list[Any] = []

    async def ask_at_once(base_url: str) -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
            stored = await http.post(
                "/v1/documents",
                json={"source": {"type": "text", "data": "The grass is green. The sky is blue."}},
            )
            ask = {"question": "What colour is the grass?", "document_ids": [stored.json()["id"]]}
            return await asyncio.gather(*(http.post("/v1/answers", json=ask) for _ in range(12)))

    with Served(app) as served:
        pool = app.state.engine.sync_engine.pool
        before = pool.checkedin() + pool.checkedout()
        event.listen(pool, "connect", lambda *_: opened.append(1))
        responses = asyncio.run(ask_at_once(served.base_url))
        after = pool.checkedin() + pool.checkedout()
    assert [r.status_code for r in responses] == [200] * 12
    for response in responses:
        citations = [c for s in response.json()["segments"] for c in s["citations"]]
        assert citations and all(c["verified"] for c in citations)
    assert before + len(opened) <= 2 and after <= 2
