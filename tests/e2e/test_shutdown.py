"""Graceful shutdown of `citegate serve`: on SIGTERM the listening socket closes, requests in
flight finish (for at most --graceful-timeout seconds, then they are cancelled), and the process
exits 0."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from httpx_sse import connect_sse

from tests.conftest import Served, free_port
from tests.fake_upstream import FakeUpstream, Reply, message, sse_message

CITEGATE = shutil.which("citegate", path=str(Path(sys.executable).parent))


class CitegateProcess:
    """`citegate serve` (or any citegate command line) in a subprocess on a fresh SQLite
    database, its output collected line by line."""

    def __init__(self, tmp_path: Path, argv: list[str], env: dict[str, str]) -> None:
        assert CITEGATE, "the citegate console script is installed next to this Python"
        base = {
            k: v for k, v in os.environ.items() if not k.startswith(("CITEGATE_", "ANTHROPIC_"))
        }
        base["CITEGATE_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp_path}/served/citegate.db"
        base["CITEGATE_LOG_LEVEL"] = "INFO"
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [CITEGATE, *argv],
            env={**base, **env},
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for_output(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            assert time.monotonic() < deadline, f"no {text!r} in:\n{self.output}"
            time.sleep(0.02)

    def wait_until_healthy(self, base_url: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(f"{base_url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert self.process.poll() is None, f"citegate exited:\n{self.output}"
            assert time.monotonic() < deadline, f"citegate did not start:\n{self.output}"
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=20)
        self.reader.join(timeout=5)
        if self.process.stdout is not None:
            self.process.stdout.close()


class Citegate(CitegateProcess):
    """`citegate serve` on a free loopback port, answering through the given upstream."""

    def __init__(self, tmp_path: Path, upstream_url: str, *options: str) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        super().__init__(
            tmp_path,
            ["serve", "--port", str(self.port), *options],
            {
                "ANTHROPIC_API_KEY": "sk-ant-dummy-for-tests",
                "ANTHROPIC_BASE_URL": upstream_url,
                "CITEGATE_UPSTREAM_MAX_ATTEMPTS": "1",
            },
        )
        self.wait_until_healthy(self.base_url)


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream()
    with Served(fake.app) as served:
        fake.base_url = served.base_url
        yield fake
        served.server.force_exit = True  # do not wait for a reply still sleeping


@pytest.fixture
def citegate(tmp_path: Path, upstream: FakeUpstream) -> Iterator[Callable[..., Citegate]]:
    started: list[Citegate] = []

    def start(*options: str) -> Citegate:
        server = Citegate(tmp_path, upstream.base_url, *options)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def upload(server: Citegate) -> str:
    uploaded = httpx.post(
        f"{server.base_url}/v1/documents/upload",
        files={"file": ("grass.txt", b"The grass is green. The sky is blue.")},
        timeout=10,
    )
    assert uploaded.status_code == 201, uploaded.text
    return str(uploaded.json()["id"])


def ask_in_background(
    server: Citegate, stream: bool = False
) -> tuple[threading.Thread, list[object]]:
    """Upload a document, then ask about it in a thread; the result list gets the response (read
    whole) or the transport error."""
    document_id = upload(server)
    result: list[object] = []

    def ask() -> None:
        try:
            result.append(
                httpx.post(
                    f"{server.base_url}/v1/answers",
                    json={
                        "question": "What colour is the grass?",
                        "document_ids": [document_id],
                        "stream": stream,
                    },
                    timeout=30,
                )
            )
        except httpx.TransportError as exc:
            result.append(exc)

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    return thread, result


def wait_for_upstream_request(upstream: FakeUpstream, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not upstream.requests:
        assert time.monotonic() < deadline, "the question never reached the upstream"
        time.sleep(0.02)


def test_sigterm_drains_in_flight_requests_refuses_new_ones_and_exits_0(
    citegate: Callable[..., Citegate], upstream: FakeUpstream
) -> None:
    upstream.reset(Reply(body=message([{"type": "text", "text": "Green."}]), delay=2.0))
    server = citegate("--graceful-timeout", "10")
    thread, result = ask_in_background(server)
    wait_for_upstream_request(upstream)  # the answer is now in flight, for about 2 s

    signalled = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    server.wait_for_output("Shutting down", timeout=5)
    time.sleep(0.1)
    # Draining: the process is alive and the answer still pending, yet new connections fail.
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{server.base_url}/healthz", timeout=2)
    assert server.process.poll() is None and thread.is_alive(), server.output

    thread.join(timeout=15)
    (response,) = result
    assert isinstance(response, httpx.Response), response
    assert response.status_code == 200, response.text
    assert response.json()["text"] == "Green." and response.json()["status"] == "completed"

    assert server.process.wait(timeout=10) == 0, server.output
    elapsed = time.monotonic() - signalled
    assert 1.0 < elapsed < 10, elapsed  # it waited for the answer, not for the whole timeout
    assert len(upstream.requests) == 1


def test_sigterm_lets_a_stream_in_flight_finish(
    citegate: Callable[..., Citegate], upstream: FakeUpstream
) -> None:
    """sse-starlette would end every stream at once on SIGTERM; serve lets them finish."""
    events = sse_message([{"type": "text", "text": "The grass is green."}])
    upstream.reset(Reply(events=events, pause=2.5 / len(events)))
    server = citegate("--graceful-timeout", "10")
    document_id = upload(server)
    received: list[str] = []
    failures: list[BaseException] = []

    def listen() -> None:
        body = {"question": "Grass?", "document_ids": [document_id], "stream": True}
        try:
            with (
                httpx.Client(base_url=server.base_url, timeout=30) as http,
                connect_sse(http, "POST", "/v1/answers", json=body) as source,
            ):
                assert source.response.status_code == 200
                received.extend(event.event for event in source.iter_sse())
        except Exception as exc:
            failures.append(exc)

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    wait_for_upstream_request(upstream)
    time.sleep(0.3)  # a few events are out
    server.process.send_signal(signal.SIGTERM)
    thread.join(timeout=15)
    assert not failures, failures
    assert received[0] == "answer.started" and received[-1] == "answer.done", received
    assert "text.delta" in received
    assert server.process.wait(timeout=10) == 0, server.output


@pytest.mark.parametrize("stream", [False, True], ids=["request", "stream"])
def test_a_stuck_request_is_cut_after_the_graceful_timeout(
    citegate: Callable[..., Citegate], upstream: FakeUpstream, stream: bool
) -> None:
    if stream:  # the first events, then nothing for 12 s
        upstream.reset(Reply(events=sse_message([{"type": "text", "text": "Late."}]), pause=12))
    else:
        upstream.reset(Reply(body=message([{"type": "text", "text": "Too late."}]), delay=12.0))
    server = citegate("--graceful-timeout", "1")
    thread, result = ask_in_background(server, stream=stream)
    wait_for_upstream_request(upstream)

    signalled = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=8) == 0, server.output
    elapsed = time.monotonic() - signalled
    assert 0.9 < elapsed < 6, elapsed  # cut after about 1 s, long before the upstream replies
    thread.join(timeout=5)
    (outcome,) = result
    # The cancelled request gets a 500 or a connection closed mid-body; never a whole answer.
    assert isinstance(outcome, httpx.TransportError) or (
        isinstance(outcome, httpx.Response) and outcome.status_code >= 500
    ), outcome
    server.reader.join(timeout=5)
    assert "timeout graceful shutdown exceeded" in server.output


def test_sigterm_when_idle_exits_0_at_once(citegate: Callable[..., Citegate]) -> None:
    server = citegate()  # the default graceful timeout: 30 s
    signalled = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=10) == 0, server.output
    assert time.monotonic() - signalled < 5
