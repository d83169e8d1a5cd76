"""Streamed answers: the events, the same stored answer as without streaming, and every way a
stream can end (upstream error event, dropped connection, malformed event, client gone)."""

from __future__ import annotations

import asyncio
import gc
import json
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse
from sqlalchemy import text
from sqlalchemy.pool import NullPool

from app.answers.relay import RelayedAnswer
from app.api.event_stream import EventStream
from app.db.engine import create_engine
from app.settings import Settings
from tests.conftest import Served, behind, count_rows
from tests.fake_upstream import (
    GRASS,
    GRASS_ANSWER,
    FakeUpstream,
    Reply,
    error,
    message,
    sse,
    sse_message,
)
from tests.fixture_files import FIXTURES


@pytest.fixture(scope="module")
def faked(settings: Settings, fake: FakeUpstream) -> Iterator[Served]:
    """Citegate in front of the fake upstream, with quick keep-alives."""
    with behind(settings, fake, sse_keepalive_seconds=0.3, upstream_read_timeout=5.0) as app:
        yield app


@pytest.fixture
def api(client: httpx.Client, faked: Served, fake: FakeUpstream) -> Iterator[httpx.Client]:
    fake.reset(Reply(500, {"type": "error"}))
    with httpx.Client(base_url=faked.base_url, timeout=30) as http:
        yield http


def stream(http: httpx.Client, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    with connect_sse(http, "POST", "/v1/answers", json={**body, "stream": True}) as source:
        assert source.response.status_code == 200, source.response.read()
        assert source.response.headers["content-type"].startswith("text/event-stream")
        return [(event.event, json.loads(event.data)) for event in source.iter_sse()]


def same_answer(streamed: dict[str, Any], whole: dict[str, Any]) -> None:
    """Equal but for ids and times."""
    differ = ("id", "created_at", "upstream")
    assert {k: v for k, v in streamed.items() if k not in differ} == {
        k: v for k, v in whole.items() if k not in differ
    }


def check_event_order(events: list[tuple[str, dict[str, Any]]]) -> None:
    names = [name for name, _ in events]
    assert names[0] == "answer.started" and names[-1] == "answer.done"
    open_segment = None
    seen_text: set[int] = set()  # the segments whose citations came
    for name, data in events[1:-1]:
        if name == "segment.started":
            assert open_segment is None
            open_segment = data["segment_index"]
        elif name in ("text.delta", "citation"):
            assert data["segment_index"] == open_segment
            if name == "citation":  # after their segment's text, with its support checked
                seen_text.add(open_segment)
                assert data["citation"]["support"]["method"] == "lexical"
            else:
                assert open_segment not in seen_text
        elif name == "segment.done":
            assert data["segment_index"] == open_segment
            open_segment = None


def test_local_engine_streamed_and_whole_answers_are_the_same(client: httpx.Client) -> None:
    document = client.post(
        "/v1/documents", json={"source": {"type": "text", "data": GRASS}, "title": "My Document"}
    ).json()
    body = {"question": "What color is the grass and sky?", "document_ids": [document["id"]]}
    events = stream(client, body)
    check_event_order(events)
    started, done = events[0][1], events[-1][1]
    assert started["id"] == done["id"] and started["model"] == "citegate-local-1"
    assert started["documents"] == done["documents"]
    assert client.get(f"/v1/answers/{done['id']}").json() == done
    text = "".join(d["text"] for name, d in events if name == "text.delta")
    assert text == done["text"]
    streamed_citations = [d["citation"] for name, d in events if name == "citation"]
    # The stored answer adds the spans' boxes, measured after the stream's citation events.
    stored = [{**c, "span": dict(c["span"])} for s in done["segments"] for c in s["citations"]]
    for citation in stored:
        assert citation["span"].pop("boxes") == []  # a text document
    assert streamed_citations == stored
    assert all(c["verified"] for c in streamed_citations) and streamed_citations
    whole = client.post("/v1/answers", json=body).json()
    same_answer(done, whole)


def test_recorded_web_search_stream_gives_the_same_answer(
    api: httpx.Client, fake: FakeUpstream
) -> None:
    document_id = api.post(
        "/v1/documents", json={"source": {"type": "text", "data": GRASS}}
    ).json()["id"]
    raw = (FIXTURES / "web_search_stream.sse").read_bytes()
    final = json.loads((FIXTURES / "web_search_stream_final.json").read_text())[
        "final_message_accumulated_by_anthropic_sdk_2_14_accumulate_event"
    ]
    fake.reset(Reply(events=[raw]))
    events = stream(api, {"question": "What is the news?", "document_ids": [document_id]})
    check_event_order(events)
    done = events[-1][1]
    assert done["status"] == "completed"
    web = [d["citation"] for name, d in events if name == "citation"]
    assert web and all(c["type"] == "web_search_result_location" for c in web)
    assert all(c["span"] is None and c["document_id"] is None for c in web)
    fake.reset(Reply(body=final))
    whole = api.post(
        "/v1/answers", json={"question": "What is the news?", "document_ids": [document_id]}
    ).json()
    same_answer(done, whole)
    assert done["usage"]["output_tokens"] == final["usage"]["output_tokens"]


def test_fixture_stream_in_small_pieces(api: httpx.Client, fake: FakeUpstream) -> None:
    """Events split anywhere across network reads still parse."""
    document_id = api.post(
        "/v1/documents", json={"source": {"type": "text", "data": GRASS}}
    ).json()["id"]
    raw = (FIXTURES / "web_search_stream.sse").read_bytes()
    fake.reset(Reply(events=[raw[i : i + 97] for i in range(0, len(raw), 97)]))
    events = stream(api, {"question": "News?", "document_ids": [document_id]})
    assert events[-1][0] == "answer.done"


def test_a_compressed_stream_is_read(api: httpx.Client, fake: FakeUpstream) -> None:
    """A stream the upstream (or a proxy before it) compressed is decoded, and gives the same
    answer as one sent as it is."""
    document_id = api.post(
        "/v1/documents", json={"source": {"type": "text", "data": GRASS}}
    ).json()["id"]
    ask = {"question": "Grass?", "document_ids": [document_id]}
    fake.reset(Reply(events=sse_message(GRASS_ANSWER)))
    plain = stream(api, ask)
    compressor = zlib.compressobj(wbits=31)  # gzip, flushed after each event as a proxy would
    pieces = [
        compressor.compress(event) + compressor.flush(zlib.Z_SYNC_FLUSH)
        for event in sse_message(GRASS_ANSWER)
    ] + [compressor.flush()]
    fake.reset(Reply(events=pieces, headers={"content-encoding": "gzip"}))
    compressed = stream(api, ask)
    assert [name for name, _ in compressed] == [name for name, _ in plain]
    assert compressed[-1][0] == "answer.done"
    same_answer(compressed[-1][1], plain[-1][1])


def _unescaped(event: bytes) -> bytes:
    """The event with its JSON's characters as UTF-8, as the real API sends them, not escaped."""
    name, data = event.decode().strip().split("\n")
    payload = json.loads(data.removeprefix("data: "))
    return f"{name}\ndata: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()


def test_characters_split_across_reads_arrive_whole(api: httpx.Client, fake: FakeUpstream) -> None:
    """An event stream is UTF-8: a character whose bytes come in two reads is one character."""
    text = "Grass is green \u2014 tr\u00e8s vert \U0001f331, \u8349\u662f\u7eff\u7684."
    raw = b"".join(_unescaped(event) for event in sse_message([{"type": "text", "text": text}]))
    assert len(raw) > len(raw.decode())  # characters of two, three and four bytes
    pieces = [raw[i : i + 5] for i in range(0, len(raw), 5)]
    fake.reset(Reply(events=pieces, pause=0.001))  # each piece a read of its own, mostly
    events = stream(api, {"question": "Colour?", "document_ids": [upload(api)]})
    assert "".join(data["text"] for name, data in events if name == "text.delta") == text
    assert events[-1][0] == "answer.done" and events[-1][1]["text"] == text


def test_an_ended_stream_keeps_no_copy_of_its_upstream_request(
    api: httpx.Client, fake: FakeUpstream
) -> None:
    # A request held in a reference cycle lives until a full garbage collection, which is rare
    # in a served process (GC_THRESHOLDS): a request holding its body kept every stream's
    # documents (hundreds of KB) in memory for thousands of streams.
    document = " ".join(["The grass is green."] * 20_000)  # 400 KB of documents sent
    document_id = api.post(
        "/v1/documents", json={"source": {"type": "text", "data": document}}
    ).json()["id"]
    raw = (FIXTURES / "web_search_stream.sse").read_bytes()
    gc.collect()  # nothing left from earlier tests
    gc.disable()  # what only a full collection would free must still be found below
    try:
        for _ in range(3):
            fake.reset(Reply(events=[raw]))
            assert stream(api, {"question": "News?", "document_ids": [document_id]})[-1][0] == (
                "answer.done"
            )
        # The client has read the end; the server may still be closing and storing the last.
        deadline = time.monotonic() + 5
        while (kept := upstream_requests_alive()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert kept == 0  # each went with its stream, in no cycle
    finally:
        gc.enable()


def upstream_requests_alive() -> int:
    """How many upstream requests are alive (a count: a list would keep them alive)."""
    return sum(
        1 for o in gc.get_objects() if isinstance(o, httpx.Request) and o.url.path == "/v1/messages"
    )


def test_an_ended_stream_keeps_nothing_of_its_answer(api: httpx.Client, fake: FakeUpstream) -> None:
    # The relay (the prepared request, its indexes, the upstream response) is freed by reference
    # counting as the stream ends. The response is left in reference cycles by sse-starlette's
    # tasks until a full collection, which is rare (GC_THRESHOLDS): it must hold nothing then.
    document_id = upload(api)
    raw = (FIXTURES / "web_search_stream.sse").read_bytes()
    gc.collect()  # what earlier tests left
    gc.disable()
    try:
        for _ in range(3):
            fake.reset(Reply(events=[raw]))
            assert stream(api, {"question": "News?", "document_ids": [document_id]})[-1][0] == (
                "answer.done"
            )
        # The client has read the end; the server may still be storing the last one.
        deadline = time.monotonic() + 5
        while (relays := relays_alive()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert relays == 0
        assert streams_holding_anything() == 0
    finally:
        gc.enable()


def relays_alive() -> int:
    return sum(1 for o in gc.get_objects() if isinstance(o, RelayedAnswer))


def streams_holding_anything() -> int:
    return sum(
        1
        for o in gc.get_objects()
        if isinstance(o, EventStream)
        and (o.content is not None or o.finish is not None or o.body_iterator is not None)
    )


def test_answer_done_is_the_stored_answer(api: httpx.Client, fake: FakeUpstream) -> None:
    """Citations the upstream sent without optional fields keep them out, in the stream's
    ``answer.done``, in getAnswer and in createAnswer alike."""
    document_id = upload(api)
    cited = {"type": "char_location", "cited_text": "The grass is green. ", "document_index": 0}
    bare = {**cited, "start_char_index": 0, "end_char_index": 20}  # no document_title
    content = [{"type": "text", "text": "Green.", "citations": [bare]}]
    fake.reset(Reply(events=sse_message(content)))
    events = stream(api, {"question": "Grass?", "document_ids": [document_id]})
    name, done = events[-1]
    assert name == "answer.done"
    [citation] = done["segments"][0]["citations"]
    assert "document_title" not in citation and citation["verified"] is True
    assert api.get(f"/v1/answers/{done['id']}").json() == done
    fake.reset(Reply(body=message(content)))
    whole = api.post("/v1/answers", json={"question": "Grass?", "document_ids": [document_id]})
    same_answer(done, whole.json())


def upload(api: httpx.Client) -> str:
    return str(
        api.post("/v1/documents", json={"source": {"type": "text", "data": GRASS}}).json()["id"]
    )


CITED = GRASS_ANSWER


def test_an_error_event_mid_stream_stores_a_failed_answer(
    api: httpx.Client, fake: FakeUpstream
) -> None:
    events = sse_message(CITED)
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    fake.reset(Reply(events=[*events[:6], sse("error", overloaded)]))
    relayed = stream(api, {"question": "Grass?", "document_ids": [upload(api)]})
    name, problem = relayed[-1]
    assert name == "error"
    assert problem["code"] == "upstream_overloaded" and problem["status"] == 503
    assert "answer.done" not in [n for n, _ in relayed]
    stored = api.get(f"/v1/answers/{relayed[0][1]['id']}").json()
    assert stored["status"] == "failed"
    assert stored["text"] == "".join(d["text"] for n, d in relayed if n == "text.delta")


@contextmanager
def answers_refused(
    database_url: str, question: str, *, when: str = "INSERT", status: str | None = None
) -> Iterator[None]:
    """Within: the database refuses to store an answer to ``question`` (a trigger raises), on
    ``when`` (INSERT: the row of a stream that begins; UPDATE: its end), and only for a row
    going to ``status`` if given."""
    condition = f"NEW.question = '{question}'"
    if status is not None:
        condition += f" AND NEW.status = '{status}'"
    if database_url.startswith("sqlite"):
        ddl = [
            f"CREATE TRIGGER refuse_answer BEFORE {when} ON answers "
            f"WHEN {condition} BEGIN SELECT RAISE(ABORT, 'refused'); END"
        ]
        undo = ["DROP TRIGGER refuse_answer"]
    else:
        ddl = [
            "CREATE FUNCTION refuse_answer() RETURNS trigger AS $$ BEGIN "
            f"IF {condition} THEN RAISE EXCEPTION 'refused'; END IF; "
            "RETURN NEW; END $$ LANGUAGE plpgsql",
            f"CREATE TRIGGER refuse_answer BEFORE {when} ON answers "
            "FOR EACH ROW EXECUTE FUNCTION refuse_answer()",
        ]
        undo = ["DROP TRIGGER refuse_answer ON answers", "DROP FUNCTION refuse_answer()"]

    async def run(statements: list[str]) -> None:
        engine = create_engine(database_url, poolclass=NullPool)
        async with engine.begin() as connection:
            for statement in statements:
                await connection.execute(text(statement))
        await engine.dispose()

    asyncio.run(run(ddl))
    try:
        yield
    finally:
        asyncio.run(run(undo))


def test_a_stream_whose_row_cannot_be_inserted_is_refused_before_it_begins(
    api: httpx.Client, fake: FakeUpstream, database_url: str
) -> None:
    """The row is inserted once the upstream has begun, before the first event: a database
    that refuses it refuses the stream as an ordinary error response, and nothing is stored."""
    fake.reset(Reply(events=sse_message(CITED)))
    document_id = upload(api)
    with answers_refused(database_url, "Refused?"):
        body = {"question": "Refused?", "document_ids": [document_id], "stream": True}
        refused = api.post("/v1/answers", json=body)
    assert refused.status_code == 500
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["code"] == "internal_error"
    deadline = time.monotonic() + 10
    while not fake.stream_closed.is_set():  # the upstream's stream is closed
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert count_rows(database_url, ("answers",)) == {"answers": 0}


def test_an_answer_that_cannot_be_stored_ends_the_stream_with_an_error(
    api: httpx.Client, fake: FakeUpstream, database_url: str
) -> None:
    """Its end refused, the stream ends with an error event; the row, in progress until then,
    is marked interrupted with the text that arrived (never left in progress, nor completed)."""
    fake.reset(Reply(events=sse_message(CITED)))
    with answers_refused(database_url, "Refused?", when="UPDATE", status="completed"):
        relayed = stream(api, {"question": "Refused?", "document_ids": [upload(api)]})
        names = [name for name, _ in relayed]
        assert names[0] == "answer.started" and "text.delta" in names
        assert names[-1] == "error" and "answer.done" not in names
        assert relayed[-1][1]["code"] == "internal_error" and relayed[-1][1]["status"] == 500
        answer_id = relayed[0][1]["id"]
        deadline = time.monotonic() + 20
        while (stored := api.get(f"/v1/answers/{answer_id}").json())["status"] == "in_progress":
            assert time.monotonic() < deadline, "the answer was left in progress"
            time.sleep(0.1)
    assert stored["status"] == "interrupted"
    assert stored["text"] == "".join(d["text"] for n, d in relayed if n == "text.delta")
    # The stream ended cleanly and the service goes on.
    assert (
        stream(api, {"question": "Grass?", "document_ids": [upload(api)]})[-1][0] == "answer.done"
    )


def test_a_dropped_connection_stores_a_failed_answer(api: httpx.Client, fake: FakeUpstream) -> None:
    fake.reset(Reply(events=sse_message(CITED)[:7], drop=True))
    relayed = stream(api, {"question": "Grass?", "document_ids": [upload(api)]})
    assert relayed[-1][0] == "error"
    assert relayed[-1][1]["code"] == "upstream_stream_interrupted"
    assert api.get(f"/v1/answers/{relayed[0][1]['id']}").json()["status"] == "failed"


def test_an_upstream_silent_mid_stream_times_out(settings: Settings, fake: FakeUpstream) -> None:
    """The read timeout holds for the body too: the upstream sends its first events a read
    each, then nothing for longer than ``upstream_read_timeout``; the stream ends with an
    error, stored."""
    fake.reset(Reply(events=sse_message(CITED)[:6], pause=0.05, silence=3))
    with (
        behind(settings, fake, upstream_read_timeout=1.0) as impatient,
        httpx.Client(base_url=impatient.base_url, timeout=30) as http,
    ):
        relayed = stream(http, {"question": "Grass?", "document_ids": [upload(http)]})
        stored = http.get(f"/v1/answers/{relayed[0][1]['id']}").json()
    assert "text.delta" in [name for name, _ in relayed]  # what came before the silence
    name, problem = relayed[-1]
    assert name == "error"
    assert problem["code"] == "upstream_timeout" and problem["status"] == 504
    assert stored["status"] == "failed"
    assert stored["text"] == "".join(d["text"] for n, d in relayed if n == "text.delta")


def test_a_stream_that_stops_early_is_not_a_complete_answer(
    api: httpx.Client, fake: FakeUpstream
) -> None:
    fake.reset(Reply(events=sse_message(CITED)[:-2]))  # no message_delta, no message_stop
    relayed = stream(api, {"question": "Grass?", "document_ids": [upload(api)]})
    assert relayed[-1][0] == "error"
    assert api.get(f"/v1/answers/{relayed[0][1]['id']}").json()["status"] == "failed"


def test_a_malformed_event_stores_a_failed_answer(api: httpx.Client, fake: FakeUpstream) -> None:
    events = sse_message(CITED)
    fake.reset(Reply(events=[*events[:4], b"event: content_block_delta\ndata: {not json\n\n"]))
    relayed = stream(api, {"question": "Grass?", "document_ids": [upload(api)]})
    assert relayed[-1][0] == "error"
    assert relayed[-1][1]["code"] == "upstream_bad_response"
    assert api.get(f"/v1/answers/{relayed[0][1]['id']}").json()["status"] == "failed"


def test_unknown_events_are_skipped(api: httpx.Client, fake: FakeUpstream) -> None:
    events = sse_message(CITED)
    odd = sse("thinking_progress", {"type": "thinking_progress", "tokens": 3})
    fake.reset(Reply(events=[events[0], odd, *events[1:]]))
    relayed = stream(api, {"question": "Grass?", "document_ids": [upload(api)]})
    assert relayed[-1][0] == "answer.done"
    assert relayed[-1][1]["text"] == "Based on the document, the grass is green"


def test_errors_before_the_stream_are_plain_problems_and_retried(
    api: httpx.Client, fake: FakeUpstream
) -> None:
    document_id = upload(api)
    busy = error(529, "overloaded_error", "Overloaded")
    busy.headers["retry-after-ms"] = "10"
    fake.reset(busy, Reply(events=sse_message(CITED)))
    assert (
        stream(api, {"question": "Grass?", "document_ids": [document_id]})[-1][0] == "answer.done"
    )
    assert len(fake.requests) == 2 and fake.requests[0].body["stream"] is True
    fake.reset(error(400, "invalid_request_error", "prompt is too long"))
    response = api.post(
        "/v1/answers", json={"question": "Grass?", "document_ids": [document_id], "stream": True}
    )
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "upstream_rejected"


def test_client_going_away_stops_the_upstream_and_stores_cancelled(
    api: httpx.Client, fake: FakeUpstream
) -> None:
    events = sse_message(CITED)
    slow = [*events[:6], *[sse("ping", {"type": "ping"})] * 100, *events[6:]]
    fake.reset(Reply(events=slow, pause=0.1))
    body = {"question": "Grass?", "document_ids": [upload(api)], "stream": True}
    with connect_sse(api, "POST", "/v1/answers", json=body) as source:
        first = next(source.iter_sse())
        answer_id = json.loads(first.data)["id"]
        left_at = time.monotonic()
    # The upstream stream is closed soon after, long before its 10 s of events are sent.
    deadline = time.monotonic() + 5
    while fake.stream_closed.is_set() is False and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fake.stream_closed.is_set() and not fake.stream_finished
    assert time.monotonic() - left_at < 3
    for _ in range(50):
        stored = api.get(f"/v1/answers/{answer_id}")
        if stored.status_code == 200:
            break
        time.sleep(0.05)
    assert stored.json()["status"] == "cancelled"


def test_keep_alive_comments_during_silence(api: httpx.Client, fake: FakeUpstream) -> None:
    events = sse_message(CITED)
    fake.reset(Reply(events=[events[0], b"", events[1], *events[2:]], pause=0.5))
    body = {"question": "Grass?", "document_ids": [upload(api)], "stream": True}
    with api.stream("POST", "/v1/answers", json=body) as response:
        lines = list(response.iter_lines())
    assert any(line.startswith(":") for line in lines)  # comments: ignored by SSE clients
    assert "event: answer.done" in lines
