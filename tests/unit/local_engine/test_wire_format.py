"""What the local engine sends: stream events in the upstream's order, the JSON message and the
SSE body over HTTP (through the ASGI app in process), and the error body."""

from __future__ import annotations

import json

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from app.local_engine import LocalEngine, create_local_engine_app
from app.local_engine.answering import INTRO
from app.local_engine.api_error import ApiError
from app.local_engine.streaming import message_events, split_text_deltas
from tests.unit.local_engine.request_bodies import (
    GOOD,
    GRASS_SKY,
    GRASS_SKY_QUESTION,
    HEADERS,
    answer,
    body,
    text_document,
)


@settings(max_examples=80, deadline=None)
@given(st.text(min_size=1, max_size=300))
def test_text_deltas_join_back_to_the_text(text: str) -> None:
    deltas = split_text_deltas(text)
    assert "".join(deltas) == text
    assert all(deltas)


def test_text_deltas_are_a_few_per_block() -> None:
    deltas = split_text_deltas("In 2023, Amazon's total revenue grew 12% year-over-year. ")
    assert 2 <= len(deltas) <= 4


def test_stream_events_follow_the_upstream_order(engine: LocalEngine) -> None:
    message = answer(engine, body(text_document(GRASS_SKY), question=GRASS_SKY_QUESTION))
    events = message_events(message, request_id="req_test")
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "ping"]
    assert events[1][1] == {"type": "ping"}
    assert names[-2:] == ["message_delta", "message_stop"]
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["input_tokens"] == message.usage.input_tokens
    for index, block in enumerate(message.content):
        own = [data for _, data in events if data.get("index") == index]
        assert own[0]["type"] == "content_block_start"
        assert own[-1]["type"] == "content_block_stop"
        deltas = [data["delta"] for data in own[1:-1]]
        kinds = [delta["type"] for delta in deltas]
        if block.citations:
            assert own[0]["content_block"] == {"type": "text", "text": "", "citations": []}
            assert kinds.index("text_delta") == len(block.citations)
            assert [d["citation"] for d in deltas if d["type"] == "citations_delta"] == [
                citation.model_dump(mode="json") for citation in block.citations
            ]
        else:
            assert own[0]["content_block"] == {"type": "text", "text": ""}
            assert "citations_delta" not in kinds
        assert "".join(d["text"] for d in deltas if d["type"] == "text_delta") == block.text
    final = events[-2][1]
    assert final["delta"]["stop_reason"] == "end_turn"
    assert final["usage"]["output_tokens"] == message.usage.output_tokens


def test_stream_fault_breaks_off_with_an_overloaded_error(engine: LocalEngine) -> None:
    message = answer(engine, body(text_document(GRASS_SKY), question=GRASS_SKY_QUESTION))
    events = message_events(message, request_id="req_test", fail_after_blocks=1)
    assert events[-1] == (
        "error",
        {
            "type": "error",
            "error": {"type": "overloaded_error", "message": "Overloaded"},
            "request_id": "req_test",
        },
    )
    assert [name for name, _ in events].count("content_block_stop") == 1
    assert "message_stop" not in [name for name, _ in events]


async def test_json_answer_has_the_upstream_message_shape(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/messages", json=GOOD, headers=HEADERS)
    assert response.status_code == 200
    data = response.json()
    assert list(data) == [
        "id",
        "type",
        "role",
        "model",
        "content",
        "stop_reason",
        "stop_sequence",
        "stop_details",
        "usage",
    ]
    assert data["id"].startswith("msg_01") and len(data["id"]) == 28
    assert data["content"][0] == {"type": "text", "text": INTRO}  # uncited: no citations key
    assert data["usage"] == {
        "input_tokens": 20,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "output_tokens": data["usage"]["output_tokens"],
        "service_tier": "standard",
    }


def parse_sse(raw: str) -> list[tuple[str, str]]:
    """(event, data) pairs of an SSE body, by the spec's line rules."""
    events = []
    for chunk in raw.split("\n\n"):
        if not chunk.strip():
            continue
        fields = dict(line.split(": ", 1) for line in chunk.split("\n"))
        events.append((fields["event"], fields["data"]))
    return events


async def test_stream_over_http_is_the_upstream_wire_format(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/messages", json={**GOOD, "stream": True}, headers=HEADERS)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert response.headers["request-id"].startswith("req_")
    assert "\r" not in response.text
    events = parse_sse(response.text)
    assert events[1] == ("ping", '{"type": "ping"}')
    assert (events[0][0], events[-1][0]) == ("message_start", "message_stop")
    for name, data in events:
        assert json.loads(data)["type"] == name


async def test_stream_lines_survive_a_client_that_splits_on_unicode_line_breaks(
    http: httpx.AsyncClient,
) -> None:
    data = "The grass is green.\u2028Really green. The sky is blue."
    request = body(text_document(data), question="Is the grass green?", stream=True)
    response = await http.post("/v1/messages", json=request, headers=HEADERS)
    # httpx's iter_lines splits like str.splitlines(), U+2028 included.
    lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    events = [json.loads(line.removeprefix("data: ")) for line in lines]
    cited = [
        event["delta"]["citation"]["cited_text"]
        for event in events
        if event["type"] == "content_block_delta" and event["delta"]["type"] == "citations_delta"
    ]
    assert cited == ["The grass is green.\u2028"]


async def test_stream_fault_arrives_as_an_error_event_after_200() -> None:
    app = create_local_engine_app(LocalEngine(fail_streams_after_blocks=2))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://engine") as client:
        response = await client.post("/v1/messages", json={**GOOD, "stream": True}, headers=HEADERS)
    assert response.status_code == 200
    name, data = parse_sse(response.text)[-1]
    assert name == "error"
    assert json.loads(data) == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
        "request_id": response.headers["request-id"],
    }


def test_api_error_body_is_the_upstream_shape() -> None:
    assert ApiError(529, "overloaded_error", "Overloaded").body("req_x") == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
        "request_id": "req_x",
    }
