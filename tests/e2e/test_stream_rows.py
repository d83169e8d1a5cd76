"""A stream's answer exists from its start: ``in_progress`` with the text that has arrived while
it streams, then ``completed`` (or failed, cancelled) as before; ``interrupted`` with what had
arrived when the process relaying it is killed, marked after a restart; never a stream of a live
process. Over real HTTP, on the database the suite runs on, with the fake upstream trickling."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.settings import Settings
from tests.conftest import behind, free_port
from tests.e2e.test_shutdown import CitegateProcess
from tests.fake_upstream import GRASS, FakeUpstream, Reply, sse_message

# Twenty blocks of text, each sent as two deltas: with a pause between events, a stream of
# several seconds.
WORDS = [f"Sentence {n} of a long answer. " for n in range(20)]
LONG = [{"type": "text", "text": words} for words in WORDS]


class Reader:
    """A stream read in a thread of its own: its events as they arrive, each with its time."""

    def __init__(self, base_url: str, path: str, body: dict[str, Any]) -> None:
        self.events: list[tuple[float, str, str]] = []  # (monotonic time, event, data)
        self.status: int | None = None
        self.headers: httpx.Headers | None = None
        self._thread = threading.Thread(target=self._read, args=(base_url, path, body))
        self._thread.start()

    def _read(self, base_url: str, path: str, body: dict[str, Any]) -> None:
        try:
            with (
                httpx.Client(base_url=base_url, timeout=60) as http,
                http.stream("POST", path, json=body) as response,
            ):
                self.status, self.headers = response.status_code, response.headers
                event = None
                for line in response.iter_lines():
                    if line.startswith("event: "):
                        event = line.removeprefix("event: ")
                    elif line.startswith("data: ") and event is not None:
                        self.events.append((time.monotonic(), event, line.removeprefix("data: ")))
        except httpx.HTTPError:
            pass  # the service was killed under it

    def wait_for(self, count: int, event: str = "text.delta", timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while sum(name == event for _, name, _ in self.events) < count:
            assert time.monotonic() < deadline, f"fewer than {count} {event} events came"
            assert self._thread.is_alive() or self.status is not None
            time.sleep(0.02)

    def texts(self, before: float = float("inf")) -> str:
        """The text of the ``text.delta`` events that came before ``before``."""
        return "".join(
            json.loads(data)["text"]
            for at, name, data in self.events
            if name == "text.delta" and at < before
        )

    def join(self, timeout: float = 60) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive()


def poll(http: httpx.Client, path: str, until: Any, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        got = http.get(path)
        assert got.status_code == 200, got.text
        if until(got.json()):
            return got.json()  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, got.json()
        time.sleep(0.1)


@pytest.fixture
def slow(client: httpx.Client, settings: Settings, fake: FakeUpstream) -> Iterator[str]:
    """Citegate behind the fake upstream; the base URL."""
    with behind(settings, fake, stream_lease_seconds=1.0) as app:
        yield app.base_url


def test_a_streams_answer_is_in_progress_with_the_text_so_far_then_completed(
    slow: str, fake: FakeUpstream
) -> None:
    with httpx.Client(base_url=slow, timeout=30) as http:
        document = http.post("/v1/documents", json={"source": {"type": "text", "data": GRASS}})
        conversation = http.post(
            "/v1/conversations", json={"document_ids": [document.json()["id"]]}
        ).json()
        fake.reset(Reply(events=sse_message(LONG), pause=0.1))
        body = {"question": "Tell me.", "conversation_id": conversation["id"], "stream": True}
        reader = Reader(slow, "/v1/answers", body)
        reader.wait_for(1, "answer.started")
        answer_id = json.loads(reader.events[0][2])["id"]
        path = f"/v1/answers/{answer_id}"
        first = http.get(path).json()
        assert first["status"] == "in_progress"
        assert first["question"] == "Tell me." and first["conversation_id"] == conversation["id"]
        # Text that arrived more than a save's interval (and one tick) ago is in the row.
        reader.wait_for(12)
        later = poll(http, path, lambda answer: answer["text"] != "")
        assert later["status"] == "in_progress"
        assert reader.texts().startswith(later["text"])
        assert later["segments"] and later["segments"][0]["text"] == WORDS[0]
        turns = http.get(f"/v1/conversations/{conversation['id']}").json()["answers"]
        assert [turn["status"] for turn in turns] == ["in_progress"]
        # The conversation is busy while its follow-up streams.
        busy = http.post(
            "/v1/answers", json={"question": "And?", "conversation_id": conversation["id"]}
        )
        assert busy.status_code == 409
        reader.join()
        name, data = reader.events[-1][1:]
        assert name == "answer.done"
        done = json.loads(data)
        assert done["status"] == "completed" and done["text"] == "".join(WORDS)
        assert http.get(path).json() == done  # never completed with less


def test_the_compatible_api_streams_an_answer_in_progress(slow: str, fake: FakeUpstream) -> None:
    with httpx.Client(base_url=slow, timeout=30) as http:
        fake.reset(Reply(events=sse_message(LONG), pause=0.1))
        body = {
            "model": "claude-sonnet-5",
            "max_tokens": 1024,
            "stream": True,
            "messages": [{"role": "user", "content": "Tell me."}],
        }
        reader = Reader(slow, "/anthropic/v1/messages", body)
        reader.wait_for(1, "message_start")
        assert reader.headers is not None
        path = f"/v1/answers/{reader.headers['citegate-answer-id']}"
        assert http.get(path).json()["status"] == "in_progress"
        reader.join()
        assert poll(http, path, lambda a: a["status"] != "in_progress")["status"] == "completed"
        assert http.get(path).json()["text"] == "".join(WORDS)


def test_a_live_stream_of_another_process_is_never_marked(
    slow: str, settings: Settings, fake: FakeUpstream
) -> None:
    """Another process starting, and sweeping again and again, on the same database, leaves
    the stream of a live one alone: it owns it, and says so."""
    with httpx.Client(base_url=slow, timeout=30) as http:
        document_id = http.post(
            "/v1/documents", json={"source": {"type": "text", "data": GRASS}}
        ).json()["id"]
        fake.reset(Reply(events=sse_message(LONG), pause=0.1))
        body = {"question": "Tell me.", "document_ids": [document_id], "stream": True}
        reader = Reader(slow, "/v1/answers", body)
        reader.wait_for(1, "answer.started")
        path = f"/v1/answers/{json.loads(reader.events[0][2])['id']}"
        with (
            behind(settings, fake, stream_lease_seconds=1.0) as other,
            httpx.Client(base_url=other.base_url, timeout=30) as elsewhere,
        ):
            statuses = set()
            while reader._thread.is_alive():
                statuses.add(elsewhere.get(path).json()["status"])
                time.sleep(0.1)
        reader.join()
        assert statuses <= {"in_progress", "completed"} and "in_progress" in statuses
        assert http.get(path).json()["status"] == "completed"


@contextmanager
def service(tmp_path: Path, env: dict[str, str], port: int) -> Iterator[CitegateProcess]:
    """``citegate serve`` in a process of its own, started; killed at the end if alive."""
    process = CitegateProcess(tmp_path, ["serve", "--port", str(port)], env)
    try:
        process.wait_until_healthy(f"http://127.0.0.1:{port}")
        yield process
    finally:
        process.stop()


def test_a_stream_cut_by_kill_9_is_interrupted_with_its_text_after_a_restart(
    client: httpx.Client, database_url: str, fake: FakeUpstream, tmp_path: Path
) -> None:
    env = {
        "CITEGATE_DATABASE_URL": database_url,
        "ANTHROPIC_API_KEY": "sk-test",
        "ANTHROPIC_BASE_URL": fake.base_url,
        "CITEGATE_STREAM_LEASE_SECONDS": "2",
    }
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=base, timeout=30) as http:
        with service(tmp_path, env, port) as first:
            document_id = http.post(
                "/v1/documents", json={"source": {"type": "text", "data": GRASS}}
            ).json()["id"]
            conversation_id = http.post(
                "/v1/conversations", json={"document_ids": [document_id]}
            ).json()["id"]
            fake.reset(Reply(events=sse_message(LONG), pause=0.15))
            body = {"question": "Tell me.", "conversation_id": conversation_id, "stream": True}
            reader = Reader(base, "/v1/answers", body)
            reader.wait_for(16)
            time.sleep(0.5)
            first.process.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            first.process.wait(timeout=10)
            reader.join()
        received = reader.texts()
        assert received and received != "".join(WORDS)
        path = f"/v1/answers/{json.loads(reader.events[0][2])['id']}"
        with service(tmp_path, env, port):
            answer = poll(http, path, lambda a: a["status"] != "in_progress", timeout=20)
            assert answer["status"] == "interrupted"
            # What had arrived up to two saves' intervals before the kill is there, and
            # nothing that did not arrive.
            assert received.startswith(answer["text"])
            assert answer["text"].startswith(reader.texts(before=killed_at - 2.0))
            assert len(answer["text"]) >= len(WORDS[0]) * 4
            # Its conversation is free again: the next follow-up is answered.
            fake.reset(Reply(events=sse_message(LONG[:1])))
            again = http.post(
                "/v1/answers", json={**body, "question": "Again?"}, headers={}, timeout=30
            )
            assert again.status_code == 200 and "event: answer.done" in again.text
            turns = http.get(f"/v1/conversations/{conversation_id}").json()["answers"]
            assert [turn["status"] for turn in turns] == ["interrupted", "completed"]
