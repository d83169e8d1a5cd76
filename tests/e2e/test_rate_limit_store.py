"""A service whose rate-limit store (Redis) is down still answers, over HTTP: it serves
documents and answers unlimited, says so in /readyz and /metrics, and logs it once without the
URL's password. With Redis up the same limits apply."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from app.settings import Settings
from tests.conftest import REDIS_URL, ServedApp, delete_rate_limit_counters, free_port
from tests.e2e.test_auth import assert_rate_limited, bearer, make_key
from tests.e2e.test_observability import sample

PASSWORD = "s3cret-redis-password"
GRASS = b"The grass is green. The sky is blue."


def limited(settings: Settings, redis_url: str) -> ServedApp:
    """Three requests a minute and one upstream token a day per key, counted in this Redis."""
    update = {"redis_url": redis_url, "rate_limit_per_minute": 3, "token_limit_per_day": 1}
    return ServedApp(settings.model_copy(update=update))


def ask(http: httpx.Client, document_id: str, key: str | None = None) -> httpx.Response:
    return http.post(
        "/v1/answers",
        json={"question": "What color is the grass?", "document_ids": [document_id]},
        headers=bearer(key) if key else {},
    )


@pytest.fixture
def store_down(settings: Settings, client: httpx.Client) -> Iterator[ServedApp]:
    # A closed port on loopback: every connection is refused at once.
    with limited(settings, f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0") as app:
        yield app


def test_a_service_whose_redis_is_down_still_answers(
    store_down: ServedApp, caplog: pytest.LogCaptureFixture
) -> None:
    with httpx.Client(base_url=store_down.base_url, timeout=60) as http:
        upload = http.post("/v1/documents/upload", files={"file": ("grass.txt", GRASS)})
        assert upload.status_code == 201, upload.text
        document_id = upload.json()["id"]
        # Past both limits: with no store to count in, nothing is refused.
        answers = [ask(http, document_id) for _ in range(3)]
        assert [a.status_code for a in answers] == [200] * 3, answers[-1].text
        assert answers[0].json()["usage"]["output_tokens"] > 1
        listed = http.get("/v1/documents")
        assert listed.status_code == 200
        assert [d["id"] for d in listed.json()["data"]] == [document_id]

        ready = http.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["status"] == "ready"
        assert ready.json()["rate_limits"] == "unavailable"

        metrics = http.get("/metrics").text
    # Every /v1 request and every token check and spend went uncounted, and said so.
    assert sample(metrics, "citegate_rate_limit_fail_open_total", limit="requests") == 5
    assert sample(metrics, "citegate_rate_limit_fail_open_total", limit="tokens") == 6
    assert sample(metrics, "citegate_rate_limit_store_errors_total", operation="count_request") >= 1
    logged = [r for r in caplog.records if r.name == "app.auth.limits"]
    assert len(logged) == 1, [r.getMessage() for r in logged]
    assert "unavailable" in logged[0].getMessage()
    assert all(PASSWORD not in r.getMessage() for r in caplog.records)


@pytest.fixture
def store_up(settings: Settings, client: httpx.Client) -> Iterator[ServedApp]:
    with limited(settings, REDIS_URL) as app:
        yield app


def test_with_redis_up_the_limits_apply(store_up: ServedApp, database_url: str) -> None:
    key_id, key = make_key(database_url, "counted")  # a new key id: fresh counters in Redis
    try:
        with httpx.Client(base_url=store_up.base_url, timeout=60) as http:
            assert http.get("/readyz").json()["rate_limits"] == "ok"
            upload = http.post(
                "/v1/documents/upload", files={"file": ("grass.txt", GRASS)}, headers=bearer(key)
            )
            assert upload.status_code == 201, upload.text
            document_id = upload.json()["id"]
            # The answer spends more than the day's one token: the next is refused for that.
            assert ask(http, document_id, key).status_code == 200
            spent = ask(http, document_id, key)
            assert spent.status_code == 429, spent.text
            assert spent.json()["code"] == "rate_limited" and "tokens" in spent.json()["detail"]
            # And that was the third request of the minute.
            assert_rate_limited(http.get("/v1/documents", headers=bearer(key)))
            metrics = http.get("/metrics").text
    finally:
        delete_rate_limit_counters(key_id)
    assert sample(metrics, "citegate_rate_limit_store_errors_total") == 0
    assert sample(metrics, "citegate_rate_limit_fail_open_total") == 0
