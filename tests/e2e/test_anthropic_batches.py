"""Message Batches through the official SDK's ``client.messages.batches``: requests over
uploaded files asked as an answer batch, polled in the background, results read as the
Messages API gives them (with ``citegate`` on every citation). Against the local engine, and
against the fake upstream for a cancel that the test steers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from app.settings import Settings
from tests.conftest import Served, ServedApp, behind
from tests.e2e.test_anthropic_compat import ask, citations_of, file_block, sdk
from tests.e2e.test_batches import FAST
from tests.fake_upstream import GRASS, FakeUpstream, Reply, message

SEA = "The sea is deep. The sea is salty. Fish swim in it."


@pytest.fixture
def local(settings: Settings, client: httpx.Client) -> Iterator[Served]:
    """Citegate with the local engine, polling fast (its own app: see test_batches)."""
    with ServedApp(settings.model_copy(update=FAST)) as app:
        yield app


def wait_ended(api: anthropic.Anthropic, batch_id: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        batch = api.messages.batches.retrieve(batch_id)
        if batch.processing_status == "ended":
            return batch
        assert time.monotonic() < deadline, batch
        time.sleep(0.05)


def params(*blocks: dict[str, Any], question: str) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 512,
        "messages": ask(*blocks, question=question),
    }


def test_a_batch_over_files(local: Served) -> None:
    with sdk(local.base_url) as api:
        grass = api.files.upload(file=("grass.txt", GRASS.encode(), "text/plain")).id
        sea = api.files.upload(file=("sea.txt", SEA.encode(), "text/plain")).id
        requests: list[Any] = [
            {
                "custom_id": "grass",
                "params": params(file_block(grass), question="What color is the grass?"),
            },
            {
                "custom_id": "sea",
                "params": params(file_block(grass), file_block(sea), question="Is the sea salty?"),
            },
            {"custom_id": "unknown", "params": params(file_block("doc_missing"), question="Q?")},
            {
                "custom_id": "streamed",
                "params": params(file_block(grass), question="Q?") | {"stream": True},
            },
        ]
        created = api.messages.batches.create(requests=requests)
        assert created.type == "message_batch"
        assert created.processing_status == "in_progress"
        assert created.request_counts.processing == 2
        assert created.request_counts.errored == 2
        assert created.results_url is None
        ended = wait_ended(api, created.id)
        counts = ended.request_counts
        assert (counts.processing, counts.succeeded, counts.errored) == (0, 2, 2)
        assert ended.ended_at is not None
        assert ended.results_url.endswith(f"/anthropic/v1/messages/batches/{created.id}/results")

        results: dict[str, Any] = {
            r.custom_id: r.result for r in api.messages.batches.results(created.id)
        }
        assert set(results) == {"grass", "sea", "unknown", "streamed"}
        for custom_id, files in (("grass", {grass}), ("sea", {grass, sea})):
            result = results[custom_id]
            assert result.type == "succeeded", result
            citations = citations_of(result.message.content)
            assert citations, result.message
            for citation in citations:
                assert citation["citegate"]["verified"] is True, citation
                assert citation["citegate"]["document_id"] in files
                span = citation["citegate"]["span"]
                assert span["end_char"] > span["start_char"]
        unknown = results["unknown"]
        assert unknown.type == "errored"
        assert unknown.error.error.type == "not_found_error"
        assert "doc_missing" in unknown.error.error.message
        streamed = results["streamed"]
        assert streamed.type == "errored"
        assert streamed.error.error.type == "invalid_request_error"
        assert "stream" in streamed.error.error.message

        # The answers are stored: the batch is an answer batch of /v1 too.
        answers = httpx.get(f"{local.base_url}/v1/answer-batches/{created.id}/results").json()
        stored = {r["custom_id"]: r for r in answers["data"]}
        for custom_id in ("grass", "sea"):
            content: list[Any] = results[custom_id].message.content
            answer = stored[custom_id]["answer"]
            assert answer["text"] == "".join(b.text for b in content if b.type == "text")
            assert [
                # As the compatible API shows a span: without its PDF boxes.
                {
                    "document_id": c["document_id"],
                    "span": {k: v for k, v in c["span"].items() if k != "boxes"},
                    "verified": c["verified"],
                    "support": c["support"],
                }
                for segment in answer["segments"]
                for c in segment["citations"]
            ] == [citation["citegate"] for citation in citations_of(content)]

        second = api.messages.batches.create(requests=requests[2:])
        listed = api.messages.batches.list(limit=1)
        assert [b.id for b in listed.data] == [second.id]
        assert listed.has_more
        older = api.messages.batches.list(limit=5, after_id=second.id)
        assert [b.id for b in older.data] == [created.id]
        assert older.data[0].model_dump() == api.messages.batches.retrieve(created.id).model_dump()
        # Nothing went upstream: it is ended at once, its results all its own.
        assert second.processing_status == "ended"
        assert [r.result.type for r in api.messages.batches.results(second.id)] == ["errored"] * 2

        with pytest.raises(anthropic.NotFoundError):
            api.messages.batches.retrieve("batch_missing")
        with pytest.raises(anthropic.BadRequestError):
            api.messages.batches.create(requests=[requests[0], requests[0]])


def test_cancel(settings: Settings, fake: FakeUpstream, client: httpx.Client) -> None:
    fake.reset(Reply(200, message([])))
    with behind(settings, fake, **FAST) as app, sdk(app.base_url) as api:
        grass = api.files.upload(file=("grass.txt", GRASS.encode(), "text/plain")).id
        fake.new_batch = {"polls_before_end": 10**6}  # never ends unless canceled
        one = params(file_block(grass), question="Q?")
        created = api.messages.batches.create(
            requests=[{"custom_id": f"q{n}", "params": one} for n in range(3)]  # type: ignore[typeddict-item]
        )
        [upstream] = fake.batches.values()
        deadline = time.monotonic() + 30
        while f"/v1/messages/batches/{upstream.id}" not in fake.paths():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        # Results asked before the batch has ended: refused, as the Messages API refuses them.
        early = httpx.get(f"{app.base_url}/anthropic/v1/messages/batches/{created.id}/results")
        assert early.status_code == 409, early.text
        assert early.json()["error"]["type"] == "invalid_request_error"
        upstream.polls_before_end = upstream.polls + 1  # ends at the poll after the cancel
        canceling = api.messages.batches.cancel(created.id)
        assert canceling.processing_status == "canceling"
        assert canceling.cancel_initiated_at is not None
        ended = wait_ended(api, created.id)
        assert ended.request_counts.canceled == 3
        results = list(api.messages.batches.results(created.id))
        assert sorted(r.custom_id for r in results) == ["q0", "q1", "q2"]
        assert {r.result.type for r in results} == {"canceled"}
        # Results the upstream no longer has (kept 29 days): its error, not a cut stream.
        del fake.batches[upstream.id]
        with pytest.raises(anthropic.NotFoundError):
            list(api.messages.batches.results(created.id))
