"""Bodies that cannot be read, through real HTTP: a JSON body that is not JSON or not UTF-8, and
a multipart upload that is broken or cut short, are 400 ``malformed_body`` on every route that
takes a body (and ``invalid_request_error`` 400 under /anthropic); nothing is stored; a body that
is read but whose fields are wrong is still a 422."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.auth.scopes import ALL_SCOPES
from tests.conftest import count_rows
from tests.e2e.test_auth import make_key
from tests.e2e.test_documents import NOTHING, assert_problem

SPEC = json.loads((Path(__file__).parents[2] / "openapi.json").read_text())
JSON = {"content-type": "application/json"}
BOUNDARY = b"citegate-boundary"
MULTIPART = {"content-type": f"multipart/form-data; boundary={BOUNDARY.decode()}"}
ANTHROPIC = {"x-api-key": "sk-any", "anthropic-version": "2023-06-01"}
QUESTION = {"question": "Pourquoi le ciel est-il bleu ? Ça dépend.", "document_ids": ["doc_x"]}


def json_operations() -> Iterator[tuple[str, tuple[str, str]]]:
    """(operationId, (method, path with its parameters filled)) of every operation with a
    JSON body."""
    for path, operations in SPEC["paths"].items():
        for method, operation in operations.items():
            if "application/json" in operation.get("requestBody", {}).get("content", {}):
                filled = (
                    path.replace("{answer_id}", "ans_missing")
                    .replace("{collection_id}", "col_missing")
                    .replace("{key_id}", "key_missing")
                    .replace("{tenant_id}", "ten_missing")
                )
                yield operation["operationId"], (method.upper(), filled)


JSON_ROUTES = dict(json_operations())

NOT_JSON = {
    "not JSON": b"question=Why is the sky blue?",
    "truncated JSON": json.dumps(QUESTION).encode()[:40],
    "Latin-1": json.dumps(QUESTION, ensure_ascii=False).encode("latin-1"),
    "UTF-16 with a BOM": json.dumps(QUESTION).encode("utf-16"),
    "UTF-16 without a BOM": json.dumps(QUESTION).encode("utf-16-le"),
    "UTF-32": json.dumps(QUESTION).encode("utf-32"),
    "encoded surrogate": b'{"question": "\xed\xa0\x80", "document_ids": ["doc_x"]}',
}


def form(content: bytes = b"The grass is green.", *, close: bool = True) -> bytes:
    """A multipart upload of one text file; without its closing boundary if ``close`` is
    false."""
    body = (
        b"--" + BOUNDARY + b"\r\n"
        b'Content-Disposition: form-data; name="file"; filename="grass.txt"\r\n'
        b"Content-Type: text/plain\r\n\r\n" + content
    )
    return body + b"\r\n--" + BOUNDARY + b"--\r\n" if close else body


BROKEN_FORMS = {
    "no closing boundary": form(close=False),
    "no closing boundary, a CRLF at the end": form(close=False) + b"\r\n",
    "cut before the boundary's last dashes": form()[: -len(b"-\r\n")],
    "cut in the part's headers": form()[:60],
    "empty": b"",
    "not multipart": b"The grass is green.",
}


def in_pieces(body: bytes, *cuts: int) -> Iterator[bytes]:
    """The body sent in pieces cut at these offsets, with a pause between them so that the
    server reads each one by itself."""
    start = 0
    for cut in (*cuts, len(body)):
        yield body[start:cut]
        start = cut
        time.sleep(0.05)


def assert_stored_nothing(client: httpx.Client, database_url: str) -> None:
    assert client.get("/v1/documents").json()["data"] == []
    assert count_rows(database_url) == NOTHING


def key_for(path: str, database_url: str) -> dict[str, str]:
    """The administration routes are never open: an operator's key for them."""
    if not path.startswith("/v1/admin/"):
        return {}
    _, key = make_key(database_url, "operators", scopes=ALL_SCOPES)
    return {"Authorization": f"Bearer {key}"}


@pytest.mark.parametrize("body", NOT_JSON.values(), ids=NOT_JSON.keys())
@pytest.mark.parametrize("route", JSON_ROUTES.values(), ids=JSON_ROUTES.keys())
def test_a_json_body_that_cannot_be_read_is_malformed(
    client: httpx.Client, database_url: str, route: tuple[str, str], body: bytes
) -> None:
    method, path = route
    headers = {**JSON, **key_for(path, database_url)}
    sent = client.request(method, path, content=body, headers=headers)
    problem = assert_problem(sent, 400, "malformed_body")
    assert "errors" not in problem
    assert problem["detail"].startswith(
        ("The request body is not JSON", "The request body is not UTF-8")
    )


NOT_SENT_AS_JSON = {
    "text/plain": {"content-type": "text/plain"},
    "form-urlencoded": {"content-type": "application/x-www-form-urlencoded"},
    "no content-type": {},
}


@pytest.mark.parametrize("headers", NOT_SENT_AS_JSON.values(), ids=NOT_SENT_AS_JSON.keys())
@pytest.mark.parametrize("route", JSON_ROUTES.values(), ids=JSON_ROUTES.keys())
def test_a_body_not_sent_as_json_is_malformed(
    client: httpx.Client, database_url: str, route: tuple[str, str], headers: dict[str, str]
) -> None:
    """FastAPI reads a body as JSON only when its content-type says JSON."""
    method, path = route
    headers = {**headers, **key_for(path, database_url)}
    sent = client.request(method, path, content=json.dumps(QUESTION).encode(), headers=headers)
    problem = assert_problem(sent, 400, "malformed_body")
    assert problem["detail"] == (
        "The request body is not JSON: it was not sent as application/json."
    )


def test_every_json_route_was_tried() -> None:
    assert {
        "createAnswer",
        "createDocument",
        "createCollection",
        "searchPassages",
        "updateApiKey",  # a PATCH
    } <= set(JSON_ROUTES)
    assert len(JSON_ROUTES) == 14


def test_the_detail_says_what_and_where(client: httpx.Client) -> None:
    truncated = client.post("/v1/search", content=b'{"query": "sky", "limit":', headers=JSON)
    assert assert_problem(truncated, 400, "malformed_body")["detail"] == (
        "The request body is not JSON: Expecting value at character 25."
    )
    latin1 = client.post("/v1/search", content='{"query": "café"}'.encode("latin-1"), headers=JSON)
    assert assert_problem(latin1, 400, "malformed_body")["detail"] == (
        "The request body is not UTF-8: invalid continuation byte at byte 14. "
        "JSON is read as UTF-8 only."
    )
    utf16 = client.post("/v1/search", content='{"query": "sky"}'.encode("utf-16-be"), headers=JSON)
    assert "a NUL byte at byte 0" in assert_problem(utf16, 400, "malformed_body")["detail"]


def test_a_json_document_that_cannot_be_read_stores_nothing(
    client: httpx.Client, database_url: str
) -> None:
    source = {"source": {"type": "text", "media_type": "text/plain", "data": "Ça va très bien."}}
    for body in (
        json.dumps(source, ensure_ascii=False).encode("latin-1"),
        json.dumps(source, ensure_ascii=False).encode()[:-2],
    ):
        refused = client.post("/v1/documents", content=body, headers=JSON)
        assert_problem(refused, 400, "malformed_body")
    assert_stored_nothing(client, database_url)


def test_utf8_json_in_pieces_is_read(client: httpx.Client) -> None:
    """A character of several bytes split between two reads of the body is UTF-8 all the same;
    a UTF-8 byte-order mark is allowed (RFC 8259 lets a reader ignore it)."""
    body = json.dumps({"name": "Équipe ☃ 🌍"}, ensure_ascii=False).encode()
    split = body.index("☃".encode()) + 1
    created = client.post("/v1/collections", content=in_pieces(body, split), headers=JSON)
    assert created.status_code == 201, created.text
    assert created.json()["name"] == "Équipe ☃ 🌍"
    marked = client.post("/v1/collections", content=b"\xef\xbb\xbf" + body, headers=JSON)
    assert marked.status_code == 201, marked.text


@pytest.mark.parametrize("body", BROKEN_FORMS.values(), ids=BROKEN_FORMS.keys())
def test_a_broken_upload_is_malformed_and_stores_nothing(
    client: httpx.Client, database_url: str, body: bytes
) -> None:
    refused = client.post("/v1/documents/upload", content=body, headers=MULTIPART)
    assert_problem(refused, 400, "malformed_body")
    assert_stored_nothing(client, database_url)


def test_an_upload_cut_short_says_so(client: httpx.Client, database_url: str) -> None:
    text = b"All work and no play makes Jack a dull boy. " * 5000  # read in many messages
    refused = client.post(
        "/v1/documents/upload",
        content=in_pieces(form(text, close=False), 100, 100_000),
        headers=MULTIPART,
    )
    problem = assert_problem(refused, 400, "malformed_body")
    assert problem["detail"] == (
        "The multipart form ends before its closing boundary (--citegate-boundary--): "
        "the body is incomplete."
    )
    assert_stored_nothing(client, database_url)


@pytest.mark.parametrize("cut", [1, 5, len(BOUNDARY) + 4])
def test_a_closing_boundary_split_between_reads_is_found(client: httpx.Client, cut: int) -> None:
    """The whole form, its closing boundary split between two reads: stored."""
    body = form()
    stored = client.post(
        "/v1/documents/upload",
        content=in_pieces(body, body.rindex(b"\r\n--") + cut),
        headers=MULTIPART,
    )
    assert stored.status_code == 201, stored.text
    assert stored.json()["char_count"] == len("The grass is green.")


def test_an_empty_form_is_read(client: httpx.Client, database_url: str) -> None:
    """A form of no parts (its closing boundary alone) is well-formed: its missing file is a
    field missing, 422."""
    empty = client.post(
        "/v1/documents/upload", content=b"--" + BOUNDARY + b"--\r\n", headers=MULTIPART
    )
    problem = assert_problem(empty, 422, "validation_error")
    assert problem["errors"][0]["loc"] == ["body", "file"]
    assert_stored_nothing(client, database_url)


def test_a_well_formed_but_invalid_body_is_still_a_validation_error(
    client: httpx.Client, database_url: str
) -> None:
    cases: list[tuple[str, dict[str, Any]]] = [
        ("/v1/answers", {"question": "", "document_ids": ["doc_x"]}),
        ("/v1/documents", {"source": {"type": "text"}}),
        ("/v1/search", {"query": "sky", "limit": 0}),
    ]
    for path, body in cases:
        refused = client.post(path, json=body)
        assert assert_problem(refused, 422, "validation_error")["errors"], path
    array = client.post("/v1/collections", content=b"[1, 2]", headers=JSON)
    assert_problem(array, 422, "validation_error")
    no_file = client.post(
        "/v1/documents/upload", files={"other": ("a.txt", b"The grass is green.")}
    )
    assert assert_problem(no_file, 422, "validation_error")["errors"][0]["loc"] == ["body", "file"]
    assert_stored_nothing(client, database_url)


def assert_invalid_request(response: httpx.Response, message: str) -> None:
    """The Messages API's error: status 400, ``invalid_request_error``."""
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert message in body["error"]["message"]


@pytest.mark.parametrize("path", ["/messages", "/messages/count_tokens", "/messages/batches"])
def test_anthropic_json_that_cannot_be_read_is_an_invalid_request(
    client: httpx.Client, path: str
) -> None:
    url = f"/anthropic/v1{path}"
    headers = ANTHROPIC | JSON
    not_json = client.post(url, content=b"{not json", headers=headers)
    assert_invalid_request(not_json, "The request body is not ")
    assert "JSON" in not_json.json()["error"]["message"]
    latin1 = json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "Ça?"}]}, ensure_ascii=False
    )
    assert_invalid_request(
        client.post(url, content=latin1.encode("latin-1"), headers=headers), "not UTF-8"
    )


def test_anthropic_upload_cut_short_is_an_invalid_request(
    client: httpx.Client, database_url: str
) -> None:
    for body in (form(close=False), form()[:60]):
        refused = client.post("/anthropic/v1/files", content=body, headers=ANTHROPIC | MULTIPART)
        assert_invalid_request(refused, "closing boundary")
    assert_stored_nothing(client, database_url)
    whole = client.post("/anthropic/v1/files", content=form(), headers=ANTHROPIC | MULTIPART)
    assert whole.status_code == 200, whole.text
    assert whole.json()["type"] == "file"
