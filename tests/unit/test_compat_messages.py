"""The Anthropic-compatible adapter's pure parts: parsing a request, caching breakpoints within
the limit, citations enriched in a relayed stream, errors in the Messages API's shape."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from app.compat.errors import messages_error
from app.compat.messages import (
    CitationRelay,
    InvalidBody,
    add_cache_control,
    parse_messages_request,
)
from app.errors import ErrorCode, InvalidRequest, NotFound, RateLimited, Unauthorized
from app.upstream.errors import UpstreamError, error_for_status
from app.upstream.stream import Frame
from app.upstream.wire import MAX_CACHE_BREAKPOINTS

FIVE_MINUTES = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}


def document(marked: dict[str, Any] | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "document", "source": {"type": "file", "file_id": "doc_x"}}
    if marked is not None:
        block["cache_control"] = dict(marked)
    return block


def marks(body: dict[str, Any]) -> list[Any]:
    """Every cache_control of the request, in the upstream's order: tools, system, messages,
    then a top-level automatic one (it caches up to the last block)."""
    found = []
    for listed in (body.get("tools") or [], body.get("system") or []):
        found += [b["cache_control"] for b in listed if b.get("cache_control")]
    for message in body["messages"]:
        found += [b["cache_control"] for b in message["content"] if b.get("cache_control")]
    return found + ([] if body.get("cache_control") is None else [body["cache_control"]])


def ttl_order_is_valid(body: dict[str, Any]) -> bool:
    """No 1h breakpoint after a 5m one: the upstream refuses that."""
    ttls = [mark.get("ttl", "5m") for mark in marks(body)]
    return "5m" not in ttls or "1h" not in ttls[ttls.index("5m") :]


def test_parsing_keeps_the_body_and_finds_every_document_in_order() -> None:
    body = {
        "model": "m",
        "max_tokens": 5,
        "future": {"x": [1]},
        "messages": [
            {"role": "user", "content": [document(), {"type": "text", "text": "Q1"}]},
            {"role": "assistant", "content": "A1"},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t", "content": [document()]},
                    {"type": "text", "text": "Q2"},
                ],
            },
        ],
    }
    parsed = parse_messages_request(orjson.dumps(body), create=True)
    assert parsed.body == body and not parsed.stream
    assert parsed.file_ids == ["doc_x", "doc_x"]
    assert parsed.documents[1] is parsed.body["messages"][2]["content"][0]["content"][0]
    assert parsed.question == "Q2"


@pytest.mark.parametrize(
    "raw",
    [b"[1]", b"{", b"\xff"],
)
def test_a_body_that_is_no_json_object(raw: bytes) -> None:
    with pytest.raises(InvalidBody):
        parse_messages_request(raw, create=True)


def test_create_needs_max_tokens_and_count_does_not() -> None:
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "Q"}]})
    assert parse_messages_request(body, create=False).question == "Q"
    with pytest.raises(ValidationError, match="max_tokens"):
        parse_messages_request(body, create=True)


marked_or_not = st.sampled_from([None, FIVE_MINUTES, HOUR])


@given(
    documents=st.lists(marked_or_not, min_size=0, max_size=12),
    system=st.lists(marked_or_not, max_size=2),
    automatic=st.booleans(),
)
def test_breakpoints_never_pass_four_nor_change_the_callers(
    documents: list[dict[str, Any] | None], system: list[dict[str, Any] | None], automatic: bool
) -> None:
    body: dict[str, Any] = {
        "system": [
            {"type": "text", "text": "S", **({"cache_control": m} if m else {})} for m in system
        ],
        "messages": [{"role": "user", "content": [document(m) for m in documents]}],
    }
    if automatic:
        body["cache_control"] = dict(FIVE_MINUTES)
    callers = len(marks(body))
    before = copy.deepcopy(body)
    add_cache_control(body, body["messages"][0]["content"])

    blocks = body["messages"][0]["content"]
    for was, now in zip(before["messages"][0]["content"], blocks, strict=True):
        if was.get("cache_control"):
            assert now == was  # the caller's stays as it was
    assert body["system"] == before["system"]
    assert len(marks(body)) == max(
        callers, min(MAX_CACHE_BREAKPOINTS, callers + documents.count(None))
    )
    if callers < MAX_CACHE_BREAKPOINTS and None in documents:
        last_unmarked = max(i for i, m in enumerate(documents) if m is None)
        assert blocks[last_unmarked].get("cache_control")
    if ttl_order_is_valid(before):  # what the upstream took, it still takes
        assert ttl_order_is_valid(body)


def test_a_citation_delta_gains_its_span_and_other_events_stay_as_sent() -> None:
    delta: dict[str, Any] = {
        "type": "content_block_delta",
        "index": 1,
        "delta": {"type": "citations_delta", "citation": {"type": "char_location", "x": 1}},
    }
    resolved = {"type": "char_location", "x": 1, "document_id": "doc_a", "span": None}
    resolved |= {"verified": False}
    frame = Frame("content_block_delta", orjson.dumps(delta).decode() + "  ", delta)
    ((name, data),) = CitationRelay().relayed(frame, [("citation", {"citation": resolved})])
    assert name == "content_block_delta"
    assert orjson.loads(data)["delta"]["citation"] == {
        "type": "char_location",
        "x": 1,
        "citegate": {"document_id": "doc_a", "span": None, "verified": False},
    }
    assert "citegate" not in delta["delta"]["citation"]  # what the answer stores is untouched
    ping = Frame("ping", '{"type": "ping"   }', {"type": "ping"})
    assert CitationRelay().relayed(ping, []) == [("ping", ping.data)]


def test_a_checked_citation_waits_for_its_blocks_text() -> None:
    citation = {"type": "char_location", "x": 1}
    delta = {"type": "content_block_delta", "index": 2}
    delta |= {"delta": {"type": "citations_delta", "citation": citation}}
    stop = {"type": "content_block_stop", "index": 2}
    relay = CitationRelay()
    assert (
        relay.relayed(Frame("content_block_delta", orjson.dumps(delta).decode(), delta), []) == []
    )
    support = {"verdict": "supported", "score": 1.0, "method": "lexical", "reasons": []}
    resolved = {**citation, "document_id": "doc_a", "span": None, "verified": True}
    resolved |= {"support": support}
    stop_frame = Frame("content_block_stop", orjson.dumps(stop).decode(), stop)
    sent = relay.relayed(stop_frame, [("citation", {"citation": resolved}), ("segment.done", {})])
    assert [name for name, _ in sent] == ["content_block_delta", "content_block_stop"]
    assert orjson.loads(sent[0][1]) == {
        "type": "content_block_delta",
        "index": 2,
        "delta": {
            "type": "citations_delta",
            "citation": {
                **citation,
                "citegate": {
                    "document_id": "doc_a",
                    "span": None,
                    "verified": True,
                    "support": support,
                },
            },
        },
    }
    assert sent[1][1] == stop_frame.data


INVALID = "invalid_request_error"


def answered(status: int, kind: str) -> UpstreamError:
    """The error for an upstream's error response of this status and type."""
    return error_for_status(status, "The upstream says no.", "req_1", 2, upstream_type=kind)


@pytest.mark.parametrize(
    ("error", "status", "kind"),
    [
        (Unauthorized(), 401, "authentication_error"),
        (NotFound("No document.", code=ErrorCode.DOCUMENT_NOT_FOUND), 404, "not_found_error"),
        (
            InvalidRequest("No text.", code=ErrorCode.DOCUMENT_NOT_CITABLE),
            400,
            "invalid_request_error",
        ),
        (RateLimited("Too many.", 7), 429, "rate_limit_error"),
        (
            error_for_status(529, "Overloaded", "req_1", 2, upstream_type="overloaded_error"),
            529,
            "overloaded_error",
        ),
        (
            error_for_status(404, "no model", "req_1", None, upstream_type="not_found_error"),
            404,
            "not_found_error",
        ),
        (
            error_for_status(401, "bad key", "req_1", None, upstream_type="authentication_error"),
            500,
            "api_error",
        ),
        (UpstreamError("Timed out.", code=ErrorCode.UPSTREAM_TIMEOUT), 504, "timeout_error"),
        (UpstreamError("Unreachable."), 500, "api_error"),
    ],
)
def test_errors_take_the_messages_api_types(error: Exception, status: int, kind: str) -> None:
    assert isinstance(error, InvalidRequest | NotFound | Unauthorized | RateLimited | UpstreamError)
    answer = messages_error(error)
    assert (answer.status, answer.type) == (status, kind)
    assert answer.body()["error"] == {"type": kind, "message": answer.message}
    if isinstance(error, RateLimited):
        assert answer.headers == {"Retry-After": "7"}
    if isinstance(error, UpstreamError) and error.request_id:
        assert answer.headers["request-id"] == answer.body()["request_id"] == "req_1"
