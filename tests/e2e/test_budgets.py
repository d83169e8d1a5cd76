"""Budgets on tenants and keys (``budget`` of createTenant, createApiKey, ...): shown as set,
422 when malformed; each upstream call reserves its maximum cost first and settles its actual
cost after, so a spent budget refuses with ``429 budget_exceeded`` (in each API's shape, never
retried), a failed call gives its reservation back, batches reserve when made and settle as
their results arrive, and 50 requests at once against a budget that fits 10, through two
service instances on one database, spend no more than it.

The fake upstream's replies spend 100000 output tokens (1.5 USD at the ``*`` price, 15 USD per
million) of the 100000 each request may: its maximum cost is 1.5 USD and a little input (the
request's bytes at the cache-write price, under 0.015 USD here), and what it spends is
``SPENT`` nano-USD.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from PIL import Image
from sqlalchemy import text
from sqlalchemy.pool import NullPool

from app.auth import budgets
from app.auth.budgets import Budget, BudgetExceeded
from app.db.engine import create_engine
from app.settings import Settings
from app.usage.prices import load_prices
from tests.conftest import Served, behind, free_port
from tests.e2e.test_admin import Platform, assert_problem
from tests.e2e.test_batches import FAST
from tests.e2e.test_shutdown import CitegateProcess
from tests.fake_upstream import GRASS, GRASS_ANSWER, FakeUpstream, Reply, error, message
from tests.scans import image_pdf

MAX_TOKENS = 100_000
FULL = {
    "input_tokens": 25,
    "output_tokens": MAX_TOKENS,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
}
# 25 input tokens at 3 USD and 100000 output tokens at 15 USD per million, in nano-USD.
SPENT = 25 * 3_000 + MAX_TOKENS * 15_000
# The batch price of the default batch result (25 in, 40 out, 900 written to the cache).
BATCH_RESULT_SPENT = (25 * 3_000 + 40 * 15_000 + 900 * 3_750) // 2


@pytest.fixture
def faked(settings: Settings, fake: FakeUpstream, client: httpx.Client) -> Iterator[Served]:
    with behind(settings, fake, **FAST) as app:
        yield app


@pytest.fixture
def http(faked: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=faked.base_url, timeout=60) as http:
        yield http


def full_reply(delay: float = 0.0) -> Reply:
    return Reply(200, message(GRASS_ANSWER, usage=FULL), delay=delay)


def document(http: httpx.Client, headers: dict[str, str]) -> str:
    made = http.post(
        "/v1/documents", json={"source": {"type": "text", "data": GRASS}}, headers=headers
    )
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def question(document_id: str, **more: Any) -> dict[str, Any]:
    return {
        "question": "What colour is the grass?",
        "document_ids": [document_id],
        "max_tokens": MAX_TOKENS,
        **more,
    }


def ledger(database_url: str, owner_id: str) -> tuple[int, int]:
    """What the owner's budget has spent and has reserved, over every period."""

    async def read() -> tuple[int, int]:
        engine = create_engine(database_url, poolclass=NullPool)
        async with engine.connect() as connection:
            row = (
                await connection.execute(
                    text(
                        "SELECT COALESCE(SUM(spent_nano_usd), 0), "
                        "COALESCE(SUM(reserved_nano_usd), 0) FROM budget_spend "
                        "WHERE owner_id = :owner"
                    ),
                    {"owner": owner_id},
                )
            ).one()
        await engine.dispose()
        return int(row[0]), int(row[1])

    return asyncio.run(read())


def assert_budget_exceeded(response: httpx.Response) -> None:
    assert_problem(response, 429, "budget_exceeded")
    assert response.headers["x-should-retry"] == "false"


def test_a_budget_is_shown_as_set_changed_and_removed(
    http: httpx.Client, database_url: str
) -> None:
    platform = Platform(http, database_url)
    op = platform.operator
    tenant = platform.post(
        "/v1/admin/tenants", {"name": "budgeted", "budget": {"usd": "50", "period": "month"}}, op
    ).json()
    assert tenant["budget"] == {"usd": "50.00", "period": "month"}
    assert http.get(f"/v1/admin/tenants/{tenant['id']}", headers=op).json() == tenant
    listed = http.get("/v1/admin/tenants", headers=op).json()["data"]
    assert [t["budget"] for t in listed if t["id"] == tenant["id"]] == [tenant["budget"]]
    assert [t["budget"] for t in listed if t["id"] == platform.a["id"]] == [None]

    key = platform.new_key(
        tenant["id"], ["read", "write"], budget={"usd": "0.123456789", "period": "day"}
    )
    assert key["budget"] == {"usd": "0.123456789", "period": "day"}
    path = f"/v1/admin/api-keys/{key['id']}"
    assert http.get(path, headers=op).json()["budget"] == key["budget"]
    # A change of name leaves the budget; a new budget replaces it; null removes it.
    renamed = http.patch(path, json={"name": "renamed"}, headers=op).json()
    assert renamed["budget"] == key["budget"]
    changed = http.patch(path, json={"budget": {"usd": "7.5", "period": "total"}}, headers=op)
    assert changed.json()["budget"] == {"usd": "7.50", "period": "total"}
    assert http.patch(path, json={"budget": None}, headers=op).json()["budget"] is None
    tenant_path = f"/v1/admin/tenants/{tenant['id']}"
    assert http.patch(tenant_path, json={"budget": None}, headers=op).json()["budget"] is None
    # Each change is an audit event that says what the budget became.
    events = http.get("/v1/admin/audit-events", headers=op).json()["data"]
    budgets_set = [e["details"]["budget"] for e in events if "budget" in e["details"]]
    assert {"usd": "7.50", "period": "total"} in budgets_set and None in budgets_set


@pytest.mark.parametrize(
    "budget",
    [
        {"usd": "-1", "period": "day"},
        {"usd": "1", "period": "week"},
        {"usd": 5, "period": "day"},
        {"usd": "1.5"},
        {"usd": "1.0000000001", "period": "day"},
        {"usd": "abc", "period": "day"},
        {"usd": "1e3", "period": "day"},
        {"usd": "1", "period": "day", "currency": "EUR"},
    ],
    ids=["negative", "period", "number", "no period", "decimals", "word", "exponent", "extra"],
)
def test_a_malformed_budget_is_refused_and_nothing_changes(
    http: httpx.Client, database_url: str, budget: Any
) -> None:
    platform = Platform(http, database_url)
    op = platform.operator
    key_path = f"/v1/admin/api-keys/{platform.admin_a['id']}"
    tenant_path = f"/v1/admin/tenants/{platform.a['id']}"
    before = http.get("/v1/admin/api-keys", headers=op).json()
    for method, path, body in [
        ("POST", "/v1/admin/api-keys", {"tenant_id": platform.a["id"], "budget": budget}),
        ("PATCH", key_path, {"budget": budget}),
        ("POST", "/v1/admin/tenants", {"name": "another", "budget": budget}),
        ("PATCH", tenant_path, {"budget": budget}),
    ]:
        response = http.request(method, path, json=body, headers=op)
        problem = assert_problem(response, 422, "validation_error")
        assert problem["errors"][0]["loc"][:2] == ["body", "budget"], problem
    assert http.get("/v1/admin/api-keys", headers=op).json() == before
    assert http.get(tenant_path, headers=op).json()["budget"] is None


def test_a_spent_key_budget_refuses_every_api_in_its_own_shape(
    http: httpx.Client, fake: FakeUpstream, database_url: str
) -> None:
    platform = Platform(http, database_url)
    key = platform.new_key(
        platform.a["id"], ["read", "write"], budget={"usd": "2", "period": "day"}
    )
    headers = key["headers"]
    document_id = document(http, headers)
    fake.reset(full_reply())
    assert http.post("/v1/answers", json=question(document_id), headers=headers).status_code == 200
    assert ledger(database_url, key["id"]) == (SPENT, 0)
    # 0.5 USD left: not enough for another answer of up to 100000 tokens, whole or streamed.
    assert_budget_exceeded(http.post("/v1/answers", json=question(document_id), headers=headers))
    streamed = http.post("/v1/answers", json=question(document_id, stream=True), headers=headers)
    assert_budget_exceeded(streamed)
    assert fake.paths() == ["/v1/messages"]  # nothing refused went upstream
    # A smaller answer fits; then a budget below what was spent refuses everything, at once.
    small = http.post("/v1/answers", json=question(document_id, max_tokens=100), headers=headers)
    assert small.status_code == 200, small.text
    spent = ledger(database_url, key["id"])[0]
    assert spent == 2 * SPENT
    lowered = http.patch(
        f"/v1/admin/api-keys/{key['id']}",
        json={"budget": {"usd": "1.5", "period": "day"}},
        headers=platform.operator,
    )
    assert lowered.status_code == 200, lowered.text
    paid = len(fake.requests)
    tiny = question(document_id, max_tokens=1)
    assert_budget_exceeded(http.post("/v1/answers", json=tiny, headers=headers))
    messages = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1,
        "messages": [{"role": "user", "content": "Hi"}],
    }
    anthropic = http.post("/anthropic/v1/messages", json=messages, headers=headers)
    assert anthropic.status_code == 429, anthropic.text
    assert anthropic.json()["error"]["type"] == "rate_limit_error"
    assert "budget" in anthropic.json()["error"]["message"]
    assert anthropic.headers["x-should-retry"] == "false"
    parts = [{"type": "text", "text": "Hi"}, {"type": "file", "file": {"file_id": document_id}}]
    chat = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": parts}]}
    openai = http.post("/openai/v1/chat/completions", json=chat, headers=headers)
    assert openai.status_code == 429, openai.text
    assert "budget" in openai.json()["error"]["message"]
    assert openai.headers["x-should-retry"] == "false"
    conversation = http.post(
        "/v1/conversations", json={"document_ids": [document_id]}, headers=headers
    )
    assert conversation.status_code == 201, conversation.text
    turn = {"question": "And the sky?", "conversation_id": conversation.json()["id"]}
    assert_budget_exceeded(
        http.post("/v1/answers", json={**turn, "max_tokens": 1}, headers=headers)
    )
    assert len(fake.requests) == paid
    assert ledger(database_url, key["id"]) == (spent, 0)
    # Another key of the tenant has no budget of its own: it is not refused.
    other = platform.admin_a["headers"]
    assert http.post("/v1/answers", json=tiny, headers=other).status_code == 200
    # The refused turn left its conversation free: with room again, the turn is answered.
    raised = {"budget": {"usd": "10", "period": "day"}}
    http.patch(f"/v1/admin/api-keys/{key['id']}", json=raised, headers=platform.operator)
    answered = http.post("/v1/answers", json={**turn, "max_tokens": 1}, headers=headers)
    assert answered.status_code == 200, answered.text
    assert answered.json()["conversation_id"] == conversation.json()["id"]


def test_a_tenant_budget_covers_all_its_keys(
    http: httpx.Client, fake: FakeUpstream, database_url: str
) -> None:
    platform = Platform(http, database_url)
    op = platform.operator
    tenant_path = f"/v1/admin/tenants/{platform.a['id']}"
    set_budget = http.patch(
        tenant_path, json={"budget": {"usd": "2.00", "period": "month"}}, headers=op
    )
    assert set_budget.status_code == 200, set_budget.text
    first = platform.admin_a["headers"]
    second = platform.new_key(platform.a["id"], ["read", "write"])["headers"]
    document_id = document(http, first)
    fake.reset(full_reply())
    assert http.post("/v1/answers", json=question(document_id), headers=first).status_code == 200
    assert_budget_exceeded(http.post("/v1/answers", json=question(document_id), headers=second))
    # Tenant B's keys spend B's (no budget).
    theirs = document(http, platform.admin_b["headers"])
    answered = http.post("/v1/answers", json=question(theirs), headers=platform.admin_b["headers"])
    assert answered.status_code == 200
    assert ledger(database_url, platform.a["id"]) == (SPENT, 0)
    assert ledger(database_url, platform.b["id"]) == (0, 0)
    # A budget raised is honoured on the next request.
    http.patch(tenant_path, json={"budget": {"usd": "4", "period": "month"}}, headers=op)
    assert http.post("/v1/answers", json=question(document_id), headers=second).status_code == 200
    assert ledger(database_url, platform.a["id"]) == (2 * SPENT, 0)


def test_a_failed_upstream_call_gives_its_reservation_back(
    http: httpx.Client, fake: FakeUpstream, database_url: str
) -> None:
    platform = Platform(http, database_url)
    key = platform.new_key(
        platform.a["id"], ["read", "write"], budget={"usd": "2", "period": "total"}
    )
    headers = key["headers"]
    document_id = document(http, headers)
    refused = error(400, "invalid_request_error", "Scripted refusal")
    fake.reset(refused, refused, full_reply())
    failed = http.post("/v1/answers", json=question(document_id), headers=headers)
    assert failed.status_code >= 400 and failed.json()["code"] != "budget_exceeded", failed.text
    streamed = http.post("/v1/answers", json=question(document_id, stream=True), headers=headers)
    assert streamed.status_code >= 400 and streamed.json()["code"] != "budget_exceeded"
    assert ledger(database_url, key["id"]) == (0, 0)
    # Had either kept its 1.5 USD, this would not fit.
    answered = http.post("/v1/answers", json=question(document_id), headers=headers)
    assert answered.status_code == 200, answered.text
    assert ledger(database_url, key["id"]) == (SPENT, 0)


def test_a_streamed_answer_settles_what_it_used(
    http: httpx.Client, fake: FakeUpstream, database_url: str
) -> None:
    platform = Platform(http, database_url)
    key = platform.new_key(
        platform.a["id"], ["read", "write"], budget={"usd": "2", "period": "day"}
    )
    document_id = document(http, key["headers"])
    from tests.fake_upstream import sse_message

    fake.reset(Reply(events=sse_message(GRASS_ANSWER, usage_out=MAX_TOKENS)))
    body = question(document_id, stream=True)
    streamed = http.post("/v1/answers", json=body, headers=key["headers"])
    assert "event: answer.done" in streamed.text
    spent, reserved = ledger(database_url, key["id"])
    assert reserved == 0 and spent >= MAX_TOKENS * 15_000
    assert_budget_exceeded(http.post("/v1/answers", json=body, headers=key["headers"]))


def race_of_fifty(
    platform: Platform, http: httpx.Client, fake: FakeUpstream
) -> tuple[dict[str, Any], Callable[[list[str]], list[httpx.Response]]]:
    """A key whose budget fits 10 answers, and what asks 50 at once, in turn through each of
    the given services."""
    # Each request may cost 1.5 USD and under 0.015 more: 10 fit in 15.2, not 11.
    key = platform.new_key(
        platform.a["id"], ["read", "write"], budget={"usd": "15.2", "period": "total"}
    )
    document_id = document(http, key["headers"])
    fake.reset(full_reply(delay=0.3))  # so that they are all under way together

    async def ask_all(urls: list[str]) -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=120) as client:
            return await asyncio.gather(
                *(
                    client.post(
                        f"{urls[n % len(urls)]}/v1/answers",
                        json=question(document_id),
                        headers=key["headers"],
                    )
                    for n in range(50)
                )
            )

    return key, lambda urls: asyncio.run(ask_all(urls))


def assert_ten_of_fifty(
    responses: list[httpx.Response], fake: FakeUpstream, database_url: str, key_id: str
) -> None:
    answered = [r for r in responses if r.status_code == 200]
    refused = [r for r in responses if r.status_code != 200]
    assert len(answered) == 10
    for response in refused:
        assert_budget_exceeded(response)
    assert fake.paths().count("/v1/messages") == 10
    spent, reserved = ledger(database_url, key_id)
    assert (spent, reserved) == (10 * SPENT, 0)
    assert spent <= 15_200_000_000


def test_fifty_requests_at_once_never_spend_past_a_budget_that_fits_ten(
    http: httpx.Client, settings: Settings, fake: FakeUpstream, database_url: str
) -> None:
    """Half through each of two service instances on the same database."""
    key, ask_all = race_of_fifty(Platform(http, database_url), http, fake)
    with behind(settings, fake) as second:
        responses = ask_all([str(http.base_url).rstrip("/"), second.base_url])
    assert_ten_of_fifty(responses, fake, database_url, key["id"])


def test_fifty_requests_at_once_through_two_processes_never_spend_past_it(
    http: httpx.Client, fake: FakeUpstream, database_url: str, tmp_path: Path
) -> None:
    """Two `citegate serve` processes on the test database (PostgreSQL when the suite runs on
    it), 25 requests through each."""
    key, ask_all = race_of_fifty(Platform(http, database_url), http, fake)
    env = {
        "CITEGATE_DATABASE_URL": database_url,
        "CITEGATE_AUTH": "required",
        "CITEGATE_OCR": "off",
        "ANTHROPIC_API_KEY": "sk-test",
        "ANTHROPIC_BASE_URL": fake.base_url,
    }
    with ExitStack() as stack:
        urls = []
        for _ in range(2):
            url = f"http://127.0.0.1:{free_port()}"
            process = CitegateProcess(tmp_path, ["serve", "--port", url.rsplit(":", 1)[1]], env)
            stack.callback(process.stop)
            process.wait_until_healthy(url)
            urls.append(url)
        responses = ask_all(urls)
    assert_ten_of_fifty(responses, fake, database_url, key["id"])


def test_a_batch_reserves_when_made_and_settles_as_its_results_arrive(
    http: httpx.Client, fake: FakeUpstream, database_url: str
) -> None:
    platform = Platform(http, database_url)
    # At the batch price a request may cost 0.75 USD and a little: 3 fit in 2.3.
    key = platform.new_key(
        platform.a["id"], ["read", "write"], budget={"usd": "2.3", "period": "total"}
    )
    headers = key["headers"]
    document_id = document(http, headers)
    fake.reset(full_reply())
    fake.new_batch = {"polls_before_end": 2}
    requests = [{"custom_id": f"q{n}", **question(document_id)} for n in range(2)]
    made = http.post("/v1/answer-batches", json={"requests": requests}, headers=headers)
    assert made.status_code == 201, made.text
    spent, reserved = ledger(database_url, key["id"])
    assert spent == 0 and 2 * 750_000_000 <= reserved < 2 * 760_000_000
    # Two more do not fit while those two are reserved.
    more = http.post("/v1/answer-batches", json={"requests": requests}, headers=headers)
    assert_budget_exceeded(more)
    wait_ended(http, made.json()["id"], headers)
    assert ledger(database_url, key["id"]) == (2 * BATCH_RESULT_SPENT, 0)

    # A batch cancelled before its results: what it reserved is released.
    fake.new_batch = {"polls_before_end": 1000}
    again = http.post("/v1/answer-batches", json={"requests": requests}, headers=headers)
    assert again.status_code == 201, again.text
    assert ledger(database_url, key["id"])[1] > 0
    batch_id = again.json()["id"]
    upstream = fake.batches[max(fake.batches)]
    upstream.polls_before_end = upstream.polls + 1  # ends at the poll after the cancel
    cancelled = http.post(f"/v1/answer-batches/{batch_id}/cancel", headers=headers)
    assert cancelled.status_code == 200, cancelled.text
    wait_ended(http, batch_id, headers)
    results = http.get(f"/v1/answer-batches/{batch_id}/results", headers=headers).json()["data"]
    assert {r["status"] for r in results} == {"canceled"}
    assert ledger(database_url, key["id"]) == (2 * BATCH_RESULT_SPENT, 0)


def wait_ended(http: httpx.Client, batch_id: str, headers: dict[str, str]) -> None:
    path, deadline = f"/v1/answer-batches/{batch_id}", time.monotonic() + 60
    while http.get(path, headers=headers).json()["status"] != "ended":
        assert time.monotonic() < deadline, "the batch did not end"
        time.sleep(0.05)


def test_the_judge_spends_the_budget_and_a_spent_one_fails_only_the_judging(
    http: httpx.Client, fake: FakeUpstream, database_url: str
) -> None:
    from tests.e2e.test_support import CONTENT, LETTER, judged

    platform = Platform(http, database_url)
    key = platform.new_key(
        platform.a["id"], ["read", "write"], budget={"usd": "2", "period": "day"}
    )
    made = http.post(
        "/v1/documents", json={"source": {"type": "text", "data": LETTER}}, headers=key["headers"]
    )
    document_id = made.json()["id"]
    # The answer spends 1.5 USD; the judge's call (1024 tokens at most) fits in what is left.
    fake.reset(
        Reply(body=message(CONTENT, usage=FULL)),
        judged({"citation": 0, "verdict": "unsupported", "reason": "31% is not 13%."}),
    )
    body = question(document_id, support="judge", max_tokens=MAX_TOKENS)
    answer = http.post("/v1/answers", json=body, headers=key["headers"])
    assert answer.status_code == 200, answer.text
    judge_cost = 321 * 3_000 + 45 * 15_000
    assert ledger(database_url, key["id"]) == (SPENT + judge_cost, 0)
    # Lowered so that the next answer's maximum cost fits exactly (its input estimated as the
    # first answer's request's bytes) and, once it spent SPENT, its judge's call does not.
    asked = fake.requests[0].body
    estimate = len(orjson.dumps({k: v for k, v in asked.items() if k != "max_tokens"}))
    answer_max = budgets.max_cost(load_prices(), asked["model"], estimate, MAX_TOKENS)
    assert answer_max - SPENT < 1024 * 15_000  # less than the judge's output may cost
    lowered = {"usd": budgets.usd_text(SPENT + judge_cost + answer_max), "period": "day"}
    http.patch(
        f"/v1/admin/api-keys/{key['id']}", json={"budget": lowered}, headers=platform.operator
    )
    fake.reset(
        Reply(body=message(CONTENT, usage=FULL)),
        judged({"citation": 0, "verdict": "unsupported", "reason": "31% is not 13%."}),
    )
    second = http.post("/v1/answers", json=body, headers=key["headers"])
    assert second.status_code == 200, second.text
    assert fake.paths() == ["/v1/messages"]
    doubted = second.json()["segments"][1]["citations"][0]["support"]
    assert doubted["method"] == "lexical"
    assert doubted["reasons"][-1]["code"] == "judge_failed"
    assert ledger(database_url, key["id"]) == (2 * SPENT + judge_cost, 0)


def test_periods_roll_over_at_utc_midnight_and_on_the_first() -> None:
    moment = datetime(2026, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
    assert budgets.period_start("day", moment) == datetime(2026, 12, 31, tzinfo=UTC)
    assert budgets.period_start("month", moment) == datetime(2026, 12, 1, tzinfo=UTC)
    assert budgets.period_start("total", moment) == budgets.EPOCH
    later = datetime(2027, 1, 1, tzinfo=UTC)
    assert budgets.period_start("day", later) == later
    assert budgets.period_start("month", later) == later
    assert budgets.period_start("total", later) == budgets.EPOCH
    # Another offset is the same moment: UTC decides.
    from datetime import timedelta, timezone

    tokyo = datetime(2027, 1, 1, 8, 59, tzinfo=timezone(timedelta(hours=9)))
    assert budgets.period_start("day", tokyo) == datetime(2026, 12, 31, tzinfo=UTC)
    assert budgets.period_start("month", tokyo) == datetime(2026, 12, 1, tzinfo=UTC)
    assert [budgets.usd_text(n) for n in (0, 50 * 10**9, 123_456_789, 7_500_000_000)] == [
        "0.00",
        "50.00",
        "0.123456789",
        "7.50",
    ]
    # The most a request may cost: its input at the cache-write price, all its output.
    prices = load_prices()
    assert budgets.max_cost(prices, "claude-haiku-4-5", 1000, 100) == 1000 * 1_250 + 100 * 5_000
    assert budgets.max_cost(prices, "claude-haiku-4-5", 1000, 100, batch=True) == 875_000


def test_a_day_budget_spent_today_is_whole_again_tomorrow(database_url: str) -> None:
    budget = Budget("key_rollover_test", 2 * 10**9, "day", "ten_default")
    today = datetime(2026, 12, 31, 23, 0, tzinfo=UTC)
    tomorrow = datetime(2027, 1, 1, 0, 0, tzinfo=UTC)

    async def run() -> None:
        engine = create_engine(database_url, poolclass=NullPool)
        try:
            async with engine.begin() as connection:
                await connection.execute(
                    text("DELETE FROM budget_spend WHERE owner_id = :o"), {"o": budget.owner_id}
                )
            first = await budgets.reserve(engine, [budget], 1_500_000_000, today)
            with pytest.raises(BudgetExceeded):
                await budgets.reserve(engine, [budget], 1_000_000_000, today)
            # Settled late, it stays in the day it was reserved in.
            await budgets.settle(engine, first, 1_400_000_000)
            second = await budgets.reserve(engine, [budget], 1_500_000_000, tomorrow)
            await budgets.release(engine, second)
            assert await budgets.spent(engine, budget, today) == 1_400_000_000
            assert await budgets.spent(engine, budget, tomorrow) == 0
        finally:
            await engine.dispose()

    asyncio.run(run())


def test_a_pdf_of_large_pictures_reserves_what_its_pages_can_cost_not_its_bytes(
    http: httpx.Client, fake: FakeUpstream, database_url: str
) -> None:
    """A page of photographs is megabytes of base64 but a page image to the upstream: its
    reservation is counted from its pages and text, so a budget far below its bytes' price
    answers it, and the answer settles what it spent."""
    noise = random.Random(7).randbytes(1500 * 1500 * 3)
    photo = Image.frombytes("RGB", (1500, 1500), noise)
    letter = Path("tests/fixtures/anthropic/amazon_2023_letter.pdf").read_bytes()
    pdf = image_pdf([photo], text_pages={1: letter})
    platform = Platform(http, database_url)
    key = platform.new_key(
        platform.a["id"], ["read", "write"], budget={"usd": "3", "period": "total"}
    )
    made = http.post(
        "/v1/documents/upload",
        files={"file": ("photos.pdf", pdf, "application/pdf")},
        headers=key["headers"],
    )
    assert made.status_code == 201, made.text
    # Its base64 alone, at the cache-write price, is more than the whole budget.
    base64_price = budgets.max_cost(load_prices(), "claude-sonnet-5", len(pdf) * 4 // 3, 0)
    assert base64_price > 3_000_000_000
    fake.reset(Reply(200, message([{"type": "text", "text": "Nothing."}], usage=FULL)))
    answered = http.post("/v1/answers", json=question(made.json()["id"]), headers=key["headers"])
    assert answered.status_code == 200, answered.text
    assert fake.requests[0].body["messages"][0]["content"][0]["source"]["type"] == "base64"
    assert ledger(database_url, key["id"]) == (SPENT, 0)


def test_a_batchs_judge_calls_spend_the_askers_budget(
    http: httpx.Client, fake: FakeUpstream, database_url: str
) -> None:
    """A batch answer asking for the judge is judged before it is stored: that call spends the
    key's budget as the judge of an answer asked alone does (at its ordinary price)."""
    from tests.e2e.test_support import CONTENT, LETTER, judged

    platform = Platform(http, database_url)
    key = platform.new_key(
        platform.a["id"], ["read", "write"], budget={"usd": "5", "period": "total"}
    )
    headers = key["headers"]
    made = http.post(
        "/v1/documents", json={"source": {"type": "text", "data": LETTER}}, headers=headers
    )
    assert made.status_code == 201, made.text
    fake.reset(judged({"citation": 0, "verdict": "unsupported", "reason": "31% is not 13%."}))
    fake.batch_result = lambda custom_id, params: {"type": "succeeded", "message": message(CONTENT)}
    ask = {"custom_id": "judged", **question(made.json()["id"]), "support": "judge"}
    batch = http.post("/v1/answer-batches", json={"requests": [ask]}, headers=headers)
    assert batch.status_code == 201, batch.text
    wait_ended(http, batch.json()["id"], headers)
    assert fake.paths().count("/v1/messages") == 1  # the judge's call
    judge_cost = 321 * 3_000 + 45 * 15_000
    assert ledger(database_url, key["id"]) == (BATCH_RESULT_SPENT + judge_cost, 0)
