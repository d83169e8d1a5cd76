"""A worker's PostgreSQL connections stay within CITEGATE_DATABASE_POOL_SIZE and
CITEGATE_DATABASE_MAX_OVERFLOW however many answers run at once: requests wait their turn for
a connection; none fails and none opens more. Each goes back to the pool, and one the server
closed while it sat there is replaced before it is used."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from sqlalchemy import event, text
from sqlalchemy.pool import NullPool

from app.auth.keys import VERSION_READER
from app.db.engine import create_engine
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
    response, not before it: a dependency's end may run once the response is sent.) The
    answer routes open their session themselves, not through a dependency: refused after a
    query (an unknown document), streamed, or asked through the Anthropic-compatible API, they
    give it back too."""
    # Keys and documents trusted for 5 s, as by default (the tests' settings ask every time):
    # the answers after the first open a session that never begins a transaction.
    app = create_app(settings.model_copy(update={"recheck_seconds": 5}))

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
            unknown = await http.post("/v1/answers", json={**ask, "document_ids": ["doc_missing"]})
            seen.append((unknown.status_code, await checked_out()))
            streamed = await http.post("/v1/answers", json={**ask, "stream": True})
            assert "event: answer.done" in streamed.text
            seen.append((streamed.status_code, await checked_out()))
            block = {"type": "document", "source": {"type": "file", "file_id": "doc_missing"}}
            message = {
                "model": "claude-sonnet-4-5",
                "max_tokens": 100,
                "messages": [{"role": "user", "content": [block, {"type": "text", "text": "?"}]}],
            }
            compatible = await http.post("/anthropic/v1/messages", json=message)
            seen.append((compatible.status_code, await checked_out()))
            missing = await http.get("/v1/documents/doc_missing")
            seen.append((missing.status_code, await checked_out()))
            listed = await http.get("/v1/documents")
            seen.append((listed.status_code, await checked_out()))
        return seen

    with Served(app) as served:
        seen = asyncio.run(requests(served.base_url))
    assert seen == [
        (201, 0),
        (200, 0),
        (200, 0),
        (200, 0),
        (200, 0),
        (404, 0),
        (200, 0),
        (404, 0),
        (404, 0),
        (200, 0),
    ]


def test_a_connection_the_server_closed_is_replaced_before_it_is_used(
    settings: Settings, database_url: str
) -> None:
    """The server drops the pool's connection (a restart, an idle timeout, an administrator):
    the next request, once the connection has been idle past the ping window, still works."""
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite has no server to close a connection")
    app = create_app(settings.model_copy(update={"database_ping_after_idle_seconds": 0.1}))
    admin = create_engine(database_url, poolclass=NullPool)

    async def sql(statement: str, **values: Any) -> Any:
        async with admin.connect() as connection:
            return (await connection.execute(text(statement), values)).scalar()

    async def listed(http: httpx.AsyncClient) -> int:
        return (await http.get("/v1/documents")).status_code

    async def requests(base_url: str, since: Any) -> list[int]:
        async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
            seen = [await listed(http)]  # the pool's connection, made since ``since``
            # Every connection to this database opened since then: the app's, none other's.
            closed = await sql(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                " AND backend_start >= :since",
                since=since,
            )
            seen.append(closed)
            await asyncio.sleep(0.3)  # idle past the window
            seen += [await listed(http), await listed(http)]
        return seen

    since = asyncio.run(sql("SELECT now()"))
    with Served(app) as served:
        seen = asyncio.run(requests(served.base_url, since))
    asyncio.run(admin.dispose())
    assert seen[0] == 200 and seen[1] >= 1  # a connection was there, and was closed
    assert seen[2:] == [200, 200]


def test_answers_one_at_a_time_reuse_the_connection_used_last(
    settings: Settings, database_url: str
) -> None:
    """After a burst has opened several connections, answers asked one at a time all go to
    the connection given back last (the pool is last in, first out), so at a low rate it
    never sits idle past the ping window; rotating through the pool left every connection
    idle that long, each pinged (three round trips) before its next use."""
    if not database_url.startswith("postgresql"):
        pytest.skip("the pool is PostgreSQL's: on SQLite a worker has one connection")
    # No work in the background takes a connection while the answers run (the batch pollers,
    # the streams' heartbeat): only the answers use the pool here.
    quiet = {"batch_poller": False, "batch_poll_seconds": 3600.0, "stream_lease_seconds": 3600.0}
    app = create_app(
        settings.model_copy(
            update={"database_pool_size": 3, "database_ping_after_idle_seconds": 0.3, **quiet}
        )
    )
    admin = create_engine(database_url, poolclass=NullPool)

    async def sql(statement: str, **values: Any) -> Any:
        async with admin.connect() as connection:
            return (await connection.execute(text(statement), values)).scalar()

    # The pool's connections: not the one each process keeps to read the key version.
    app_backends = (
        "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        f" AND backend_start >= :since AND application_name <> '{VERSION_READER}'"
    )

    async def requests(base_url: str, since: Any) -> tuple[int, int, list[int]]:
        async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
            stored = await http.post(
                "/v1/documents",
                json={"source": {"type": "text", "data": "The grass is green. The sky is blue."}},
            )
            ask = {"question": "What colour is the grass?", "document_ids": [stored.json()["id"]]}
            await asyncio.gather(*(http.post("/v1/answers", json=ask) for _ in range(12)))
            await asyncio.sleep(0.5)  # every connection back in the pool, idle
            opened = await sql(f"SELECT count(*) {app_backends}", since=since)
            mark = await sql("SELECT clock_timestamp()")
            statuses = []
            for _ in range(6):
                statuses.append((await http.post("/v1/answers", json=ask)).status_code)
                await asyncio.sleep(
                    0.15
                )  # half the window: one connection in turn would idle past it
            used = await sql(
                f"SELECT count(*) {app_backends} AND state_change >= :mark", since=since, mark=mark
            )
        return opened, used, statuses

    since = asyncio.run(sql("SELECT now()"))
    with Served(app) as served:
        opened, used, statuses = asyncio.run(requests(served.base_url, since))
    asyncio.run(admin.dispose())
    assert statuses == [200] * 6
    assert opened >= 2  # the pool had connections to choose from
    assert used == 1
