"""Streamed answers: the events, the same stored answer as without streaming, and every way a
stream can end (upstream error event, dropped connection, malformed event, client gone)."""

from __future__ import annotations

import gc
import json
import time
import weakref
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse

from app.answers.relay import RelayedAnswer
from app.api.event_stream import EventStream
from app.settings import Settings
from tests.conftest import Served, behind
from tests.fake_upstream import GRASS, GRASS_ANSWER, FakeUpstream, Reply, error, sse, sse_message
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
    seen_text: set[int] = set()
    for name, data in events[1:-1]:
        if name == "segment.started":
            assert open_segment is None
            open_segment = data["segment_index"]
        elif name in ("text.delta", "citation"):
            assert data["segment_index"] == open_segment
            if name == "text.delta":
                seen_text.add(open_segment)
            else:  # citations arrive before the text of their segment
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
    # The request's body is the question's documents (hundreds of KB). A request may live on in
    # a reference cycle (the HTTP client's response holds its stream, which holds it) until the
    # garbage collector comes by; it must not keep its body all that while, for every stream.
    document = " ".join(["The grass is green."] * 20_000)  # 400 KB of documents sent
    document_id = api.post(
        "/v1/documents", json={"source": {"type": "text", "data": document}}
    ).json()["id"]
    raw = (FIXTURES / "web_search_stream.sse").read_bytes()
    gc.collect()  # nothing left from earlier tests
    gc.disable()  # the requests of the streams below stay alive, for a look at them
    try:
        for _ in range(3):
            fake.reset(Reply(events=[raw]))
            assert stream(api, {"question": "News?", "document_ids": [document_id]})[-1][0] == (
                "answer.done"
            )
        requests = upstream_requests()
        assert len(requests) >= 3
        assert sum(1 for request in requests if holds_its_body(request)) == 0
        del requests
    finally:
        gc.enable()


def upstream_requests() -> list[httpx.Request]:
    return [
        o for o in gc.get_objects() if isinstance(o, httpx.Request) and o.url.path == "/v1/messages"
    ]


def holds_its_body(request: httpx.Request) -> bool:
    try:
        return len(request.content) > 0
    except httpx.RequestNotRead:  # sent from an iterator: nothing kept
        return False


Answering = (EventStream, RelayedAnswer)  # for isinstance: the classes


def test_an_ended_stream_leaves_nothing_behind(api: httpx.Client, fake: FakeUpstream) -> None:
    # Neither the response nor its relay (the prepared request, its indexes, the upstream
    # response) outlives the stream once the garbage collector has been by.
    document_id = upload(api)
    raw = (FIXTURES / "web_search_stream.sse").read_bytes()
    gc.collect()  # what earlier tests left
    earlier = weakref.WeakSet(o for o in gc.get_objects() if isinstance(o, Answering))
    for _ in range(3):
        fake.reset(Reply(events=[raw]))
        assert stream(api, {"question": "News?", "document_ids": [document_id]})[-1][0] == (
            "answer.done"
        )
    # The client has read the end; the server may still be storing the last one.
    deadline = time.monotonic() + 5
    while (left := streams_and_relays_besides(earlier)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == []


def streams_and_relays_besides(
    earlier: weakref.WeakSet[EventStream | RelayedAnswer],
) -> list[str]:
    """The names of the streams and relays alive after a collection but for those in
    ``earlier``: only names, as a list of the objects would keep each alive for the next look."""
    gc.collect()
    return [
        type(o).__name__ for o in gc.get_objects() if isinstance(o, Answering) and o not in earlier
    ]


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
