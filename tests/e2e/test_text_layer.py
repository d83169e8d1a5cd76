"""A PDF's text layer as a user meets it over HTTP: a word PDFium splits with its hyphenation mark
is stored whole and cited verified with boxes on both its lines; a filled form's values are
found by search."""

from __future__ import annotations

from typing import Any

import httpx

from tests.fixture_files import CORPUS


def _upload(client: httpx.Client, name: str) -> dict[str, Any]:
    response = client.post(
        "/v1/documents/upload", files={"file": (name, (CORPUS / name).read_bytes())}
    )
    assert response.status_code == 201, response.text
    document: dict[str, Any] = response.json()
    return document


def _chunk_texts(client: httpx.Client, document_id: str) -> list[str]:
    response = client.get(f"/v1/documents/{document_id}/chunks", params={"limit": 100})
    assert response.status_code == 200, response.text
    return [chunk["text"] for chunk in response.json()["data"]]


def test_a_hyphenated_word_is_stored_whole_and_its_citation_verified(
    client: httpx.Client,
) -> None:
    document = _upload(client, "multicolumn.pdf")
    text = "".join(_chunk_texts(client, document["id"]))
    assert "\ufffe" not in text and "adipiscing" in text
    # The local engine quotes the PDF as the upstream extracts it: U+0002 inside the word.
    response = client.post(
        "/v1/answers",
        json={
            "question": "Lorem ipsum dolor sit amet, consectetuer adipiscing elit?",
            "document_ids": [document["id"]],
        },
    )
    assert response.status_code == 200, response.text
    citations = [c for s in response.json()["segments"] for c in s["citations"]]
    hyphenated = [c for c in citations if "adip\u0002iscing" in c["cited_text"]]
    assert hyphenated, [c["cited_text"] for c in citations]
    for citation in hyphenated:
        assert citation["verified"] is True
        span = citation["span"]
        assert "adipiscing" in text[span["start_char"] : span["end_char"]]
        assert len(span["boxes"]) >= 2


def test_a_filled_forms_values_are_in_its_text_and_found_by_search(client: httpx.Client) -> None:
    document = _upload(client, "libreoffice-form.pdf")
    assert document["citable"] is True
    assert "Alice" in "".join(_chunk_texts(client, document["id"]))
    response = client.post("/v1/search", json={"query": "Alice", "document_ids": [document["id"]]})
    assert response.status_code == 200, response.text
    assert any("Alice" in str(result) for result in response.json()["data"])
