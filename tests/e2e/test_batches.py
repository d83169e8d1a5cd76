"""Answer batches end to end: created over HTTP, polled in the background, results stored as
Answers. Against the local engine (whose Message Batches API processes them in the background)
and against the fake upstream, whose batches each test steers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from sqlalchemy import text
from sqlalchemy.pool import NullPool

from app.batches.poller import RESULTS_PER_TRANSACTION
from app.db.engine import create_engine
from app.settings import Settings
from tests.conftest import Served, ServedApp, behind, free_port
from tests.e2e.test_shutdown import CitegateProcess
from tests.fake_upstream import GRASS, GRASS_ANSWER, FakeUpstream, Reply, message
from tests.fixture_files import CORPUS

# The poller looks often and leases briefly, so that a test waits fractions of a second.
FAST = {
    "batch_poller": True,
    "batch_poll_seconds": 0.05,
    "batch_poll_max_seconds": 0.2,
    "batch_lease_seconds": 2.0,
}
# Answer fields that differ between two askings of the same question.
_PER_ASKING = ("id", "created_at", "upstream", "usage")


# Each test serves its own apps: every app polls the batches of the one database, and one whose
# upstream does not know a batch would compete for it with the apps of the test that made it.
@pytest.fixture
def local(settings: Settings, client: httpx.Client) -> Iterator[Served]:
    """Citegate with the local engine, polling fast."""
    with ServedApp(settings.model_copy(update=FAST)) as app:
        yield app


@pytest.fixture
def api(client: httpx.Client, local: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=local.base_url, timeout=60) as http:
        yield http


@pytest.fixture
def faked(settings: Settings, fake: FakeUpstream, client: httpx.Client) -> Iterator[Served]:
    """Citegate behind the fake upstream, polling fast."""
    with behind(settings, fake, **FAST) as app:
        yield app


@pytest.fixture
def fake_api(client: httpx.Client, faked: Served, fake: FakeUpstream) -> Iterator[httpx.Client]:
    fake.reset(Reply(200, message([])))
    with httpx.Client(base_url=faked.base_url, timeout=60) as http:
        yield http


def store_text(api: httpx.Client, data: str, title: str) -> str:
    response = api.post(
        "/v1/documents", json={"source": {"type": "text", "data": data}, "title": title}
    )
    assert response.status_code in (200, 201), response.text
    return str(response.json()["id"])


def wait_ended(api: httpx.Client, batch_id: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        batch: dict[str, Any] = api.get(f"/v1/answer-batches/{batch_id}").json()
        if batch["status"] == "ended":
            return batch
        assert time.monotonic() < deadline, batch
        time.sleep(0.05)


def all_results(api: httpx.Client, batch_id: str, limit: int = 100) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": limit} | ({"cursor": cursor} if cursor else {})
        page = api.get(f"/v1/answer-batches/{batch_id}/results", params=params)
        assert page.status_code == 200, page.text
        results.extend(page.json()["data"])
        cursor = page.json()["next_cursor"]
        if cursor is None:
            return results


def same_answer(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in answer.items() if k not in _PER_ASKING}


def count_batch_answers(database_url: str, batch_id: str) -> tuple[int, int]:
    """The batch's answers, and its distinct answer ids, straight from the database."""

    async def count() -> tuple[int, int]:
        engine = create_engine(database_url, poolclass=NullPool)
        async with engine.connect() as connection:
            row = (
                await connection.execute(
                    text("SELECT count(*), count(DISTINCT id) FROM answers WHERE batch_id = :b"),
                    {"b": batch_id},
                )
            ).one()
        await engine.dispose()
        return int(row[0]), int(row[1])

    return asyncio.run(count())


def test_a_batch_mixing_good_and_bad_requests_answers_as_create_answer_does(
    api: httpx.Client, database_url: str
) -> None:
    grass = store_text(api, GRASS, "Colours")
    sea = store_text(api, "The sea is deep. The sea is salty. Fish swim in it.", "Sea")
    scan = api.post(
        "/v1/documents/upload",
        files={"file": ("scan.pdf", (CORPUS / "imagemagick-images.pdf").read_bytes())},
    ).json()["id"]
    questions: list[dict[str, Any]] = [
        {"custom_id": "grass", "question": "What color is the grass?", "document_ids": [grass]},
        {"custom_id": "unknown", "question": "Q?", "document_ids": [grass, "doc_missing"]},
        {"custom_id": "sea", "question": "Is the sea salty?", "document_ids": [grass, sea]},
        {"custom_id": "scan", "question": "Q?", "document_ids": [scan]},
        {"custom_id": "blank", "question": " ", "document_ids": [grass]},
        {"custom_id": "streamed", "question": "Q?", "document_ids": [grass], "stream": True},
        {"custom_id": "twice", "question": "Q?", "document_ids": [sea, sea]},
        {
            "custom_id": "passages",
            "question": "Do fish swim?",
            "document_ids": [sea],
            "retrieval": {"mode": "passages"},
        },
    ]
    created = api.post("/v1/answer-batches", json={"requests": questions})
    assert created.status_code == 201, created.text
    batch = created.json()
    assert batch["id"].startswith("batch_")
    assert batch["status"] == "in_progress"
    assert batch["request_counts"] == {
        "processing": 3,
        "succeeded": 0,
        "errored": 5,
        "canceled": 0,
        "expired": 0,
    }
    # The refused requests have their results at once, with their problems.
    early = {result["custom_id"]: result for result in all_results(api, batch["id"])}
    assert set(early) == {"unknown", "scan", "blank", "streamed", "twice"}
    codes = {custom_id: result["error"]["code"] for custom_id, result in early.items()}
    assert codes == {
        "unknown": "document_not_found",
        "scan": "document_not_citable",
        "blank": "validation_error",
        "streamed": "validation_error",
        "twice": "duplicate_document_ids",
    }
    assert early["streamed"]["error"]["errors"][0]["loc"] == ["stream"]
    assert all(
        result["status"] == "errored" and result["answer"] is None for result in early.values()
    )

    ended = wait_ended(api, batch["id"])
    assert ended["request_counts"] == {
        "processing": 0,
        "succeeded": 3,
        "errored": 5,
        "canceled": 0,
        "expired": 0,
    }
    assert ended["ended_at"] is not None
    results = all_results(api, batch["id"], limit=3)  # pages, in request order
    assert [result["custom_id"] for result in results] == [q["custom_id"] for q in questions]
    for question, result in zip(questions, results, strict=True):
        if result["status"] != "succeeded":
            continue
        asked = {k: v for k, v in question.items() if k != "custom_id"}
        alone = api.post("/v1/answers", json=asked)
        assert alone.status_code == 200, alone.text
        answer = result["answer"]
        assert answer["status"] == "completed"
        assert same_answer(answer) == same_answer(alone.json())
        assert any(c["verified"] for s in answer["segments"] for c in s["citations"])
        assert api.get(f"/v1/answers/{answer['id']}").json() == answer
    assert count_batch_answers(database_url, batch["id"]) == (3, 3)

    listed = api.get("/v1/answer-batches").json()
    assert [b["id"] for b in listed["data"]] == [batch["id"]]
    assert listed["data"][0] == api.get(f"/v1/answer-batches/{batch['id']}").json()
    metrics = api.get("/metrics").text
    assert 'citegate_answer_batch_results_total{outcome="succeeded"}' in metrics
    assert 'citegate_answer_batches{status="ended"}' in metrics


def test_a_batch_refused_whole(api: httpx.Client) -> None:
    grass = store_text(api, GRASS, "Colours")
    one = {"question": "Q?", "document_ids": [grass]}
    twice = [{"custom_id": "a", **one}, {"custom_id": "a", **one}]
    response = api.post("/v1/answer-batches", json={"requests": twice})
    assert response.status_code == 422
    assert response.json()["code"] == "duplicate_custom_ids"
    for bad in ([], [{"custom_id": "not allowed!", **one}], [one]):
        response = api.post("/v1/answer-batches", json={"requests": bad})
        assert response.status_code == 422
        assert response.json()["code"] == "validation_error"
    assert api.get("/v1/answer-batches").json()["data"] == []
    assert api.get("/v1/answer-batches/batch_missing").json()["code"] == "answer_batch_not_found"


def test_a_batch_of_only_refused_requests_ends_at_once(api: httpx.Client) -> None:
    body = {"requests": [{"custom_id": "x", "question": "Q?", "document_ids": ["doc_none"]}]}
    batch = api.post("/v1/answer-batches", json=body).json()
    assert batch["status"] == "ended"
    assert batch["request_counts"]["errored"] == 1
    [result] = all_results(api, batch["id"])
    assert result["error"]["code"] == "document_not_found"


def test_requests_go_upstream_exactly_as_create_answer_sends_them(
    fake_api: httpx.Client, fake: FakeUpstream, database_url: str
) -> None:
    fake.reset(Reply(200, message(GRASS_ANSWER)))
    grass = store_text(fake_api, GRASS, "Colours")
    asked = {"question": "What color is the grass?", "document_ids": [grass], "max_tokens": 300}
    alone = fake_api.post("/v1/answers", json=asked)
    assert alone.status_code == 200, alone.text
    [sent_alone] = [r.body for r in fake.requests if r.path == "/v1/messages"]

    fake.new_batch = {"polls_before_end": 2}
    created = fake_api.post("/v1/answer-batches", json={"requests": [{"custom_id": "g", **asked}]})
    assert created.status_code == 201, created.text
    batch = wait_ended(fake_api, created.json()["id"])
    [upstream] = fake.batches.values()
    assert upstream.requests == [{"custom_id": "g", "params": sent_alone}]
    # Polled until it ended, then the results read once, from the configured upstream.
    paths = fake.paths()
    assert paths.count(f"/v1/messages/batches/{upstream.id}") == 3
    assert paths.count(f"/v1/messages/batches/{upstream.id}/results") == 1
    [result] = all_results(fake_api, batch["id"])
    assert same_answer(result["answer"]) == same_answer(alone.json())
    assert result["answer"]["upstream"]["message_id"] == "msg_fake0001"
    assert count_batch_answers(database_url, batch["id"]) == (1, 1)


def test_errored_results_upstream_carry_their_problem(
    fake_api: httpx.Client, fake: FakeUpstream
) -> None:
    grass = store_text(fake_api, GRASS, "Colours")

    def result(custom_id: str, params: dict[str, Any]) -> dict[str, Any]:
        if custom_id == "bad":
            error = {"type": "invalid_request_error", "message": "max_tokens: too large"}
            return {"type": "errored", "error": {"type": "error", "error": error}}
        if custom_id == "odd":
            return {"type": "succeeded", "message": {"not": "a message"}}
        return {"type": "expired"}

    fake.batch_result = result
    one = {"question": "Q?", "document_ids": [grass]}
    requests = [{"custom_id": c, **one} for c in ("bad", "odd", "late")]
    created = fake_api.post("/v1/answer-batches", json={"requests": requests}).json()
    batch = wait_ended(fake_api, created["id"])
    assert batch["request_counts"] == {
        "processing": 0,
        "succeeded": 0,
        "errored": 2,
        "canceled": 0,
        "expired": 1,
    }
    bad, odd, late = all_results(fake_api, created["id"])
    assert bad["error"]["code"] == "upstream_rejected"
    assert "max_tokens: too large" in bad["error"]["detail"]
    assert odd["error"]["code"] == "upstream_bad_response"
    assert (late["status"], late["answer"], late["error"]) == ("expired", None, None)


def test_cancel(fake_api: httpx.Client, fake: FakeUpstream) -> None:
    grass = store_text(fake_api, GRASS, "Colours")
    fake.new_batch = {"polls_before_end": 10**6}  # never ends unless canceled
    one = {"question": "Q?", "document_ids": [grass]}
    requests = [{"custom_id": f"q{n}", **one} for n in range(3)]
    created = fake_api.post("/v1/answer-batches", json={"requests": requests}).json()
    [upstream] = fake.batches.values()
    deadline = time.monotonic() + 30
    while f"/v1/messages/batches/{upstream.id}" not in fake.paths():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    upstream.polls_before_end = upstream.polls + 1  # ends at the poll after the cancel
    canceling = fake_api.post(f"/v1/answer-batches/{created['id']}/cancel")
    assert canceling.status_code == 200, canceling.text
    assert canceling.json()["status"] == "canceling"
    assert f"/v1/messages/batches/{upstream.id}/cancel" in fake.paths()
    ended = wait_ended(fake_api, created["id"])
    assert ended["request_counts"]["canceled"] == 3
    assert {r["status"] for r in all_results(fake_api, created["id"])} == {"canceled"}
    again = fake_api.post(f"/v1/answer-batches/{created['id']}/cancel")
    assert again.json()["status"] == "ended"
    assert fake.paths().count(f"/v1/messages/batches/{upstream.id}/cancel") == 1


def test_an_expired_batch(settings: Settings, client: httpx.Client) -> None:
    # The local engine gives its batches no time at all: every request expires unanswered.
    update = FAST | {"local_batch_lifetime_seconds": 0.0}
    with (
        ServedApp(settings.model_copy(update=update)) as app,
        httpx.Client(base_url=app.base_url, timeout=60) as api,
    ):
        grass = store_text(api, GRASS, "Colours")
        one = {"question": "What color is the grass?", "document_ids": [grass]}
        requests = [{"custom_id": f"q{n}", **one} for n in range(4)]
        created = api.post("/v1/answer-batches", json={"requests": requests}).json()
        batch = wait_ended(api, created["id"])
        assert batch["request_counts"]["expired"] == 4
        lifetime = datetime.fromisoformat(batch["expires_at"]) - datetime.fromisoformat(
            batch["created_at"]
        )
        assert abs(lifetime.total_seconds()) < 5  # not the default day
        assert {r["status"] for r in all_results(api, created["id"])} == {"expired"}


def test_a_batch_the_upstream_never_ends_is_given_up_after_it_expires(
    fake_api: httpx.Client, fake: FakeUpstream
) -> None:
    grass = store_text(fake_api, GRASS, "Colours")
    fake.new_batch = {"polls_before_end": 10**6, "expires_at": "2020-01-01T00:00:00Z"}
    one = {"question": "Q?", "document_ids": [grass]}
    requests = [{"custom_id": c, **one} for c in ("a", "b")]
    created = fake_api.post("/v1/answer-batches", json={"requests": requests}).json()
    assert created["expires_at"] == "2020-01-01T00:00:00Z"  # the upstream's
    batch = wait_ended(fake_api, created["id"])
    assert batch["request_counts"]["expired"] == 2
    assert {r["status"] for r in all_results(fake_api, created["id"])} == {"expired"}
    [upstream] = fake.batches.values()
    assert f"/v1/messages/batches/{upstream.id}/results" not in fake.paths()


def test_two_replicas_store_each_result_once(
    settings: Settings, fake: FakeUpstream, client: httpx.Client, database_url: str
) -> None:
    fake.reset(Reply(200, message([])))
    replicas = behind(settings, fake, **FAST), behind(settings, fake, **FAST)
    with (
        replicas[0] as first,
        replicas[1] as second,
        httpx.Client(base_url=first.base_url, timeout=60) as api,
        httpx.Client(base_url=second.base_url, timeout=60) as other,
    ):
        grass = store_text(api, GRASS, "Colours")
        one = {"question": "Q?", "document_ids": [grass]}
        ids = []
        for n in range(3):
            fake.new_batch = {"polls_before_end": n}
            requests = [{"custom_id": f"q{i}", **one} for i in range(50)]
            ids.append(api.post("/v1/answer-batches", json={"requests": requests}).json()["id"])
        for batch_id in ids:  # read through the other replica
            assert wait_ended(other, batch_id)["request_counts"]["succeeded"] == 50
    for batch_id in ids:
        assert count_batch_answers(database_url, batch_id) == (50, 50)
    for upstream_id in fake.batches:
        assert fake.paths().count(f"/v1/messages/batches/{upstream_id}/results") == 1


@pytest.fixture
def lone_fake() -> Iterator[FakeUpstream]:
    """A fake upstream of its own, for a Citegate process."""
    fake = FakeUpstream()
    with Served(fake.app) as served:
        fake.base_url = served.base_url
        yield fake
        served.server.force_exit = True  # do not wait for a results file still held


def test_a_process_killed_while_storing_results_is_finished_by_the_next(
    tmp_path: Path, lone_fake: FakeUpstream, client: httpx.Client, database_url: str
) -> None:
    env = {
        "CITEGATE_DATABASE_URL": database_url,  # the suite's: SQLite or PostgreSQL
        "ANTHROPIC_API_KEY": "sk-ant-dummy-for-tests",
        "ANTHROPIC_BASE_URL": lone_fake.base_url,
        "CITEGATE_BATCH_POLL_SECONDS": "0.05",
        "CITEGATE_BATCH_POLL_MAX_SECONDS": "0.2",
        "CITEGATE_BATCH_LEASE_SECONDS": "1",
    }
    count = 2 * RESULTS_PER_TRANSACTION
    # The results file stops after one transaction's worth and a bit, for a minute, once.
    lone_fake.new_batch = {"hold_after": RESULTS_PER_TRANSACTION + 50, "hold_seconds": 60}

    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    first = CitegateProcess(tmp_path, ["serve", "--port", str(port)], env)
    try:
        first.wait_until_healthy(base_url)
        with httpx.Client(base_url=base_url, timeout=60) as api:
            grass = store_text(api, GRASS, "Colours")
            one = {"question": "Q?", "document_ids": [grass]}
            requests = [{"custom_id": f"q{n}", **one} for n in range(count)]
            created = api.post("/v1/answer-batches", json={"requests": requests})
            assert created.status_code == 201, created.text
        batch_id = created.json()["id"]
        deadline = time.monotonic() + 60
        while count_batch_answers(database_url, batch_id)[0] < RESULTS_PER_TRANSACTION:
            assert time.monotonic() < deadline, first.output
            time.sleep(0.05)
    finally:
        first.stop()  # SIGKILL: no shutdown of any kind
    stored = RESULTS_PER_TRANSACTION
    assert count_batch_answers(database_url, batch_id) == (stored, stored)

    # Started again (in this process, to save a second start-up): it takes the lease the
    # killed one left once it runs out, and stores the rest.
    again = Settings(
        database_url=database_url,
        anthropic_api_key=SecretStr(env["ANTHROPIC_API_KEY"]),
        anthropic_base_url=lone_fake.base_url,
        **FAST,  # type: ignore[arg-type]
    )
    with ServedApp(again) as second, httpx.Client(base_url=second.base_url, timeout=60) as api:
        batch = wait_ended(api, batch_id)
        assert batch["request_counts"]["succeeded"] == count
        results = all_results(api, batch_id)
    assert [result["custom_id"] for result in results] == [f"q{n}" for n in range(count)]
    assert count_batch_answers(database_url, batch_id) == (count, count)
    [upstream] = lone_fake.batches.values()
    assert lone_fake.paths().count(f"/v1/messages/batches/{upstream.id}/results") == 2
