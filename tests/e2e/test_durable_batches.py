"""Batches that outlive the process: `citegate serve` killed with SIGKILL while the local engine
answers a batch, then started again; on the suite's database (SQLite or PostgreSQL)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.pool import NullPool

from app.db.engine import create_engine
from app.settings import Settings
from tests.conftest import behind, free_port
from tests.e2e.test_batches import (
    FAST,
    all_results,
    count_batch_answers,
    lone_fake,
    store_text,
    wait_ended,
)
from tests.e2e.test_shutdown import CitegateProcess
from tests.fake_upstream import GRASS, FakeUpstream, Reply, message

__all__ = ["lone_fake"]  # a fixture of test_batches.py, used here too

FAST_ENV = {
    "CITEGATE_BATCH_POLL_SECONDS": "0.05",
    "CITEGATE_BATCH_POLL_MAX_SECONDS": "0.2",
    "CITEGATE_BATCH_LEASE_SECONDS": "1",
}


def scalar(database_url: str, query: str, **params: object) -> int:
    async def read() -> int:
        engine = create_engine(database_url, poolclass=NullPool)
        async with engine.connect() as connection:
            value = (await connection.execute(text(query), params)).scalar_one()
        await engine.dispose()
        return int(value)

    return asyncio.run(read())


def serve(tmp_path: Path, database_url: str, **env: str) -> tuple[CitegateProcess, str]:
    port = free_port()
    process = CitegateProcess(
        tmp_path,
        ["serve", "--port", str(port)],
        {"CITEGATE_DATABASE_URL": database_url, **FAST_ENV, **env},
    )
    base_url = f"http://127.0.0.1:{port}"
    process.wait_until_healthy(base_url)
    return process, base_url


def test_a_local_engine_batch_survives_a_kill_and_is_answered_once(
    tmp_path: Path, client: httpx.Client, database_url: str
) -> None:
    count = 1500
    first, base_url = serve(tmp_path, database_url)
    try:
        with httpx.Client(base_url=base_url, timeout=60) as api:
            grass = store_text(api, GRASS, "Colours")
            one = {"question": "What color is the grass?", "document_ids": [grass]}
            requests = [{"custom_id": f"q{n}", **one} for n in range(count)]
            created = api.post("/v1/answer-batches", json={"requests": requests})
            assert created.status_code == 201, created.text
        batch_id = created.json()["id"]
        # Killed while the engine is midway: some results are written, not all.
        deadline = time.monotonic() + 60
        while scalar(database_url, "SELECT count(*) FROM local_engine_results") < 100:
            assert time.monotonic() < deadline, first.output
            time.sleep(0.01)
    finally:
        first.stop()  # SIGKILL
    answered = scalar(database_url, "SELECT count(*) FROM local_engine_results")
    assert 100 <= answered < count, "killed midway"
    assert count_batch_answers(database_url, batch_id) == (0, 0)

    second, base_url = serve(tmp_path, database_url)
    try:
        with httpx.Client(base_url=base_url, timeout=60) as api:
            batch = wait_ended(api, batch_id, timeout=120)
            assert batch["request_counts"]["succeeded"] == count, batch
            results = all_results(api, batch_id)
    finally:
        second.stop()
    assert [r["custom_id"] for r in results] == [f"q{n}" for n in range(count)]
    assert {r["status"] for r in results} == {"succeeded"}
    # Each request answered once by the engine, and stored once as an answer.
    of_batch = (
        "SELECT count(*) FROM local_engine_results WHERE batch_id = "
        "(SELECT upstream_batch_id FROM answer_batches WHERE id = :b)"
    )
    assert scalar(database_url, of_batch, b=batch_id) == count
    assert count_batch_answers(database_url, batch_id) == (count, count)


@pytest.fixture
def faked(settings: Settings, fake: FakeUpstream, client: httpx.Client) -> Iterator[httpx.Client]:
    """Citegate behind the fake upstream, polling fast, with a daily token limit."""
    fake.reset(Reply(200, message([])))
    with (
        behind(settings, fake, **FAST, token_limit_per_day=TOKEN_LIMIT) as app,
        httpx.Client(base_url=app.base_url, timeout=60) as api,
    ):
        yield api


TOKEN_LIMIT = 1500  # an answer of the fake's spends 965 tokens: more than one answer's worth
CREATE = "/v1/messages/batches"


def create(api: httpx.Client, count: int = 2) -> dict[str, Any]:
    grass = store_text(api, GRASS, "Colours")
    one = {"question": "What color is the grass?", "document_ids": [grass]}
    requests = [{"custom_id": f"q{n}", **one} for n in range(count)]
    created = api.post("/v1/answer-batches", json={"requests": requests})
    assert created.status_code == 201, created.text
    body: dict[str, Any] = created.json()
    return body


def creations(fake: FakeUpstream) -> int:
    return sum(1 for r in fake.requests if r.path == CREATE and r.body)


def test_a_500_after_the_upstream_made_the_batch_is_not_retried_and_the_batch_adopted(
    faked: httpx.Client, fake: FakeUpstream, database_url: str
) -> None:
    fake.batch_failures.append((500, True))
    batch = create(faked)
    assert batch["status"] == "validating"  # the upstream's answer is not known
    ended = wait_ended(faked, batch["id"])
    assert ended["request_counts"]["succeeded"] == 2
    assert creations(fake) == 1  # never sent again: the upstream had made it
    assert len(fake.batches) == 1
    assert count_batch_answers(database_url, batch["id"]) == (2, 2)


def test_a_500_before_the_upstream_made_the_batch_is_sent_again_once(
    faked: httpx.Client, fake: FakeUpstream, database_url: str
) -> None:
    fake.batch_failures.append((500, False))
    batch = create(faked)
    assert batch["status"] == "validating"
    ended = wait_ended(faked, batch["id"])
    assert ended["request_counts"]["succeeded"] == 2
    assert creations(fake) == 2
    assert len(fake.batches) == 1
    assert count_batch_answers(database_url, batch["id"]) == (2, 2)


def test_a_refusal_that_made_nothing_is_retried_or_stores_nothing(
    faked: httpx.Client, fake: FakeUpstream
) -> None:
    fake.batch_failures.append((529, False))  # overloaded: retried at once
    batch = create(faked)
    assert batch["status"] == "in_progress"
    assert (creations(fake), len(fake.batches)) == (2, 1)

    fake.batch_failures.append((400, False))  # refused: the batch is not stored
    grass = store_text(faked, GRASS, "Colours")
    requests = [{"custom_id": "a", "question": "Q?", "document_ids": [grass]}]
    refused = faked.post("/v1/answer-batches", json={"requests": requests})
    assert refused.status_code == 422, refused.text
    assert refused.json()["code"] == "upstream_rejected"
    assert [b["id"] for b in faked.get("/v1/answer-batches").json()["data"]] == [batch["id"]]


def test_batch_answers_spend_the_keys_daily_tokens(faked: httpx.Client, fake: FakeUpstream) -> None:
    batch = create(faked)
    assert wait_ended(faked, batch["id"])["request_counts"]["succeeded"] == 2
    # Two answers of 965 tokens: past the day's limit, as two answers asked alone would be.
    grass = store_text(faked, GRASS, "Colours")
    asked = faked.post("/v1/answers", json={"question": "Q?", "document_ids": [grass]})
    assert asked.status_code == 429, asked.text
    assert asked.json()["code"] == "rate_limited"
    requests = [{"custom_id": "a", "question": "Q?", "document_ids": [grass]}]
    again = faked.post("/v1/answer-batches", json={"requests": requests})
    assert again.status_code == 429
    assert not any(r.path == "/v1/messages" for r in fake.requests)


def test_a_process_killed_after_the_upstream_made_its_batch_has_it_adopted_when_started_again(
    tmp_path: Path, lone_fake: FakeUpstream, client: httpx.Client, database_url: str
) -> None:
    env = {"ANTHROPIC_API_KEY": "sk-ant-dummy", "ANTHROPIC_BASE_URL": lone_fake.base_url}
    lone_fake.create_delay = 60  # the batch is made; its id never reaches Citegate
    first, base_url = serve(tmp_path, database_url, **env)
    try:
        with httpx.Client(base_url=base_url, timeout=60) as api:
            grass = store_text(api, GRASS, "Colours")
            one = {"question": "Q?", "document_ids": [grass]}
            requests = [{"custom_id": f"q{n}", **one} for n in range(3)]
            with pytest.raises(httpx.ReadTimeout):
                api.post("/v1/answer-batches", json={"requests": requests}, timeout=3)
        assert len(lone_fake.batches) == 1
    finally:
        first.stop()  # SIGKILL
    [batch_id] = [
        row
        for row in [scalar_text(database_url, "SELECT id FROM answer_batches")]
        if row is not None
    ]
    lone_fake.create_delay = 0
    second, base_url = serve(tmp_path, database_url, **env)
    try:
        with httpx.Client(base_url=base_url, timeout=60) as api:
            batch = wait_ended(api, batch_id, timeout=60)
    finally:
        second.stop()
    assert batch["request_counts"]["succeeded"] == 3
    assert creations(lone_fake) == 1
    assert len(lone_fake.batches) == 1
    assert count_batch_answers(database_url, batch_id) == (3, 3)


def scalar_text(database_url: str, query: str) -> str | None:
    async def read() -> str | None:
        engine = create_engine(database_url, poolclass=NullPool)
        async with engine.connect() as connection:
            value = (await connection.execute(text(query))).scalar_one_or_none()
        await engine.dispose()
        return None if value is None else str(value)

    return asyncio.run(read())
