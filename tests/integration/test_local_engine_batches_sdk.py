"""The local engine's Message Batches API, served on loopback and driven by the official
``anthropic`` SDK (``client.messages.batches``): batches it creates, polls, lists, cancels and
reads the results of must parse into the SDK's types and follow the upstream's lifecycle."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from anthropic.types.messages import MessageBatch

from app.local_engine import LocalEngine, create_local_engine_app
from app.local_engine.batches import LocalBatches
from tests.conftest import Served

GRASS_SKY = "The grass is green. The sky is blue."


def served_engine(**batches: Any) -> Served:
    engine = LocalEngine()
    return Served(create_local_engine_app(engine, LocalBatches(engine, **batches)))


@pytest.fixture(scope="module")
def client() -> Iterator[anthropic.Anthropic]:
    with (
        served_engine() as engine,
        anthropic.Anthropic(base_url=engine.base_url, api_key="dummy", max_retries=0) as sdk,
    ):
        yield sdk


def params(question: str, **extra: Any) -> Any:  # the SDK's MessageCreateParams
    document = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": GRASS_SKY},
        "title": "Colours",
        "citations": {"enabled": True},
    }
    content = [document, {"type": "text", "text": question}]
    return {
        "model": "citegate-local-1",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": content}],
        **extra,
    }


def ended(client: anthropic.Anthropic, batch_id: str) -> MessageBatch:
    deadline = time.monotonic() + 60
    while True:
        batch = client.messages.batches.retrieve(batch_id)
        if batch.processing_status == "ended":
            return batch
        assert time.monotonic() < deadline, batch
        time.sleep(0.05)


def test_create_poll_list_and_read_the_results(client: anthropic.Anthropic) -> None:
    created = client.messages.batches.create(
        requests=[
            {"custom_id": "grass", "params": params("What color is the grass?")},
            {"custom_id": "bad", "params": params("Q?", temperature=0.5)},
        ]
    )
    assert created.id.startswith("msgbatch_")
    assert created.processing_status == "in_progress"
    assert created.request_counts.processing == 2
    assert created.results_url is None
    assert (created.expires_at - created.created_at).total_seconds() == 24 * 3600

    batch = ended(client, created.id)
    assert batch.request_counts.succeeded == 1
    assert batch.request_counts.errored == 1
    assert batch.results_url is not None and batch.ended_at is not None
    results = {
        result.custom_id: result.result for result in client.messages.batches.results(batch.id)
    }
    assert set(results) == {"grass", "bad"}
    grass = results["grass"]
    assert grass.type == "succeeded"
    cited = [
        c for block in grass.message.content if block.type == "text" for c in block.citations or []
    ]
    assert cited and cited[0].cited_text == "The grass is green. "
    bad = results["bad"]
    assert bad.type == "errored"
    assert bad.error.error.type == "invalid_request_error"
    assert "temperature" in bad.error.error.message

    listed = [b.id for b in client.messages.batches.list(limit=1)]
    assert created.id in listed


def test_a_batch_the_api_refuses_whole(client: anthropic.Anthropic) -> None:
    twice: list[Any] = [{"custom_id": "a", "params": params("Q?")}] * 2
    with pytest.raises(anthropic.BadRequestError, match="more than once"):
        client.messages.batches.create(requests=twice)
    with pytest.raises(anthropic.BadRequestError, match="custom_id"):
        client.messages.batches.create(
            requests=[{"custom_id": "no spaces", "params": params("Q?")}]
        )
    with pytest.raises(anthropic.NotFoundError):
        client.messages.batches.retrieve("msgbatch_missing")


def test_cancel(client: anthropic.Anthropic) -> None:
    # Processed a few dozen at a time: the cancel arrives while most are still to come.
    count = 1000
    requests: list[Any] = [
        {"custom_id": f"q{n}", "params": params("Is the sky blue?")} for n in range(count)
    ]
    created = client.messages.batches.create(requests=requests)
    canceling = client.messages.batches.cancel(created.id)
    assert canceling.processing_status in ("canceling", "ended")
    assert canceling.cancel_initiated_at is not None
    batch = ended(client, created.id)
    counts = batch.request_counts
    assert counts.canceled > 0
    assert counts.succeeded + counts.canceled == count
    kinds = [result.result.type for result in client.messages.batches.results(batch.id)]
    assert kinds.count("canceled") == counts.canceled
    assert len(kinds) == count


def test_expired() -> None:
    with (
        served_engine(lifetime=0.0) as engine,
        anthropic.Anthropic(base_url=engine.base_url, api_key="dummy", max_retries=0) as client,
    ):
        created = client.messages.batches.create(
            requests=[{"custom_id": f"q{n}", "params": params("Q?")} for n in range(3)]
        )
        batch = ended(client, created.id)
        assert batch.request_counts.expired == 3
        kinds = {result.result.type for result in client.messages.batches.results(batch.id)}
        assert kinds == {"expired"}
