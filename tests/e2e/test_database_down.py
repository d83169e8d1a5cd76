"""The database out of reach: every route that needs it answers 503 ``database_unavailable``
with ``Retry-After`` (the Anthropic-compatible routes the Messages API's 529
``overloaded_error``), ``/readyz`` says so and ``/healthz`` does not care; nothing answers
500; once the database is back the same requests succeed with no restart, and nothing
acknowledged is lost.

PostgreSQL is cut through a TCP proxy the test controls (``tests/tcp_proxy.py``): every
connection dropped, new ones refused; the shared server is never stopped.

SQLite has no server to lose: the service's one connection holds the file open, and through
a rename of its folder (or a permission taken away, which root ignores anyway) it goes on
reading and writing it. What can happen is a file the service cannot open when it must open
it again. The cut therefore moves the database's folder away and then drops the pool's
connection, as the pool drops it after a disconnect, so that the next request has to open
the file.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from sqlalchemy.engine import make_url
from starlette.types import ASGIApp, Receive, Scope, Send

from app.db.migrations import upgrade_to_head
from app.main import create_app
from app.settings import Settings
from tests.conftest import Served, fresh_database
from tests.fake_upstream import GRASS, GRASS_ANSWER, FakeUpstream, Reply, message, sse_message
from tests.tcp_proxy import TcpProxy

TEXT = "The grass is green. The sky is blue. Clouds are white."
QUESTION = "What colour is the grass?"


class Looped:
    """The app, noting the event loop that serves it, so that a test can run work there."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.loop: asyncio.AbstractEventLoop | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.loop = asyncio.get_running_loop()
        await self.app(scope, receive, send)


@dataclass
class Cuttable:
    """Citegate served on a database that the test can cut off and give back."""

    served: Served
    cut: Callable[[], None]
    restore: Callable[[], None]


@contextmanager
def cut_off(settings: Settings, database_url: str, folder: Path) -> Iterator[Cuttable]:
    """Citegate with these settings, served on a database that can be cut off: PostgreSQL's
    through a proxy, or a SQLite file of its own in ``folder``."""
    if database_url.startswith("postgresql"):
        target = make_url(database_url)
        with TcpProxy(target.host or "127.0.0.1", target.port or 5432) as proxy:
            via_proxy = target.set(host="127.0.0.1", port=proxy.port)
            app = create_app(
                settings.model_copy(
                    update={"database_url": via_proxy.render_as_string(hide_password=False)}
                )
            )
            with Served(app) as served:
                yield Cuttable(served, proxy.cut, proxy.restore)
        return

    data, away = folder / "data", folder / "away"
    url = f"sqlite+aiosqlite:///{data / 'citegate.db'}"
    fresh_database(url)
    upgrade_to_head(url)
    app = create_app(settings.model_copy(update={"database_url": url}))
    looped = Looped(app)

    def cut() -> None:
        data.rename(away)
        # The connection at rest first: one in use when its pool is dropped would be left open.
        pool = app.state.engine.sync_engine.pool
        deadline = time.monotonic() + 10
        while pool.checkedout() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert looped.loop is not None
        dropped = asyncio.run_coroutine_threadsafe(app.state.engine.dispose(), looped.loop)
        dropped.result(timeout=30)

    def restore() -> None:
        away.rename(data)

    with Served(looped) as served:
        yield Cuttable(served, cut, restore)


@pytest.fixture
def cuttable(
    client: httpx.Client, settings: Settings, database_url: str, tmp_path: Path
) -> Iterator[Cuttable]:
    """Citegate on the local engine, unlimited (the load test's pace), on a database that can
    be cut off."""
    unlimited = settings.model_copy(update={"rate_limit_per_minute": 0})
    with cut_off(unlimited, database_url, tmp_path) as cuttable:
        yield cuttable


def stored_before(http: httpx.Client) -> dict[str, Any]:
    """What the service acknowledged before the cut: a document, an answer about it, a
    conversation and a collection."""
    document = http.post("/v1/documents", json={"source": {"type": "text", "data": TEXT}})
    assert document.status_code == 201, document.text
    doc = document.json()
    answer = http.post("/v1/answers", json={"question": QUESTION, "document_ids": [doc["id"]]})
    assert answer.status_code == 200, answer.text
    conversation = http.post("/v1/conversations", json={"document_ids": [doc["id"]]})
    assert conversation.status_code == 201, conversation.text
    collection = http.post("/v1/collections", json={"name": "Before the cut"})
    assert collection.status_code == 201, collection.text
    return {
        "document": doc,
        "answer": answer.json(),
        "conversation": conversation.json(),
        "collection": collection.json(),
    }


def read_back(http: httpx.Client, before: dict[str, Any]) -> list[Any]:
    """What is read of the things stored before the cut."""
    paths = [
        f"/v1/documents/{before['document']['id']}",
        f"/v1/documents/{before['document']['id']}/chunks",
        f"/v1/answers/{before['answer']['id']}",
        f"/v1/conversations/{before['conversation']['id']}",
        f"/v1/collections/{before['collection']['id']}",
    ]
    read = [http.get(path) for path in paths]
    assert [response.status_code for response in read] == [200] * len(paths)
    return [response.json() for response in read]


def v1_requests(before: dict[str, Any]) -> list[tuple[str, str, dict[str, Any], int]]:
    """A request of each kind that needs the database (method, path, options, the status it
    gets when the database answers). The document given during the cut is given again after
    it: 201, a new document, shows that nothing of it was stored."""
    doc = before["document"]["id"]
    ask = {"question": QUESTION, "document_ids": [doc]}
    new_text = {"source": {"type": "text", "data": "Written while the database was away."}}
    upload = {"files": {"file": ("notes.txt", b"Uploaded while the database was away.")}}
    return [
        ("GET", "/v1/documents", {}, 200),
        ("GET", f"/v1/documents/{doc}", {}, 200),
        ("GET", f"/v1/documents/{doc}/content", {}, 200),
        ("GET", f"/v1/documents/{doc}/chunks", {}, 200),
        ("POST", "/v1/documents", {"json": new_text}, 201),
        ("POST", "/v1/documents/upload", upload, 201),
        ("POST", "/v1/answers", {"json": ask}, 200),
        ("POST", "/v1/answers", {"json": {**ask, "stream": True}}, 200),
        ("GET", f"/v1/answers/{before['answer']['id']}", {}, 200),
        ("POST", "/v1/answers/count-tokens", {"json": ask}, 200),
        ("POST", f"/v1/answers/{before['answer']['id']}/share-links", {"json": {}}, 201),
        ("POST", "/v1/conversations", {"json": {"document_ids": [doc]}}, 201),
        ("GET", f"/v1/conversations/{before['conversation']['id']}", {}, 200),
        ("POST", "/v1/collections", {"json": {"name": "After the cut"}}, 201),
        ("GET", "/v1/collections", {}, 200),
        ("POST", "/v1/search", {"json": {"query": "grass", "document_ids": [doc]}}, 200),
        ("POST", "/v1/answer-batches", {"json": {"requests": [{"custom_id": "q1", **ask}]}}, 201),
        ("GET", "/v1/answer-batches", {}, 200),
    ]


def anthropic_requests(before: dict[str, Any]) -> list[tuple[str, str, dict[str, Any], int]]:
    block = {
        "type": "document",
        "source": {"type": "file", "file_id": before["document"]["id"]},
        "citations": {"enabled": True},
    }
    message = {
        "model": "claude-sonnet-5",
        "max_tokens": 200,
        "messages": [{"role": "user", "content": [block, {"type": "text", "text": QUESTION}]}],
    }
    headers = {"x-api-key": "sk-any", "anthropic-version": "2023-06-01"}
    return [
        ("POST", "/anthropic/v1/messages", {"json": message, "headers": headers}, 200),
        ("GET", "/anthropic/v1/files", {"headers": headers}, 200),
    ]


def assert_unavailable(response: httpx.Response) -> None:
    where = f"{response.request.method} {response.request.url.path}"
    assert response.status_code == 503, (where, response.text)
    assert response.headers["content-type"] == "application/problem+json", where
    problem = response.json()
    assert problem["code"] == "database_unavailable", where
    assert problem["type"] == "urn:citegate:problem:database_unavailable"
    retry_after = int(response.headers["retry-after"])
    assert retry_after >= 1 and problem["retry_after"] == retry_after, where
    assert "postgres" not in response.text.lower() and "sqlite" not in response.text.lower()


def assert_overloaded(response: httpx.Response) -> None:
    """The Anthropic-compatible routes answer as the Messages API does when it cannot serve:
    529 ``overloaded_error`` (what Citegate's 503s are there), with ``retry-after``."""
    where = f"{response.request.method} {response.request.url.path}"
    assert response.status_code == 529, (where, response.text)
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "overloaded_error", where
    assert int(response.headers["retry-after"]) >= 1, where


def test_every_route_that_needs_the_database_answers_503_until_it_is_back(
    cuttable: Cuttable,
) -> None:
    with httpx.Client(base_url=cuttable.served.base_url, timeout=60) as http:
        before = stored_before(http)
        acknowledged = read_back(http, before)
        ours, compatible = v1_requests(before), anthropic_requests(before)
        cuttable.cut()
        # The first request meets the pooled connection the cut dropped (PostgreSQL), the
        # others a connection refused or a file that cannot be opened.
        for method, path, options, _ in ours:
            assert_unavailable(http.request(method, path, **options))
        for method, path, options, _ in compatible:
            assert_overloaded(http.request(method, path, **options))
        readiness = http.get("/readyz")
        assert readiness.status_code == 503
        assert readiness.json()["database"] == "unavailable"
        assert readiness.json()["status"] == "unavailable"
        assert http.get("/healthz").status_code == 200

        cuttable.restore()
        for method, path, options, status in ours + compatible:
            response = http.request(method, path, **options)
            assert response.status_code == status, (method, path, response.text)
            if options.get("json", {}).get("stream"):
                assert "event: answer.done" in response.text
        readiness = http.get("/readyz")
        assert readiness.status_code == 200 and readiness.json()["database"] == "ok"

        # Everything acknowledged before the cut is still there, as it was.
        assert read_back(http, before) == acknowledged


def test_a_cut_under_load_answers_503_and_loses_nothing_acknowledged(
    cuttable: Cuttable, database_url: str
) -> None:
    """Clients store documents and ask about them without pause while the database goes away
    and comes back (as a PostgreSQL restart does): every response is a success or a 503
    ``database_unavailable``, never a 500; every document and answer acknowledged is there
    afterwards, as acknowledged; and the service answers again soon after the database
    does."""
    if not database_url.startswith("postgresql"):
        pytest.skip(
            "SQLite has no server to restart under load: its cut drops the pool, which only a "
            "connection at rest leaves (see the module's docstring)"
        )
    numbers = itertools.count()
    seen: list[tuple[float, int, str]] = []  # (time, status, code) of each response
    documents: dict[str, str] = {}  # acknowledged: id -> text
    answers: dict[str, str] = {}  # acknowledged: id -> text

    async def worker(http: httpx.AsyncClient, until: float) -> None:
        while time.monotonic() < until:
            data = f"Load note {next(numbers)}: the grass is green."
            stored = await http.post(
                "/v1/documents", json={"source": {"type": "text", "data": data}}
            )
            note(stored)
            if stored.status_code != 201:
                continue
            documents[stored.json()["id"]] = data
            ask = {"question": QUESTION, "document_ids": [stored.json()["id"]]}
            answered = await http.post("/v1/answers", json=ask)
            note(answered)
            if answered.status_code == 200:
                answers[answered.json()["id"]] = answered.json()["text"]

    def note(response: httpx.Response) -> None:
        code = response.json().get("code", "") if response.status_code >= 400 else ""
        seen.append((time.monotonic(), response.status_code, code))

    async def load() -> tuple[float, float]:
        async with httpx.AsyncClient(base_url=cuttable.served.base_url, timeout=60) as http:
            start = time.monotonic()
            clients = asyncio.gather(*(worker(http, start + 4.0) for _ in range(4)))
            await asyncio.sleep(1.0)
            await asyncio.to_thread(cuttable.cut)
            cut_at = time.monotonic()
            await asyncio.sleep(1.0)
            await asyncio.to_thread(cuttable.restore)
            restored_at = time.monotonic()
            await clients
        return cut_at, restored_at

    cut_at, restored_at = asyncio.run(load())
    statuses = {(status, code) for _, status, code in seen}
    assert statuses <= {(200, ""), (201, ""), (503, "database_unavailable")}, statuses
    assert (503, "database_unavailable") in statuses  # the cut was met
    assert any(status < 300 for at, status, _ in seen if at < cut_at)
    recovered = [at for at, status, _ in seen if at > restored_at and status < 300]
    assert recovered and recovered[0] - restored_at < 5.0
    assert all(status < 300 for at, status, _ in seen if at > recovered[0] + 1.0)

    with httpx.Client(base_url=cuttable.served.base_url, timeout=60) as http:
        for document_id, data in documents.items():
            content = http.get(f"/v1/documents/{document_id}/content")
            assert content.status_code == 200 and content.text == data
        for answer_id, text in answers.items():
            answer = http.get(f"/v1/answers/{answer_id}")
            assert answer.status_code == 200 and answer.json()["text"] == text


def test_a_stream_whose_row_cannot_be_stored_is_refused_with_database_unavailable(
    client: httpx.Client, settings: Settings, database_url: str, tmp_path: Path
) -> None:
    """With the key and the documents trusted from memory (as by default, for a few seconds),
    a streamed answer opens without the database; its row, inserted once the upstream has
    begun and before the first event, cannot be: the stream is refused as an ordinary 503,
    and nothing is stored."""
    trusting = settings.model_copy(update={"recheck_seconds": 60})
    with (
        cut_off(trusting, database_url, tmp_path) as cuttable,
        httpx.Client(base_url=cuttable.served.base_url, timeout=60) as http,
    ):
        doc = http.post("/v1/documents", json={"source": {"type": "text", "data": TEXT}})
        ask = {"question": QUESTION, "document_ids": [doc.json()["id"]], "stream": True}
        assert "event: answer.done" in http.post("/v1/answers", json=ask).text
        cuttable.cut()
        assert_unavailable(http.post("/v1/answers", json=ask))
        cuttable.restore()
        assert "event: answer.done" in http.post("/v1/answers", json=ask).text
        answers = http.get(f"/v1/documents/{doc.json()['id']}")  # the service goes on
        assert answers.status_code == 200


def test_a_stream_that_cannot_store_its_end_is_interrupted_once_the_database_is_back(
    client: httpx.Client, settings: Settings, fake: FakeUpstream, database_url: str, tmp_path: Path
) -> None:
    """The database goes away in the middle of a stream: the stream ends with an ``error``
    event of ``database_unavailable``, and once the database is back its row, in progress
    until then, is marked interrupted with the text that arrived, never left in progress."""
    upstream = {
        "anthropic_api_key": SecretStr("sk-test"),
        "anthropic_base_url": fake.base_url,
        "recheck_seconds": 60,
    }
    with (
        cut_off(settings.model_copy(update=upstream), database_url, tmp_path) as cuttable,
        httpx.Client(base_url=cuttable.served.base_url, timeout=60) as http,
    ):
        doc = http.post("/v1/documents", json={"source": {"type": "text", "data": GRASS}})
        ask = {"question": QUESTION, "document_ids": [doc.json()["id"]], "stream": True}
        fake.reset(Reply(events=sse_message(GRASS_ANSWER), pause=0.1))
        seen = []
        with http.stream("POST", "/v1/answers", json=ask) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                seen.append(line)
                if line == "event: text.delta" and seen.count(line) == 1:
                    cuttable.cut()
        events = _events("\n".join([*seen, ""]))
        name, data = events[-1]
        assert name == "error" and data["code"] == "database_unavailable", events[-1]
        cuttable.restore()
        answer_id = events[0][1]["id"]
        deadline = time.monotonic() + 20
        while (stored := http.get(f"/v1/answers/{answer_id}").json())["status"] == "in_progress":
            assert time.monotonic() < deadline, "the answer was left in progress"
            time.sleep(0.2)
        assert stored["status"] == "interrupted"
        assert stored["text"] == "".join(
            data["text"] for name, data in events if name == "text.delta"
        )


def _events(text: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.split("\n") if line and not line.startswith(":")
        )
        if "event" in fields:
            events.append((fields["event"], json.loads(fields["data"])))
    return events


def test_a_follow_up_ended_while_the_database_was_away_frees_its_conversation(
    client: httpx.Client, settings: Settings, fake: FakeUpstream, database_url: str, tmp_path: Path
) -> None:
    """A follow-up holds its conversation while the upstream answers; the database goes away
    meanwhile, so neither the answer nor the conversation's release can be written (503).
    Once the database is back the conversation is freed by itself, long before its claim
    would expire: the next follow-up is answered, not refused as busy."""
    upstream = {
        "anthropic_api_key": SecretStr("sk-test"),
        "anthropic_base_url": fake.base_url,
    }
    with (
        cut_off(settings.model_copy(update=upstream), database_url, tmp_path) as cuttable,
        httpx.Client(base_url=cuttable.served.base_url, timeout=60) as http,
    ):
        doc = http.post("/v1/documents", json={"source": {"type": "text", "data": GRASS}})
        conversation = http.post("/v1/conversations", json={"document_ids": [doc.json()["id"]]})
        follow_up = {"question": QUESTION, "conversation_id": conversation.json()["id"]}
        fake.reset(Reply(200, message(GRASS_ANSWER)))
        assert http.post("/v1/answers", json=follow_up).status_code == 200

        fake.reset(Reply(200, message(GRASS_ANSWER), delay=1.5), Reply(200, message(GRASS_ANSWER)))
        with ThreadPoolExecutor(1) as pool:
            asked = pool.submit(http.post, "/v1/answers", json=follow_up)
            time.sleep(0.5)  # claimed, and waiting for the upstream
            cuttable.cut()
            assert_unavailable(asked.result())
        cuttable.restore()
        deadline = time.monotonic() + 10
        while (answered := http.post("/v1/answers", json=follow_up)).status_code == 409:
            assert time.monotonic() < deadline, "the conversation stayed busy"
            time.sleep(0.2)
        assert answered.status_code == 200, answered.text
        turns = http.get(f"/v1/conversations/{conversation.json()['id']}").json()["answers"]
        assert len(turns) == 2  # the first follow-up and the last; none of the cut
