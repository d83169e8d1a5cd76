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


def test_every_request_gives_its_connection_back(settings: Settings) -> None:
    """Whether its session ran queries, failed, or was never used (an answer whose key and
    documents were cached), each request's connection goes back to the pool. (Soon after its
    response, not before it: a dependency's end may run once the response is sent.)"""
    app = create_app(settings)

    async def requests(base_url: str) -> list[tuple[int, int]]:
        pool = app.state.engine.sync_engine.pool

        async def checked_out() -> int:
            """The connections still out once the pool has had 5 s to get them back."""
            for _ in range(500):
                if pool.checkedout() == 0:
                    break
                await asyncio.sleep(0.01)
            return int(pool.checkedout())

        seen = []
        async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
            stored = await http.post(
                "/v1/documents",
                json={"source": {"type": "text", "data": "Pools hold connections. Few leak."}},
            )
            seen.append((stored.status_code, await checked_out()))
            ask = {"question": "What do pools hold?", "document_ids": [stored.json()["id"]]}
            for _ in range(3):  # the first loads the documents; the others find them cached
                answer = await http.post("/v1/answers", json=ask)
                seen.append((answer.status_code, await checked_out()))
            fetched = await http.get(f"/v1/answers/{answer.json()['id']}")
            seen.append((fetched.status_code, await checked_out()))
            missing = await http.get("/v1/documents/doc_missing")
            seen.append((missing.status_code, await checked_out()))
            listed = await http.get("/v1/documents")
            seen.append((listed.status_code, await checked_out()))
        return seen

    with Served(app) as served:
        seen = asyncio.run(requests(served.base_url))
    assert seen == [(201, 0), (200, 0), (200, 0), (200, 0), (200, 0), (404, 0), (200, 0)]
