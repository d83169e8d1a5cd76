"""The local engine refuses what the upstream refuses, with the upstream's error shape and text,
and accepts what it accepts (versions, auth headers), through the ASGI app in process."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from app.local_engine import MODEL_NAME
from tests.fixture_files import CORPUS
from tests.unit.local_engine.request_bodies import (
    GOOD,
    HEADERS,
    VERSION,
    body,
    pdf_document,
    text_document,
)


def _with(data: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    copy: dict[str, Any] = json.loads(json.dumps(data))
    change(copy)
    return copy


FIVE_CACHED = body(
    *(text_document(f"Doc {n}.", cache_control={"type": "ephemeral"}) for n in range(5)),
    question="?",
)


def _user_content(data: dict[str, Any]) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = data["messages"][0]["content"]
    return content


INVALID_REQUESTS: list[tuple[str, dict[str, Any] | bytes, str]] = [
    (
        "mixed citations",
        body(text_document("A."), text_document("B.", citations=False), question="?"),
        "citations must be enabled on all or none of the documents within a request",
    ),
    (
        "five cache_control blocks",
        FIVE_CACHED,
        "A maximum of 4 blocks with cache_control may be provided. Found 5.",
    ),
    (
        "six cache_control blocks, one at the top level",
        {**FIVE_CACHED, "cache_control": {"type": "ephemeral"}},
        "A maximum of 4 blocks with cache_control may be provided. Found 6.",
    ),
    (
        "1h after 5m",
        body(
            text_document("A.", cache_control={"type": "ephemeral"}),
            text_document("B.", cache_control={"type": "ephemeral", "ttl": "1h"}),
            question="?",
        ),
        "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block",
    ),
    ("temperature", {**GOOD, "temperature": 1.0}, "temperature: Extra inputs are not permitted"),
    ("top_p", {**GOOD, "top_p": 0.9}, "top_p: Extra inputs are not permitted"),
    ("top_k", {**GOOD, "top_k": 5}, "top_k: Extra inputs are not permitted"),
    (
        "empty text block",
        body(question=""),
        "messages: text content blocks must be non-empty",
    ),
    (
        "blank text block",
        body(question="  \n"),
        "messages: text content blocks must contain non-whitespace text",
    ),
    (
        "empty system block",
        {**GOOD, "system": [{"type": "text", "text": ""}]},
        "system: text content blocks must be non-empty",
    ),
    (
        "empty message",
        {**GOOD, "messages": [{"role": "user", "content": []}]},
        "messages.0: all messages must have non-empty content except for the optional final "
        "assistant message",
    ),
    (
        "document in an assistant turn",
        {
            **GOOD,
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": [text_document("A.")]},
                {"role": "user", "content": "And?"},
            ],
        },
        "messages.1.content.0: Input tag 'document' found using 'type' does not match any of the "
        "expected tags: 'image', 'text', 'bash_code_execution_tool_result', "
        "'code_execution_tool_result', 'container_upload', 'redacted_thinking', 'search_result', "
        "'server_tool_use', 'text_editor_code_execution_tool_result', 'thinking', 'tool_result', "
        "'tool_search_tool_result', 'tool_use', 'web_fetch_tool_result', 'web_search_tool_result'",
    ),
    (
        "citations on a user text block",
        _with(GOOD, lambda d: _user_content(d)[1].update(citations=[])),
        "messages.0.content.1.text.citations: Extra inputs are not permitted",
    ),
    (
        "unknown citation config key",
        _with(GOOD, lambda d: _user_content(d)[0].update(citations={"enabled": True, "x": 1})),
        "messages.0.content.0.document.citations.x: Extra inputs are not permitted",
    ),
    (
        "citation config that is not a boolean",
        _with(GOOD, lambda d: _user_content(d)[0].update(citations={"enabled": "yes"})),
        "messages.0.content.0.document.citations.enabled: Input should be a valid boolean",
    ),
    (
        "empty citation config",
        _with(GOOD, lambda d: _user_content(d)[0].update(citations={})),
        "messages.0.content.0.document.citations.enabled: Field required",
    ),
    ("missing model", _with(GOOD, lambda d: d.pop("model")), "model: Field required"),
    (
        "missing max_tokens",
        _with(GOOD, lambda d: d.pop("max_tokens")),
        "max_tokens: Field required",
    ),
    ("missing messages", _with(GOOD, lambda d: d.pop("messages")), "messages: Field required"),
    ("no messages", {**GOOD, "messages": []}, "messages: at least one message is required"),
    (
        "max_tokens of 0",
        {**GOOD, "max_tokens": 0},
        "max_tokens: Input should be greater than or equal to 1",
    ),
    (
        "unknown field",
        {**GOOD, "colour": "blue"},
        "colour: Extra inputs are not permitted",
    ),
    (
        "bad JSON",
        b"{not json",
        "The request body is not valid JSON: Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)",
    ),
    (
        "JSON that is not an object",
        b"[]",
        "Input should be a valid dictionary or object to extract fields from",
    ),
    (
        "PDF that is not base64",
        body(
            {
                "type": "document",
                "source": {"type": "base64", "media_type": "application/pdf", "data": "%%%"},
            },
            question="?",
        ),
        "The PDF specified was not valid.",
    ),
    (
        "encrypted PDF",
        body(pdf_document((CORPUS / "libreoffice-writer-password.pdf").read_bytes()), question="?"),
        "The PDF specified is password protected.",
    ),
    (
        "URL source",
        body(
            {"type": "document", "source": {"type": "url", "url": "https://example.test/a.pdf"}},
            question="?",
        ),
        "messages.0.content.0.document.source: the local engine cannot read 'url' sources; "
        "send the document itself (text, base64 PDF or content)",
    ),
]


@pytest.mark.parametrize(
    ("payload", "message"),
    [(payload, message) for _, payload, message in INVALID_REQUESTS],
    ids=[name for name, _, _ in INVALID_REQUESTS],
)
async def test_invalid_requests_get_the_upstream_error_shape(
    http: httpx.AsyncClient, payload: dict[str, Any] | bytes, message: str
) -> None:
    content = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    response = await http.post("/v1/messages", content=content, headers=HEADERS)
    assert response.status_code == 400
    request_id = response.headers["request-id"]
    assert request_id.startswith("req_")
    assert response.json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": message},
        "request_id": request_id,
    }


async def test_count_tokens_validates_the_same_way(http: httpx.AsyncClient) -> None:
    data = _with(FIVE_CACHED, lambda d: d.pop("max_tokens"))
    response = await http.post("/v1/messages/count_tokens", json=data, headers=HEADERS)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "A maximum of 4 blocks with cache_control may be provided. Found 5."
    )
    with_max_tokens = await http.post("/v1/messages/count_tokens", json=GOOD, headers=HEADERS)
    assert with_max_tokens.json()["error"]["message"] == (
        "max_tokens: Extra inputs are not permitted"
    )


async def test_missing_version_header_is_refused(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/messages", json=GOOD)
    assert response.status_code == 400
    assert response.json()["error"] == {
        "type": "invalid_request_error",
        "message": "anthropic-version: header is required",
    }


async def test_older_version_accepts_sampling_and_user_citations(http: httpx.AsyncClient) -> None:
    data = _with(GOOD, lambda d: _user_content(d)[1].update(citations=[]))
    data.update(temperature=0.0, top_p=1.0, top_k=5)
    headers = {**HEADERS, "anthropic-version": "2023-06-01"}
    response = await http.post("/v1/messages", json=data, headers=headers)
    assert response.status_code == 200
    assert response.json()["model"] == MODEL_NAME


async def test_bearer_auth_and_no_key_are_both_fine(http: httpx.AsyncClient) -> None:
    for headers in (
        {"anthropic-version": VERSION, "authorization": "Bearer sk-dummy"},
        {"anthropic-version": VERSION},
    ):
        response = await http.post("/v1/messages", json=GOOD, headers=headers)
        assert response.status_code == 200
        assert response.headers["request-id"].startswith("req_")


async def test_oversized_body_is_refused(http: httpx.AsyncClient) -> None:
    response = await http.post(
        "/v1/messages", content=b" " * (32 * 1024 * 1024 + 1), headers=HEADERS
    )
    assert response.status_code == 413
    assert response.json()["error"] == {
        "type": "request_too_large",
        "message": "Request exceeds the maximum allowed number of bytes.",
    }


async def test_unknown_path_is_a_not_found_error(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/complete", json={}, headers=HEADERS)
    assert response.status_code == 404
    assert response.json() == {
        "type": "error",
        "error": {"type": "not_found_error", "message": "Not Found"},
        "request_id": response.headers["request-id"],
    }
