"""Pages read by OCR (real Tesseract) as the API shows them, over real HTTP: `pages_read` on every
Document, scans uploaded through the Anthropic and OpenAI files APIs read like those of
`/v1/documents/upload` (409 `document_processing` in each API's own error shape meanwhile, the
OpenAI file's and vector store file's status following the document), the OCR page limit refused
by those uploads too, `CITEGATE_OCR=force`, and the cost estimate of an OCR'd PDF."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from app.documents.pdf import split_pdf
from app.settings import Settings
from tests.conftest import Served, ServedApp, count_rows
from tests.e2e import test_anthropic_compat as anthropic_compat
from tests.e2e import test_openai_chat as openai_chat
from tests.e2e.test_ocr import MULTICOLUMN, truth, wait_ready
from tests.fixture_files import CORPUS
from tests.scans import cer, image_pdf, render_page

TRIVIAL = (CORPUS / "002-trivial-libre-office-writer.pdf").read_bytes()
# The table of multicolumn.pdf's page 3, scanned: "Belgium 11.5 30,689 Brussels ...".
TABLE_QUESTION = "Which city is the capital of Belgium?"
LOREM_QUESTION = "Praesent enim elit, rutrum at, molestie non, nonummy vel?"


def no_pages_read(**counts: Any) -> dict[str, Any]:
    return {"text_layer": 0, "ocr": 0, "none": 0, "pending": 0, "ocr_confidence": None} | counts


@pytest.fixture(scope="module")
def reader(settings: Settings) -> Iterator[Served]:
    """Citegate with OCR on (English only: read faster), two worker processes."""
    on = settings.model_copy(update={"ocr": "auto", "ocr_workers": 2, "ocr_languages": "eng"})
    with ServedApp(on) as served:
        yield served


def _pages(client: httpx.Client, document_id: str) -> list[dict[str, Any]]:
    response = client.get(f"/v1/documents/{document_id}/pages")
    assert response.status_code == 200, response.text
    pages: list[dict[str, Any]] = response.json()["data"]
    return pages


def _text(client: httpx.Client, document_id: str) -> str:
    response = client.get(f"/v1/documents/{document_id}/chunks", params={"limit": 100})
    assert response.status_code == 200, response.text
    return "".join(chunk["text"] for chunk in response.json()["data"])


def test_a_scan_uploaded_as_an_anthropic_file_is_read_and_refused_with_409_meanwhile(
    client: httpx.Client, reader: Served
) -> None:
    # Page 1 keeps its text layer; page 2 is a scan (multicolumn.pdf's page 3, a table).
    mixed = image_pdf([render_page(MULTICOLUMN, 3)], text_pages={0: TRIVIAL})
    with anthropic_compat.sdk(reader.base_url) as api:
        uploaded = api.files.upload(file=("mixed.pdf", mixed, "application/pdf"))
        document = client.get(f"/v1/documents/{uploaded.id}").json()
        assert document["status"] == "processing"
        assert document["pages_read"] == no_pages_read(text_layer=1, pending=1)
        messages = anthropic_compat.ask(
            anthropic_compat.file_block(uploaded.id), question=TABLE_QUESTION
        )
        # Asked about while its pages are read: the Messages API's error, and when to retry.
        with pytest.raises(anthropic.ConflictError) as conflict:
            api.messages.create(model="claude-sonnet-5", max_tokens=500, messages=messages)
        error = anthropic_compat.error_of(conflict.value)
        assert error["type"] == "invalid_request_error" and "OCR" in error["message"], error
        assert int(conflict.value.response.headers["retry-after"]) > 0
        with pytest.raises(anthropic.ConflictError):
            api.messages.count_tokens(model="claude-sonnet-5", messages=messages)
        batch = api.messages.batches.create(
            requests=[
                {
                    "custom_id": "scan",
                    "params": {
                        "model": "claude-sonnet-5",
                        "max_tokens": 500,
                        "messages": messages,
                    },
                }
            ]
        )
        # In a batch, the request is errored as the Messages API errors one: in its result.
        assert (batch.processing_status, batch.request_counts.errored) == ("ended", 1)
        [result] = api.messages.batches.results(batch.id)
        assert result.result.type == "errored"
        assert result.result.error.error.type == "invalid_request_error"
        assert "OCR" in result.result.error.error.message

        document = wait_ready(client, uploaded.id)
        pages = _pages(client, uploaded.id)
        assert [p["text_source"] for p in pages] == ["text_layer", "ocr"]
        assert document["pages_read"] == no_pages_read(
            text_layer=1, ocr=1, ocr_confidence=pages[1]["ocr_confidence"]
        )
        message = api.messages.create(model="claude-sonnet-5", max_tokens=500, messages=messages)
    citations = anthropic_compat.citations_of(message.content)
    on_scan = [c for c in citations if c["citegate"]["span"]["start_page"] == 2]
    assert on_scan, citations
    assert all(c["citegate"]["verified"] is True for c in on_scan), on_scan
    assert any("Brussels" in c["cited_text"] for c in on_scan), on_scan


def test_a_scan_uploaded_as_an_openai_file_is_read_its_status_following_the_document(
    client: httpx.Client, reader: Served
) -> None:
    scan = image_pdf([render_page(MULTICOLUMN, 2)])
    with openai_chat.sdk(reader.base_url) as api:
        file = api.files.create(file=("scan.pdf", scan, "application/pdf"), purpose="assistants")
        assert (file.status, file.status_details) == ("uploaded", None)
        store = api.vector_stores.create(name="scans", file_ids=[file.id])
        assert store.status == "in_progress"
        assert (store.file_counts.in_progress, store.file_counts.completed) == (1, 0)
        in_store = api.vector_stores.files.retrieve(file.id, vector_store_id=store.id)
        assert (in_store.status, in_store.last_error) == ("in_progress", None)
        listed = api.vector_stores.files.list(store.id, filter="in_progress")
        assert [f.id for f in listed] == [file.id]
        assert list(api.vector_stores.files.list(store.id, filter="completed")) == []
        # Asked about while its pages are read: OpenAI's error, and when to retry.
        messages = openai_chat.ask(file.id, question=LOREM_QUESTION)
        with pytest.raises(openai.ConflictError) as conflict:
            api.chat.completions.create(model="claude-sonnet-5", messages=messages)
        assert conflict.value.code == "document_processing"
        assert int(conflict.value.response.headers["retry-after"]) > 0
        with pytest.raises(openai.ConflictError) as conflict:
            api.responses.create(
                model="claude-sonnet-5",
                input=[
                    {
                        "role": "user",
                        "content": [
                            {"type": "input_file", "file_id": file.id},
                            {"type": "input_text", "text": LOREM_QUESTION},
                        ],
                    }
                ],
            )
        assert conflict.value.code == "document_processing"

        # The SDK's own waiting, until OpenAI's statuses say the file is ready.
        processed = api.files.wait_for_processing(file.id, poll_interval=0.5)
        assert (processed.status, processed.status_details) == ("processed", None)
        in_store = api.vector_stores.files.poll(
            file.id, vector_store_id=store.id, poll_interval_ms=500
        )
        assert in_store.status == "completed"
        store = api.vector_stores.retrieve(store.id)
        assert store.status == "completed"
        assert (store.file_counts.in_progress, store.file_counts.completed) == (0, 1)
        assert [f.id for f in api.vector_stores.files.list(store.id, filter="completed")] == [
            file.id
        ]
        assert [p["text_source"] for p in _pages(client, file.id)] == ["ocr"]
        completion = api.chat.completions.create(model="claude-sonnet-5", messages=messages)
    annotations = [a.model_dump() for a in completion.choices[0].message.annotations or []]
    assert annotations
    for annotation in annotations:
        assert annotation["citegate"]["verified"] is True, annotation
        assert annotation["citegate"]["span"]["start_page"] == 1
    text = _text(client, file.id)
    assert cer(text, truth(MULTICOLUMN, 2)) <= 0.02


def test_an_unreadable_scan_is_an_openai_file_in_error_and_a_failed_vector_store_file(
    client: httpx.Client, settings: Settings
) -> None:
    # Korean is not among the languages scripts/test installs: Tesseract refuses to start.
    broken = settings.model_copy(update={"ocr": "auto", "ocr_languages": "kor", "ocr_workers": 1})
    scan = image_pdf([render_page(MULTICOLUMN, 1, 72)])
    with ServedApp(broken) as served, openai_chat.sdk(served.base_url) as api:
        file = api.files.create(file=("scan.pdf", scan, "application/pdf"), purpose="user_data")
        store = api.vector_stores.create(name="scans", file_ids=[file.id])
        failed = api.files.wait_for_processing(file.id, poll_interval=0.2)
        assert failed.status == "error"
        assert failed.status_details and "kor" in failed.status_details
        in_store = api.vector_stores.files.retrieve(file.id, vector_store_id=store.id)
        assert in_store.status == "failed" and in_store.last_error is not None
        assert in_store.last_error.code == "server_error"
        assert in_store.last_error.message == failed.status_details
        store = api.vector_stores.retrieve(store.id)
        assert (store.status, store.file_counts.failed, store.file_counts.completed) == (
            "completed",
            1,
            0,
        )
        assert [f.id for f in api.vector_stores.files.list(store.id, filter="failed")] == [file.id]


def test_more_pages_to_read_than_the_limit_are_refused_by_the_compatible_uploads(
    client: httpx.Client, settings: Settings, database_url: str
) -> None:
    limited = settings.model_copy(update={"ocr": "auto", "ocr_max_pages": 1})
    scan = image_pdf([render_page(MULTICOLUMN, 1, 72), render_page(MULTICOLUMN, 2, 72)])
    tables = ("documents", "document_blobs", "document_pages", "ocr_jobs")
    before = count_rows(database_url, tables)
    with ServedApp(limited) as served:
        with (
            anthropic_compat.sdk(served.base_url) as api,
            pytest.raises(anthropic.APIStatusError) as refused,
        ):
            api.files.upload(file=("scan.pdf", scan, "application/pdf"))
        assert refused.value.status_code == 413
        error = anthropic_compat.error_of(refused.value)
        assert error["type"] == "request_too_large"
        assert "2 pages to read by OCR" in error["message"], error
        with (
            openai_chat.sdk(served.base_url) as openai_api,
            pytest.raises(openai.APIStatusError) as too_many,
        ):
            openai_api.files.create(file=("scan.pdf", scan), purpose="assistants")
        assert too_many.value.status_code == 413
        assert too_many.value.code == "ocr_page_limit_exceeded"
        assert "2 pages to read by OCR" in too_many.value.message
    assert count_rows(database_url, tables) == before


def test_with_ocr_forced_a_text_pdf_is_read_by_ocr_and_pages_read_says_so_everywhere(
    client: httpx.Client, settings: Settings
) -> None:
    forced = settings.model_copy(update={"ocr": "force", "ocr_workers": 1, "ocr_languages": "eng"})
    with ServedApp(forced) as served, httpx.Client(base_url=served.base_url, timeout=60) as http:
        response = http.post("/v1/documents/upload", files={"file": ("trivial.pdf", TRIVIAL)})
        assert response.status_code == 202, response.text
        assert response.json()["pages_read"] == no_pages_read(pending=1)
        document = wait_ready(http, response.json()["id"])
    [page] = _pages(client, document["id"])
    assert page["text_source"] == "ocr" and page["warnings"] == []
    assert document["pages_read"] == no_pages_read(ocr=1, ocr_confidence=page["ocr_confidence"])
    assert 0.8 <= page["ocr_confidence"] <= 1
    text = _text(client, document["id"])
    assert page["char_count"] == len(text)
    assert cer(text, truth(TRIVIAL, 1)) <= 0.02, text

    # Every place a document is shown has its pages_read: null for what is not a PDF.
    grass = client.post("/v1/documents", json={"source": {"type": "text", "data": "Green."}})
    assert grass.status_code == 201 and grass.json()["pages_read"] is None
    text_pdf = client.post("/v1/documents/upload", files={"file": ("multicolumn.pdf", _page_one())})
    assert text_pdf.status_code == 201
    assert text_pdf.json()["pages_read"] == no_pages_read(text_layer=1)
    expected = {
        document["id"]: document["pages_read"],
        grass.json()["id"]: None,
        text_pdf.json()["id"]: no_pages_read(text_layer=1),
    }
    listed = client.get("/v1/documents").json()["data"]
    assert {d["id"]: d["pages_read"] for d in listed} == expected
    collection = client.post("/v1/collections", json={"name": "all"}).json()
    added = client.post(
        f"/v1/collections/{collection['id']}/documents", json={"document_ids": list(expected)}
    )
    assert added.status_code == 200, added.text
    in_collection = client.get(f"/v1/collections/{collection['id']}/documents").json()["data"]
    assert {d["id"]: d["pages_read"] for d in in_collection} == expected
    again = client.post("/v1/documents/upload", files={"file": ("trivial.pdf", TRIVIAL)})
    assert again.status_code == 200 and again.json()["pages_read"] == document["pages_read"]


def _page_one() -> bytes:
    return split_pdf(MULTICOLUMN, [(1, 1)])[0]


def test_an_ocrd_pdf_costs_its_text_not_page_images(
    client: httpx.Client, settings: Settings, reader: Served
) -> None:
    """`auto` retrieval sends whole documents while their estimated tokens fit the budget: a
    scanned page goes as its OCR text (a few hundred tokens), a PDF with a text layer as its
    pages, each counted as a picture too (1,500 tokens)."""
    scan = image_pdf([render_page(TRIVIAL, 1)])
    response = httpx.post(
        f"{reader.base_url}/v1/documents/upload", files={"file": ("scan.pdf", scan)}, timeout=60
    )
    assert response.status_code == 202, response.text
    scanned = wait_ready(client, response.json()["id"])
    assert scanned["pages_read"]["ocr"] == 1 and scanned["char_count"] // 4 < 1_000
    text_pdf = client.post("/v1/documents/upload", files={"file": ("one-page.pdf", _page_one())})
    assert text_pdf.status_code == 201 and text_pdf.json()["char_count"] // 4 < 1_000
    budget = settings.model_copy(update={"whole_documents_token_budget": 1_000})
    with ServedApp(budget) as served, httpx.Client(base_url=served.base_url, timeout=60) as http:
        modes = []
        for document_id in (scanned["id"], text_pdf.json()["id"], scanned["id"]):
            answer = http.post(
                "/v1/answers",
                json={
                    "question": "What is Lorem ipsum?",
                    "document_ids": [document_id],
                    "retrieval": {"mode": "auto"},
                },
            )
            assert answer.status_code == 200, answer.text
            modes.append(answer.json()["retrieval"]["mode"])
    # The scan twice: built, then from the cache of sources (each checked against the budget).
    assert modes == ["documents", "passages", "documents"]
