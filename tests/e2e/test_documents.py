"""The documents half of the contract, through real HTTP, on the configured database."""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.settings import Settings
from tests.conftest import ServedApp, count_rows
from tests.fixture_files import CORPUS, FIXTURES

GRASS_SKY = "The grass is green. The sky is blue."
MANIFEST = json.loads((CORPUS / "manifest.json").read_text())
PAGES = {entry["path"].rsplit("/", 1)[1]: entry["pages"] for entry in MANIFEST["files"]}
NOTHING = {"documents": 0, "document_blobs": 0, "document_chunks": 0}


def upload(client: httpx.Client, name: str, data: bytes, **form: str) -> httpx.Response:
    return client.post("/v1/documents/upload", files={"file": (name, data)}, data=form)


def all_chunks(client: httpx.Client, document_id: str) -> list[dict[str, Any]]:
    chunks: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 100}
        if cursor:
            params["cursor"] = cursor
        page = client.get(f"/v1/documents/{document_id}/chunks", params=params)
        assert page.status_code == 200, page.text
        chunks += page.json()["data"]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            return chunks


def assert_tiles(chunks: list[dict[str, Any]], char_count: int) -> str:
    """Chunks are contiguous, in order, cover the whole text; returns the text they make."""
    position = 0
    for index, chunk in enumerate(chunks):
        assert chunk["index"] == index
        assert chunk["start_char"] == position
        assert chunk["end_char"] - chunk["start_char"] == len(chunk["text"]) > 0
        position = chunk["end_char"]
    assert position == char_count
    return "".join(chunk["text"] for chunk in chunks)


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["code"] == code
    assert body["title"] and body["detail"] and body["type"].endswith(code)
    return body


def test_text_upload_chunks_like_the_upstream(client: httpx.Client) -> None:
    response = upload(client, "grass.txt", GRASS_SKY.encode(), title="My Document")
    assert response.status_code == 201, response.text
    document = response.json()
    assert response.headers["location"] == f"/v1/documents/{document['id']}"
    assert document["id"].startswith("doc_")
    assert document["kind"] == "text" and document["media_type"] == "text/plain"
    assert document["title"] == "My Document" and document["filename"] == "grass.txt"
    assert (document["char_count"], document["chunk_count"]) == (36, 2)
    assert document["citable"] is True and document["warnings"] == []
    chunks = all_chunks(client, document["id"])
    assert [(c["text"], c["start_char"], c["end_char"]) for c in chunks] == [
        ("The grass is green. ", 0, 20),
        ("The sky is blue.", 20, 36),
    ]
    assert chunks[0]["page_number"] is None and chunks[0]["block_index"] is None
    assert client.get(f"/v1/documents/{document['id']}").json() == document


def test_same_bytes_give_the_same_document(client: httpx.Client) -> None:
    first = upload(client, "a.txt", GRASS_SKY.encode())
    again = upload(client, "b.txt", GRASS_SKY.encode(), title="Other title")
    as_json = client.post("/v1/documents", json={"source": {"type": "text", "data": GRASS_SKY}})
    assert (first.status_code, again.status_code, as_json.status_code) == (201, 200, 200)
    assert first.json()["id"] == again.json()["id"] == as_json.json()["id"]
    assert count_rows_of(client) == 1


def count_rows_of(client: httpx.Client) -> int:
    return len(client.get("/v1/documents", params={"limit": 100}).json()["data"])


def test_crlf_and_bom_text_is_stored_exactly(client: httpx.Client) -> None:
    raw = "\ufeffFirst line of a sentence\r\ncontinues here. Second one.\r\n\r\nThird.".encode()
    response = upload(client, "crlf.txt", raw)
    assert response.status_code == 201, response.text
    document = response.json()
    text = raw.decode("utf-8").removeprefix("\ufeff")
    assert document["char_count"] == len(text)
    assert document["size_bytes"] == len(raw)
    assert assert_tiles(all_chunks(client, document["id"]), len(text)) == text
    content = client.get(f"/v1/documents/{document['id']}/content")
    assert content.content == raw
    assert content.headers["content-type"] == "text/plain; charset=utf-8"
    assert 'filename="crlf.txt"' in content.headers["content-disposition"]


@pytest.mark.parametrize("number", range(10))
def test_help_center_articles(client: httpx.Client, number: int) -> None:
    raw = (FIXTURES / "help_center" / f"help_center_{number}.txt").read_bytes()
    document = upload(client, f"help_center_{number}.txt", raw).json()
    chunks = all_chunks(client, document["id"])
    assert len(chunks) == document["chunk_count"] >= 2
    assert assert_tiles(chunks, document["char_count"]) == raw.decode()


def test_passages_the_real_api_cited_are_runs_of_our_chunks(client: httpx.Client) -> None:
    """Each passage the real API cited starts and ends on our chunk boundaries."""
    fixture = json.loads((FIXTURES / "plaintext_multidoc_char_location.json").read_text())
    ids = [
        client.post("/v1/documents", json={"source": block["source"]}).json()["id"]
        for block in fixture["request"]["messages"][0]["content"]
        if block["type"] == "document"
    ]
    locations = [loc for item in fixture["derived_analysis"] for loc in item["derived_locations"]]
    assert locations
    for location in locations:
        chunks = all_chunks(client, ids[location["document_index"]])
        boundaries = {0} | {chunk["end_char"] for chunk in chunks}
        assert location["start_char_index"] in boundaries
        assert location["end_char_index"] in boundaries


@pytest.mark.parametrize(
    "name", sorted(name for name in PAGES if name != "libreoffice-writer-password.pdf")
)
def test_every_corpus_pdf(client: httpx.Client, name: str) -> None:
    raw = (CORPUS / name).read_bytes()
    response = upload(client, name, raw)
    assert response.status_code == 201, response.text
    document = response.json()
    assert document["kind"] == "pdf" and document["media_type"] == "application/pdf"
    assert document["page_count"] == PAGES[name]
    chunks = all_chunks(client, document["id"])
    assert_tiles(chunks, document["char_count"])
    pages = [chunk["page_number"] for chunk in chunks]
    assert pages == sorted(pages) and set(pages) <= set(range(1, PAGES[name] + 1))
    if name == "imagemagick-images.pdf":
        assert document["citable"] is False
        assert "pdf_has_no_text_layer" in document["warnings"]
    else:
        assert document["citable"] is True, document["warnings"]
        assert "pdf_has_no_text_layer" not in document["warnings"]
        assert len(set(pages)) == PAGES[name]
    assert client.get(f"/v1/documents/{document['id']}/content").content == raw


def test_amazon_letter_page_one_holds_both_cited_passages(client: httpx.Client) -> None:
    fixture = json.loads((FIXTURES / "pdf_page_location_amazon.json").read_text())
    passages = [
        citation["cited_text"]
        for block in fixture["response_as_printed"]["content"]
        for citation in block.get("citations", [])
    ]
    assert len(passages) == 2
    raw = (FIXTURES / "amazon_2023_letter.pdf").read_bytes()
    response = client.post(
        "/v1/documents",
        json={
            "source": {
                "type": "base64",
                "media_type": "application/pdf",
                "data": base64.b64encode(raw).decode(),
            },
            "title": "Amazon 2023 Shareholder Letter",
        },
    )
    assert response.status_code == 201, response.text
    chunks = all_chunks(client, response.json()["id"])
    page_one = "".join(chunk["text"] for chunk in chunks if chunk["page_number"] == 1)
    for passage in passages:
        assert passage in page_one


def test_create_document_from_content_blocks(client: httpx.Client) -> None:
    blocks = ["First chunk", "Second chunk. With two sentences."]
    response = client.post(
        "/v1/documents",
        json={
            "source": {"type": "content", "content": [{"type": "text", "text": b} for b in blocks]},
            "title": "Blocks",
            "context": "Not citable",
            "metadata": {"team": "search", "n": 2},
        },
    )
    assert response.status_code == 201, response.text
    document = response.json()
    assert document["kind"] == "content" and document["chunk_count"] == 2
    assert document["metadata"] == {"team": "search", "n": 2}
    assert document["context"] == "Not citable"
    chunks = all_chunks(client, document["id"])
    assert [(c["text"], c["block_index"]) for c in chunks] == [(blocks[0], 0), (blocks[1], 1)]
    assert_tiles(chunks, document["char_count"])
    stored = client.get(f"/v1/documents/{document['id']}/content")
    assert [block["text"] for block in stored.json()] == blocks


def test_list_is_paginated_newest_first(client: httpx.Client) -> None:
    ids = [
        upload(client, f"{n}.txt", f"Document number {n}.".encode()).json()["id"] for n in range(5)
    ]
    first = client.get("/v1/documents", params={"limit": 2}).json()
    assert [d["id"] for d in first["data"]] == ids[::-1][:2]
    second = client.get("/v1/documents", params={"limit": 2, "cursor": first["next_cursor"]}).json()
    third = client.get("/v1/documents", params={"limit": 2, "cursor": second["next_cursor"]}).json()
    assert [d["id"] for d in second["data"] + third["data"]] == ids[::-1][2:]
    assert third["next_cursor"] is None
    assert len(client.get("/v1/documents").json()["data"]) == 5


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 101}, {"limit": "x"}])
def test_limit_out_of_range(client: httpx.Client, params: dict[str, Any]) -> None:
    body = assert_problem(client.get("/v1/documents", params=params), 422, "validation_error")
    assert body["errors"][0]["loc"] == ["query", "limit"]


def test_bad_cursor(client: httpx.Client) -> None:
    document = upload(client, "a.txt", GRASS_SKY.encode()).json()
    assert_problem(client.get("/v1/documents", params={"cursor": "%%%"}), 422, "invalid_cursor")
    assert_problem(
        client.get(f"/v1/documents/{document['id']}/chunks", params={"cursor": "bm90LWEtbnVtYmVy"}),
        422,
        "invalid_cursor",
    )


def test_delete_removes_document_bytes_and_index(client: httpx.Client, database_url: str) -> None:
    document = upload(client, "a.txt", GRASS_SKY.encode()).json()
    assert client.delete(f"/v1/documents/{document['id']}").status_code == 204
    for path in ("", "/content", "/chunks"):
        assert_problem(
            client.get(f"/v1/documents/{document['id']}{path}"), 404, "document_not_found"
        )
    assert_problem(client.delete(f"/v1/documents/{document['id']}"), 404, "document_not_found")
    assert count_rows(database_url) == NOTHING


@pytest.mark.parametrize("document_id", ["doc_doesnotexist", "nonsense", "doc_" + "x" * 300])
def test_unknown_or_malformed_ids(client: httpx.Client, document_id: str) -> None:
    for path in ("", "/content", "/chunks"):
        assert_problem(client.get(f"/v1/documents/{document_id}{path}"), 404, "document_not_found")
    assert_problem(client.delete(f"/v1/documents/{document_id}"), 404, "document_not_found")


def _png() -> bytes:
    return b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + b"\x00" * 64


@pytest.mark.parametrize(
    ("name", "data", "status", "code"),
    [
        ("empty.txt", b"", 422, "empty_document"),
        ("blank.txt", b"  \r\n\t ", 422, "empty_document"),
        ("latin1.txt", "Caf\u00e9 cr\u00e8me.".encode("latin-1"), 422, "text_not_utf8"),
        ("image.png", _png(), 415, "unsupported_media_type"),
        ("image.pdf", _png(), 415, "unsupported_media_type"),
        ("binary.bin", b"abc\x00def", 415, "unsupported_media_type"),
        (
            "encrypted.pdf",
            (CORPUS / "libreoffice-writer-password.pdf").read_bytes(),
            422,
            "pdf_encrypted",
        ),
        (
            "truncated.pdf",
            (FIXTURES / "amazon_2023_letter.pdf").read_bytes()[:50_000],
            422,
            "pdf_invalid",
        ),
        ("header-only.pdf", b"%PDF-1.7\n%garbage that is no PDF at all\n", 422, "pdf_invalid"),
    ],
)
def test_bad_uploads_store_nothing(
    client: httpx.Client, database_url: str, name: str, data: bytes, status: int, code: str
) -> None:
    assert_problem(upload(client, name, data), status, code)
    assert count_rows(database_url) == NOTHING


def test_pdf_declared_but_text_sent(client: httpx.Client, database_url: str) -> None:
    response = client.post(
        "/v1/documents/upload", files={"file": ("x.pdf", b"Just text.", "application/pdf")}
    )
    assert_problem(response, 422, "pdf_invalid")
    assert count_rows(database_url) == NOTHING


def test_a_text_source_is_text_whatever_it_starts_with(client: httpx.Client) -> None:
    """The JSON source names its kind: text that happens to start like a PDF stays text."""
    data = "%PDF-1.7 is the version this sentence talks about."
    response = client.post("/v1/documents", json={"source": {"type": "text", "data": data}})
    assert response.status_code == 201, response.text
    document = response.json()
    assert (document["kind"], document["media_type"]) == ("text", "text/plain")
    assert client.get(f"/v1/documents/{document['id']}/content").text == data


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"source": {"type": "text", "data": "ok."}, "title": "t" * 501}, "validation_error"),
        ({"source": {"type": "text", "data": "ok."}, "context": ""}, "validation_error"),
        ({"source": {"type": "content", "content": []}}, "validation_error"),
        (
            {"source": {"type": "content", "content": [{"type": "text", "text": ""}]}},
            "validation_error",
        ),
        (
            {"source": {"type": "content", "content": [{"type": "text", "text": " \n"}]}},
            "validation_error",
        ),
        (
            {"source": {"type": "content", "content": [{"type": "image", "source": {}}]}},
            "validation_error",
        ),
        ({"source": {"type": "url", "url": "https://example.com/a.pdf"}}, "validation_error"),
        (
            {"source": {"type": "base64", "media_type": "application/pdf", "data": "not base64!"}},
            "invalid_base64",
        ),
        (
            {"source": {"type": "base64", "media_type": "application/pdf", "data": "aGVsbG8="}},
            "pdf_invalid",
        ),
        ({"source": {"type": "text", "data": "a\u0000b"}}, "invalid_text"),
        (
            {"source": {"type": "content", "content": [{"type": "text", "text": "a\u0000"}]}},
            "invalid_text",
        ),
        ({"source": {"type": "text", "data": "\ud800 lone surrogate"}}, "validation_error"),
        (
            {"source": {"type": "content", "content": [{"type": "text", "text": "\udfff"}]}},
            "validation_error",
        ),
    ],
)
def test_bad_json_documents_store_nothing(
    client: httpx.Client, database_url: str, body: dict[str, Any], code: str
) -> None:
    # json.dumps escapes lone surrogates as \\udXXX, as any JSON client would send them.
    response = client.post(
        "/v1/documents", content=json.dumps(body), headers={"content-type": "application/json"}
    )
    assert_problem(response, 422, code)
    assert count_rows(database_url) == NOTHING


@pytest.mark.parametrize("form", [{"title": "t" * 501}, {"context": ""}, {"title": ""}])
def test_bad_upload_fields_store_nothing(
    client: httpx.Client, database_url: str, form: dict[str, str]
) -> None:
    body = assert_problem(upload(client, "a.txt", b"Fine text.", **form), 422, "validation_error")
    assert body["errors"][0]["loc"][0] == "body"
    assert count_rows(database_url) == NOTHING


def test_malformed_json_body(client: httpx.Client) -> None:
    response = client.post(
        "/v1/documents", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert_problem(response, 400, "malformed_body")


def test_request_id_is_echoed_or_made(client: httpx.Client) -> None:
    assert (
        client.get("/healthz", headers={"X-Request-ID": "abc-123"}).headers["x-request-id"]
        == "abc-123"
    )
    made = client.get("/v1/documents/doc_missing").headers["x-request-id"]
    assert len(made) == 32


def test_health_and_readiness(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {
        "status": "ready",
        "database": "ok",
        "upstream": "local",
        "auth": "open",
        "rate_limits": "memory",
    }
    assert_problem(client.get("/v1/nothing-here"), 404, "not_found")
    assert_problem(client.put("/v1/documents"), 405, "method_not_allowed")


@pytest.fixture(scope="module")
def small_limit(settings: Settings) -> Any:
    with ServedApp(settings.model_copy(update={"max_document_bytes": 64 * 1024})) as app:
        yield app


def test_document_over_the_limit(small_limit: ServedApp, database_url: str) -> None:
    with httpx.Client(base_url=small_limit.base_url) as http:
        http.delete("/v1/documents/none")
        big = b"All work and no play makes Jack a dull boy. " * 2000  # 90 KB
        assert_problem(upload(http, "big.txt", big), 413, "payload_too_large")
        as_json = {"source": {"type": "text", "data": big.decode()}}
        assert_problem(http.post("/v1/documents", json=as_json), 413, "payload_too_large")
        blocks = [{"type": "text", "text": big.decode()[:30_000]} for _ in range(3)]
        as_content = {"source": {"type": "content", "content": blocks}}
        before = count_rows(database_url)
        assert_problem(http.post("/v1/documents", json=as_content), 413, "payload_too_large")
        assert count_rows(database_url) == before
        assert upload(http, "small.txt", big[:60_000]).status_code in (200, 201)

        def chunked() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
            yield b'{"source": {"type": "text", "data": "'
            for _ in range(1300):  # past the JSON body limit (4/3 of 64 KB + 1 MiB)
                yield b"x" * 1000
            yield b'"}}'

        sent = http.post(
            "/v1/documents", content=chunked(), headers={"content-type": "application/json"}
        )
        assert_problem(sent, 413, "payload_too_large")


def test_huge_body_is_refused_before_it_is_sent(small_limit: ServedApp) -> None:
    """The 413 comes at once; the server does not wait for (or read) the rest of the body."""
    with socket.create_connection(("127.0.0.1", small_limit.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/documents/upload HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: multipart/form-data; boundary=b\r\n"
            b"Content-Length: 1000000000\r\n\r\n--b\r\n"
        )
        started = time.monotonic()
        answer = b""
        while b"\r\n\r\n" not in answer:
            part = sock.recv(65536)
            if not part:
                break
            answer += part
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        assert b"connection: close" in answer.lower()
        # The server closes the connection at once instead of reading a gigabyte.
        sock.settimeout(3)
        while sock.recv(65536):
            pass
        assert time.monotonic() - started < 3
