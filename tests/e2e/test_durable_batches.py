"""Batches that outlive the process: `citegate serve` killed with SIGKILL while the local engine
answers a batch, then started again; on the suite's database (SQLite or PostgreSQL)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
from sqlalchemy import text
from sqlalchemy.pool import NullPool

from app.db.engine import create_engine
from tests.conftest import free_port
from tests.e2e.test_batches import all_results, count_batch_answers, store_text, wait_ended
from tests.e2e.test_shutdown import CitegateProcess
from tests.fake_upstream import GRASS

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
