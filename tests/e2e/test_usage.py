"""Usage and cost reports (``/v1/admin/usage``, ``/v1/admin/costs``): answers asked alone,
streamed, through the compatible API and in a batch, by two tenants and several keys, behind
a fake upstream whose usage is known. The totals are the stored answers' usage exactly; the
cost is the price table's, cache tokens and the batch discount included; an admin sees only
its tenant; the operator's own price table replaces the shipped one."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.pool import NullPool

from app.db.engine import create_engine
from app.settings import Settings
from tests.conftest import Served, behind
from tests.e2e.test_admin import Platform, assert_problem
from tests.e2e.test_batches import FAST
from tests.e2e.test_support import CONTENT, LETTER, judged
from tests.fake_upstream import GRASS, GRASS_ANSWER, FakeUpstream, Reply, message, sse_message

TOKENS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)
# The shipped table's price of a model it does not name ("*"), USD per million tokens, and
# its batch discount: API.md's rule, written out here apart from the code.
STAR = {
    "input_tokens": Decimal(3),
    "output_tokens": Decimal(15),
    "cache_creation_input_tokens": Decimal("3.75"),
    "cache_read_input_tokens": Decimal("0.3"),
}
BATCH_FACTOR = Decimal("0.5")


@pytest.fixture
def faked(settings: Settings, fake: FakeUpstream, client: httpx.Client) -> Iterator[Served]:
    with behind(settings, fake, **FAST) as app:
        yield app


@pytest.fixture
def http(faked: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=faked.base_url, timeout=60) as http:
        yield http


def stored_usage(database_url: str) -> list[dict[str, Any]]:
    """The stored answers, and the usage records of calls that store none, as they are."""

    async def read() -> list[dict[str, Any]]:
        engine = create_engine(database_url, poolclass=NullPool)
        async with engine.connect() as connection:
            rows = await connection.execute(
                text(
                    "SELECT tenant_id, api_key_id, model, usage, batch_id IS NOT NULL AS batch "
                    "FROM answers UNION ALL SELECT tenant_id, api_key_id, model, usage, batch "
                    "FROM usage_records"
                )
            )
            found = [dict(row._mapping) for row in rows]
        await engine.dispose()
        for row in found:
            if isinstance(row["usage"], str):
                row["usage"] = json.loads(row["usage"])
        return found

    return asyncio.run(read())


def ask_everything(platform: Platform, http: httpx.Client, fake: FakeUpstream) -> None:
    """Answers of tenant A (two keys; alone, streamed, compatible, batch) and of tenant B
    (one, its support judged: the judge's call is a usage record of its own)."""
    a, other_a, b = (
        platform.admin_a["headers"],
        platform.new_key(platform.a["id"], ["read", "write"])["headers"],
        platform.admin_b["headers"],
    )

    def document(headers: dict[str, str], text: str = GRASS) -> str:
        made = http.post(
            "/v1/documents", json={"source": {"type": "text", "data": text}}, headers=headers
        )
        assert made.status_code == 201, made.text
        return str(made.json()["id"])

    mine, theirs = document(a), document(b, LETTER)
    cached = message(
        GRASS_ANSWER,
        usage={
            "input_tokens": 7,
            "output_tokens": 11,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 900,
        },
    )
    fake.reset(
        Reply(200, message(GRASS_ANSWER)),
        Reply(200, cached),
        Reply(events=sse_message(GRASS_ANSWER, usage_out=33)),
        Reply(200, message(GRASS_ANSWER, model="claude-haiku-4-5")),
        Reply(200, message(CONTENT)),
        judged({"citation": 0, "verdict": "unsupported", "reason": "31% is not 13%."}),
    )
    ask = {"question": "What colour is the grass?", "document_ids": [mine]}
    assert http.post("/v1/answers", json=ask, headers=a).status_code == 200
    assert http.post("/v1/answers", json=ask, headers=other_a).status_code == 200
    streamed = http.post("/v1/answers", json={**ask, "stream": True}, headers=a)
    assert "event: answer.done" in streamed.text
    compatible = {
        "model": "claude-haiku-4-5",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "Hello"}],
    }
    assert http.post("/anthropic/v1/messages", json=compatible, headers=a).status_code == 200
    theirs_ask = {"question": "How?", "document_ids": [theirs], "support": "judge"}
    judged_answer = http.post("/v1/answers", json=theirs_ask, headers=b)
    assert judged_answer.status_code == 200, judged_answer.text
    # The judge's call is in the answer's usage, and recorded apart for the reports.
    assert judged_answer.json()["usage"]["support_check"] == {
        "input_tokens": 321,
        "output_tokens": 45,
    }
    requests = [{"custom_id": f"q{n}", **ask} for n in range(2)]
    batch = http.post("/v1/answer-batches", json={"requests": requests}, headers=other_a)
    assert batch.status_code == 201, batch.text
    path, deadline = f"/v1/answer-batches/{batch.json()['id']}", time.monotonic() + 60
    while http.get(path, headers=other_a).json()["status"] != "ended":
        assert time.monotonic() < deadline, "the batch did not end"
        time.sleep(0.1)


def window() -> dict[str, str]:
    now = datetime.now(UTC)
    return {
        "starting_at": (now - timedelta(hours=2)).isoformat(),
        "ending_at": (now + timedelta(hours=1)).isoformat(),
    }


def totals(results: list[dict[str, Any]]) -> dict[str, int]:
    return {name: sum(r[name] for r in results) for name in (*TOKENS, "requests")}


def test_usage_totals_are_the_stored_answers_and_costs_their_price(
    http: httpx.Client, fake: FakeUpstream, database_url: str
) -> None:
    platform = Platform(http, database_url)
    ask_everything(platform, http, fake)
    answers = stored_usage(database_url)  # and the judge's record
    assert len(answers) == 8 and sum(1 for row in answers if row["batch"]) == 2
    [record] = [
        row
        for row in answers
        if "support_check" not in row["usage"]
        and not any(
            row["usage"].get(n) for n in ("cache_creation_input_tokens", "cache_read_input_tokens")
        )
        and row["usage"].get("input_tokens") == 321
    ]
    assert (record["tenant_id"], record["api_key_id"]) == (platform.b["id"], platform.admin_b["id"])
    assert record["usage"]["output_tokens"] == 45

    op = platform.operator
    params = {**window(), "bucket_width": "1h", "group_by": "tenant_id,api_key_id,model"}
    report = http.get("/v1/admin/usage", params=params, headers=op)
    assert report.status_code == 200, report.text
    buckets = report.json()["data"]
    # The UTC hours from the one holding starting_at to the one holding the end, one apart.
    first = datetime.fromisoformat(params["starting_at"]).replace(minute=0, second=0, microsecond=0)
    starts = [datetime.fromisoformat(b["starting_at"]) for b in buckets]
    assert starts == [first + timedelta(hours=n) for n in range(len(starts))]
    assert (
        starts[-1] < datetime.fromisoformat(params["ending_at"]) <= starts[-1] + timedelta(hours=1)
    )
    results = [result for bucket in buckets for result in bucket["results"]]
    expected = {name: sum(int(row["usage"].get(name) or 0) for row in answers) for name in TOKENS}
    assert totals(results) == {**expected, "requests": len(answers)}
    assert sum(r["batch_requests"] for r in results) == 2
    # Grouped: each (tenant, key, model) is the sum of its answers.
    for result in results:
        mine = [
            row
            for row in answers
            if (row["tenant_id"], row["api_key_id"], row["model"])
            == (result["tenant_id"], result["api_key_id"], result["model"])
        ]
        assert result["requests"] == len(mine)
        for name in TOKENS:
            assert result[name] == sum(int(row["usage"].get(name) or 0) for row in mine)
    assert {r["model"] for r in results} == {"claude-sonnet-5", "claude-haiku-4-5"}
    judged = [r for r in results if r["api_key_id"] == platform.admin_b["id"]]
    assert totals(judged)["requests"] == 2  # B's answer, and its judge's call

    # Costs: the table's prices per token, cache tokens at theirs, batches at half.
    costs = http.get("/v1/admin/costs", params={**params, "group_by": "tenant_id"}, headers=op)
    assert costs.status_code == 200, costs.text
    body = costs.json()
    assert body["price_table_version"] == "2026-12-01"
    by_tenant: dict[str, Decimal] = {}
    for bucket in body["data"]:
        for result in bucket["results"]:
            assert set(result) >= {"tenant_id", "amount", "currency"}
            by_tenant[result["tenant_id"]] = by_tenant.get(result["tenant_id"], 0) + Decimal(
                result["amount"]
            )
    haiku = {
        "input_tokens": Decimal(1),
        "output_tokens": Decimal(5),
        "cache_creation_input_tokens": Decimal("1.25"),
        "cache_read_input_tokens": Decimal("0.1"),
    }
    for tenant in (platform.a["id"], platform.b["id"]):
        want = Decimal(0)
        for row in answers:
            if row["tenant_id"] != tenant:
                continue
            price = haiku if row["model"] == "claude-haiku-4-5" else STAR
            cost = sum(
                (Decimal(row["usage"].get(n) or 0) * price[n] for n in TOKENS), Decimal(0)
            ) / Decimal(10**6)
            want += cost * (BATCH_FACTOR if row["batch"] else Decimal(1))
        assert by_tenant[tenant] == want, tenant

    # An admin sees its own tenant; another's is not found.
    a = platform.admin_a["headers"]
    own = http.get("/v1/admin/usage", params={**window(), "group_by": "tenant_id"}, headers=a)
    own_results = [r for bucket in own.json()["data"] for r in bucket["results"]]
    assert {r["tenant_id"] for r in own_results} == {platform.a["id"]}
    assert totals(own_results)["requests"] == sum(
        1 for row in answers if row["tenant_id"] == platform.a["id"]
    )
    for path in ("/v1/admin/usage", "/v1/admin/costs"):
        theirs = http.get(path, params={**window(), "tenant_id": platform.b["id"]}, headers=a)
        assert_problem(theirs, 404, "tenant_not_found")
    reader = platform.new_key(platform.a["id"], ["read", "write"])["headers"]
    assert_problem(
        http.get("/v1/admin/usage", params=window(), headers=reader), 403, "insufficient_scope"
    )


def test_bad_ranges_and_groups_are_refused(http: httpx.Client, database_url: str) -> None:
    platform = Platform(http, database_url)
    op = platform.operator
    now = datetime.now(UTC)
    for params in (
        {"starting_at": now.isoformat(), "ending_at": (now - timedelta(hours=1)).isoformat()},
        {"starting_at": (now - timedelta(days=400)).isoformat(), "bucket_width": "1h"},
        {"starting_at": now.isoformat(), "group_by": "tenant_id,colour"},
        {"starting_at": now.isoformat(), "bucket_width": "1w"},
        {"starting_at": "2026-01-01T00:00:00"},  # no offset
        {},
    ):
        assert_problem(
            http.get("/v1/admin/usage", params=params, headers=op), 422, "validation_error"
        )


def test_the_operators_price_table_replaces_the_shipped_one(
    settings: Settings, fake: FakeUpstream, client: httpx.Client, tmp_path: Path
) -> None:
    table = {
        "version": "ours-7",
        "batch_discount": "0.25",
        "models": {"*": {"input": "1000000", "output": "0", "cache_write": "0", "cache_read": "0"}},
    }
    (tmp_path / "prices.json").write_text(json.dumps(table))
    with (
        behind(settings, fake, prices_file=tmp_path / "prices.json") as served,
        httpx.Client(base_url=served.base_url, timeout=60) as http,
    ):
        platform = Platform(http, settings.database_url)
        fake.reset(Reply(200, message(GRASS_ANSWER)))
        made = http.post(
            "/v1/documents",
            json={"source": {"type": "text", "data": GRASS}},
            headers=platform.admin_a["headers"],
        )
        ask = {"question": "Grass?", "document_ids": [made.json()["id"]]}
        answered = http.post("/v1/answers", json=ask, headers=platform.admin_a["headers"])
        assert answered.status_code == 200
        costs = http.get("/v1/admin/costs", params=window(), headers=platform.operator).json()
    assert costs["price_table_version"] == "ours-7"
    [amount] = [r["amount"] for bucket in costs["data"] for r in bucket["results"]]
    assert Decimal(amount) == answered.json()["usage"]["input_tokens"]  # $1 a token
