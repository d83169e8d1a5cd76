"""/metrics moves with a request cycle; every request leaves one structured log line."""

from __future__ import annotations

import logging
import re

import httpx
import pytest

from tests.fixture_files import FIXTURES


def sample(metrics: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text format (0 when absent)."""
    for line in metrics.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split(" ")[0]))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_metrics_move_after_a_cycle(client: httpx.Client) -> None:
    before = client.get("/metrics").text
    raw = (FIXTURES / "amazon_2023_letter.pdf").read_bytes()
    document = client.post("/v1/documents/upload", files={"file": ("l.pdf", raw)}).json()
    answer = client.post(
        "/v1/answers",
        json={"question": "What was Amazon's revenue in 2023?", "document_ids": [document["id"]]},
    ).json()
    client.get(f"/v1/documents/{document['id']}")
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    after = response.text

    def moved(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert moved("citegate_http_requests_total", route="/v1/documents/upload", status="201") == 1
    assert (
        moved("citegate_http_requests_total", route="/v1/documents/{document_id}", status="200")
        == 1
    )
    assert moved("citegate_http_request_duration_seconds_count", route="/v1/answers") == 1
    assert moved("citegate_upstream_calls_total", endpoint="messages", outcome="ok") == 1
    usage = answer["usage"]
    assert moved("citegate_upstream_tokens_total", kind="output") == usage["output_tokens"]
    assert (
        moved("citegate_upstream_tokens_total", kind="cache_creation")
        + moved("citegate_upstream_tokens_total", kind="cache_read")
        == usage["cache_creation_input_tokens"] + usage["cache_read_input_tokens"]
    )
    assert moved("citegate_answers_total", status="completed") == 1
    assert moved("citegate_documents_ingested_total", kind="pdf") == 1
    assert moved("citegate_document_ingestion_seconds_count", kind="pdf") == 1


def test_one_log_line_per_request(client: httpx.Client, caplog: pytest.LogCaptureFixture) -> None:
    document = client.post(
        "/v1/documents", json={"source": {"type": "text", "data": "The grass is green."}}
    ).json()
    with caplog.at_level(logging.INFO, logger="citegate.request"):
        got = client.get(f"/v1/documents/{document['id']}", headers={"X-Request-ID": "trace-42"})
        answer = client.post(
            "/v1/answers", json={"question": "Grass?", "document_ids": [document["id"]]}
        )
    lines = [r for r in caplog.records if r.name == "citegate.request"]
    assert len(lines) == 2
    first, second = lines
    assert got.headers["x-request-id"] == "trace-42"
    assert first.request_id == "trace-42"  # type: ignore[attr-defined]
    assert first.route == "/v1/documents/{document_id}"  # type: ignore[attr-defined]
    assert first.status == 200 and first.tenant == "ten_default"  # type: ignore[attr-defined]
    assert first.latency_ms > 0  # type: ignore[attr-defined]
    assert second.request_id == answer.headers["x-request-id"]  # type: ignore[attr-defined]
    assert second.upstream_request_id == answer.json()["upstream"]["request_id"]  # type: ignore[attr-defined]
    assert second.upstream_request_id  # type: ignore[attr-defined]
