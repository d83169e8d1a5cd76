"""A PDF's text layer as a user meets it over HTTP: a word PDFium splits with its hyphenation mark
is stored whole and cited verified with boxes on both its lines; a filled form's values are
found by search."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.documents.pdf import split_pdf
from tests.fixture_files import CORPUS
from tests.scans import image_pdf, render_page
from tests.unit.test_text_layer import form_for_the_fallback


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
    # The local engine quotes the PDF as the upstream extracts it: U+0002 inside the word. (A
    # sentence said once in the PDF: the engine quotes a repeated one once, where it comes first.)
    response = client.post(
        "/v1/answers",
        json={
            "question": "Duis eget orci sit amet orci dignissim rutrum?",
            "document_ids": [document["id"]],
        },
    )
    assert response.status_code == 200, response.text
    citations = [c for s in response.json()["segments"] for c in s["citations"]]
    hyphenated = [c for c in citations if "dig\u0002nissim" in c["cited_text"]]
    assert hyphenated, [c["cited_text"] for c in citations]
    for citation in hyphenated:
        assert citation["verified"] is True
        span = citation["span"]
        assert "dignissim" in text[span["start_char"] : span["end_char"]]
        assert len(span["boxes"]) >= 2


@pytest.mark.parametrize("parser", ["pdfium", "pypdf"])
def test_a_filled_forms_values_are_in_its_text_and_found_by_search(
    client: httpx.Client, parser: str
) -> None:
    """Through either parser: pypdf reads the form when PDFium refuses it (its trailer broken)."""
    if parser == "pdfium":
        document = _upload(client, "libreoffice-form.pdf")
    else:
        response = client.post(
            "/v1/documents/upload", files={"file": ("form.pdf", form_for_the_fallback())}
        )
        assert response.status_code == 201, response.text
        document = response.json()
        assert "pdf_text_from_fallback_parser" in document["warnings"]
    assert document["citable"] is True
    assert "Alice" in "".join(_chunk_texts(client, document["id"]))
    for name in ("Alice", "Bob"):
        response = client.post("/v1/search", json={"query": name, "document_ids": [document["id"]]})
        assert response.status_code == 200, response.text
        assert any(name in str(result) for result in response.json()["data"]), name


def _pages(client: httpx.Client, document_id: str) -> list[dict[str, Any]]:
    response = client.get(f"/v1/documents/{document_id}/pages")
    assert response.status_code == 200, response.text
    pages: list[dict[str, Any]] = response.json()["data"]
    return pages


def test_a_garbage_text_layer_is_caught_and_left_out(client: httpx.Client) -> None:
    # Page 1: multicolumn's page 1 as it is; page 2: its page 2 as a picture under a text
    # layer of control characters (a font with no Unicode map); page 3: a picture alone.
    source = (CORPUS / "multicolumn.pdf").read_bytes()
    data = image_pdf(
        [render_page(source, 2, 100), render_page(source, 3, 100)],
        text_pages={0: split_pdf(source, [(1, 1)])[0]},
        garbage_layer=[1],
    )
    response = client.post("/v1/documents/upload", files={"file": ("mixed.pdf", data)})
    assert response.status_code == 201, response.text
    document = response.json()
    assert document["citable"] is True
    assert "pdf_text_layer_garbage" in document["warnings"]
    assert "pdf_pages_without_text" in document["warnings"]
    pages = _pages(client, document["id"])
    assert [(p["page_number"], p["text_source"], p["warnings"]) for p in pages] == [
        (1, "text_layer", []),
        (2, "none", ["text_layer_garbage"]),
        (3, "none", []),
    ]
    text = "".join(_chunk_texts(client, document["id"]))
    assert pages[0]["char_count"] == len(text) > 1000
    assert not any("\x00" < char < " " and char not in "\r\n\t" for char in text)


def test_pages_of_a_document_that_is_not_a_pdf_are_none(client: httpx.Client) -> None:
    body = {"source": {"type": "text", "media_type": "text/plain", "data": "Plain words."}}
    response = client.post("/v1/documents", json=body)
    assert response.status_code == 201, response.text
    assert _pages(client, response.json()["id"]) == []
    assert client.get("/v1/documents/doc_missing/pages").status_code == 404
