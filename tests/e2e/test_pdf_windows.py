"""PDFs past the upstream's limits, through real HTTP: a 700-page PDF (the 117-page sample's
pages over and over, with the Amazon letter at pages 601-611) is sent in `documents` mode as
page windows that are real PDFs titled with their pages; every citation of a window comes back
as one of the stored document at its absolute pages, verified there, whether answered whole,
streamed, by the local engine or by the fake upstream, and replayed in a conversation; what
cannot fit is refused, and a file past the storage limit is not stored."""

from __future__ import annotations

import base64
import io
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pypdfium2 as pdfium
import pytest
from httpx_sse import connect_sse

from app.settings import Settings
from app.upstream.wire import MAX_REQUEST_BYTES
from tests.conftest import Served, ServedApp, behind, count_rows
from tests.e2e.test_documents import assert_problem
from tests.fake_upstream import FakeUpstream, Reply, message, sse_message
from tests.fixture_files import AMAZON_PDF, CORPUS

SAMPLE = CORPUS / "GeoTopo-komprimiert.pdf"  # 117 pages
PAGES = 700
AMAZON_FROM = 601  # the letter's 11 pages are pages 601-611
WHOLE = {"mode": "documents"}
REVENUE = "What was Amazon's total revenue in 2023?"


@pytest.fixture(scope="session")
def long_pdf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 700-page PDF, made once per session by PDFium's page import (never committed)."""
    buffer = io.BytesIO()
    with (
        pdfium.PdfDocument(SAMPLE) as sample,
        pdfium.PdfDocument(AMAZON_PDF) as letter,
        pdfium.PdfDocument.new() as made,
    ):
        for until in (AMAZON_FROM - 1, None, PAGES):
            if until is None:
                made.import_pages(letter)
                continue
            while len(made) < until:
                made.import_pages(sample, list(range(min(len(sample), until - len(made)))))
        made.save(buffer)
    path = tmp_path_factory.mktemp("pdf") / "long.pdf"
    path.write_bytes(buffer.getvalue())
    return path


def upload_long(http: httpx.Client, path: Path, title: str = "Long report") -> dict[str, Any]:
    response = http.post(
        "/v1/documents/upload",
        files={"file": ("long.pdf", path.read_bytes(), "application/pdf")},
        data={"title": title},
    )
    assert response.status_code == 201, response.text
    document: dict[str, Any] = response.json()
    assert document["page_count"] == PAGES and document["citable"] is True
    return document


def page_texts(path: Path) -> dict[int, str]:
    """The text of the pages cited here, as PDFium extracts them (Citegate stores exactly that)."""
    pages = {}
    with pdfium.PdfDocument(path) as pdf:  # and its pages and text pages
        for number in (5, *range(AMAZON_FROM, AMAZON_FROM + 11)):
            pages[number] = pdf[number - 1].get_textpage().get_text_range()
    return pages


def assert_verified_at(citation: dict[str, Any], document_id: str, pages: dict[int, str]) -> None:
    """Resolved to the stored document, at absolute pages, and found there."""
    assert citation["verified"] is True, citation
    assert citation["document_id"] == document_id and citation["document_index"] == 0
    span = citation["span"]
    first = citation["start_page_number"]
    assert span["start_page"] == first and span["end_page"] == citation["end_page_number"] - 1
    assert citation["cited_text"].strip() in pages[first].replace("\ufffe", "\u0002")


def window_of(block: dict[str, Any]) -> pdfium.PdfDocument:
    """The window a document block sends, opened: close it (``with``)."""
    assert block["source"]["media_type"] == "application/pdf"
    return pdfium.PdfDocument(base64.b64decode(block["source"]["data"], validate=True))


def page_citation(index: int, first: int, cited: str) -> dict[str, Any]:
    return {
        "type": "page_location",
        "cited_text": cited,
        "document_index": index,
        "document_title": None,
        "start_page_number": first,
        "end_page_number": first + 1,
    }


def stream(http: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    """The stored answer a stream ends with, and every citation event on the way."""
    with connect_sse(http, "POST", "/v1/answers", json={**body, "stream": True}) as source:
        assert source.response.status_code == 200, source.response.read()
        events = [(event.event, json.loads(event.data)) for event in source.iter_sse()]
    assert events[-1][0] == "answer.done"
    done: dict[str, Any] = events[-1][1]
    streamed = [data["citation"] for name, data in events if name == "citation"]
    # The stored answer adds the spans' boxes, measured after the stream's citation events.
    assert streamed == [
        without_boxes(c) for segment in done["segments"] for c in segment["citations"]
    ]
    return done


def without_boxes(citation: dict[str, Any]) -> dict[str, Any]:
    if citation["span"] is None:
        return citation
    span = {k: v for k, v in citation["span"].items() if k != "boxes"}
    return {**citation, "span": span}


def test_a_700_page_pdf_is_sent_in_page_windows_and_cited_at_its_own_pages(
    settings: Settings, fake: FakeUpstream, client: httpx.Client, long_pdf: Path
) -> None:
    # Stored once (the served app and the one behind the fake share the database).
    document = upload_long(client, long_pdf)
    pages = page_texts(long_pdf)

    # Through the local engine, which reads the windows as PDFs.
    body = {"question": REVENUE, "document_ids": [document["id"]], "retrieval": WHOLE}
    response = client.post("/v1/answers", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["retrieval"]["mode"] == "documents"
    assert answer["documents"] == [
        {"document_index": 0, "document_id": document["id"], "title": "Long report"}
    ]
    citations = [c for segment in answer["segments"] for c in segment["citations"]]
    assert citations, answer["text"]
    for citation in citations:
        assert citation["type"] == "page_location"
        assert AMAZON_FROM <= citation["start_page_number"] <= AMAZON_FROM + 10, citation
        assert citation["document_title"] == f"Long report (pages 601–{PAGES})"
        assert_verified_at(citation, document["id"], pages)
    # Too many estimated tokens for `auto`: it answers from passages instead.
    auto = client.post("/v1/answers", json={**body, "retrieval": {"mode": "auto"}}).json()
    assert auto["retrieval"]["mode"] == "passages"

    with behind(settings, fake) as app, httpx.Client(base_url=app.base_url, timeout=60) as http:
        text = http.post(
            "/v1/documents", json={"source": {"type": "text", "data": "The sky is blue."}}
        ).json()
        ids = [document["id"], text["id"]]
        late, early = (max(pages[n].split("\r\n"), key=len) for n in (602, 5))
        content = [
            {"type": "text", "text": "Revenue grew", "citations": [page_citation(1, 2, late)]},
            {"type": "text", "text": " and", "citations": [page_citation(0, 5, early)]},
            # Page 150 of a window of 100 pages: nowhere.
            {"type": "text", "text": " maybe", "citations": [page_citation(1, 150, late)]},
        ]
        fake.reset(Reply(body=message(content)))
        body = {"question": REVENUE, "document_ids": ids, "retrieval": WHOLE}
        answer = http.post("/v1/answers", json=body).json()

        sent = fake.requests[-1].body
        assert len(json.dumps(sent)) <= MAX_REQUEST_BYTES
        blocks = [b for b in sent["messages"][0]["content"] if b["type"] == "document"]
        assert [b.get("title") for b in blocks] == [
            "Long report (pages 1–600)",
            "Long report (pages 601–700)",
            None,
        ]
        assert "cache_control" in blocks[-1]
        with window_of(blocks[0]) as first, window_of(blocks[1]) as second:
            assert (len(first), len(second)) == (600, 100)
            # A window's pages are the original's: page 2 of the second is page 602.
            assert second[1].get_textpage().get_text_range() == pages[602]

        late_cited, early_cited, nowhere = (s["citations"][0] for s in answer["segments"])
        assert (late_cited["start_page_number"], late_cited["end_page_number"]) == (602, 603)
        assert_verified_at(late_cited, document["id"], pages)
        assert (early_cited["start_page_number"], early_cited["end_page_number"]) == (5, 6)
        assert_verified_at(early_cited, document["id"], pages)
        assert nowhere["document_id"] == document["id"] and nowhere["span"] is None
        assert nowhere["verified"] is False

        # Streamed, the same citations resolve the same way.
        fake.reset(Reply(events=sse_message(content)))
        done = stream(http, body)
        assert [s["citations"] for s in done["segments"]] == [
            s["citations"] for s in answer["segments"]
        ]
        # The windows were kept: the same bytes again, which the prompt cache recognises.
        again = fake.requests[-1].body["messages"][0]["content"]
        assert [b for b in again if b["type"] == "document"] == blocks

        # A conversation sends the earlier answer back pointing at the windows again.
        conversation = http.post("/v1/conversations", json={"document_ids": ids}).json()
        fake.reset(Reply(body=message(content[:2])))
        follow = {"question": REVENUE, "conversation_id": conversation["id"]}
        assert http.post("/v1/answers", json=follow).status_code == 200
        assert http.post("/v1/answers", json={**follow, "question": "And?"}).status_code == 200
        replayed = fake.requests[-1].body["messages"][1]["content"]
        assert [block["citations"][0] for block in replayed] == [
            {**page_citation(1, 2, late), "document_title": "Long report (pages 601–700)"},
            {**page_citation(0, 5, early), "document_title": "Long report (pages 1–600)"},
        ]


def test_windows_that_cannot_fit_one_request(
    settings: Settings, fake: FakeUpstream, client: httpx.Client
) -> None:
    fake.reset(Reply(body=message([{"type": "text", "text": "From passages."}])))
    # One page a window: the 117-page sample needs 117 document blocks, and a request takes 100.
    with (
        behind(settings, fake, max_pdf_pages_per_document=1) as app,
        httpx.Client(base_url=app.base_url, timeout=60) as http,
    ):
        upload = http.post("/v1/documents/upload", files={"file": ("s.pdf", SAMPLE.read_bytes())})
        body = {"question": "Topologie?", "document_ids": [upload.json()["id"]]}
        refused = assert_problem(
            http.post("/v1/answers", json={**body, "retrieval": WHOLE}), 422, "document_too_large"
        )
        assert "117 documents (each page window" in refused["detail"]
        assert fake.requests == []
        auto = http.post("/v1/answers", json=body)
        assert auto.status_code == 200 and auto.json()["retrieval"]["mode"] == "passages"


def test_a_pdf_over_the_storage_limit_is_refused_as_it_streams(
    settings: Settings, client: httpx.Client, database_url: str
) -> None:
    limit = 256 * 1024
    data = SAMPLE.read_bytes()  # 1.8 MB
    boundary = "pdfwinboundary"

    def body() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.pdf"'
            "\r\nContent-Type: application/pdf\r\n\r\n"
        ).encode()
        for start in range(0, len(data), 64 * 1024):
            yield data[start : start + 64 * 1024]
        yield f"\r\n--{boundary}--\r\n".encode()

    before = count_rows(database_url)
    with (
        ServedApp(settings.model_copy(update={"max_document_bytes": limit})) as app,
        httpx.Client(base_url=app.base_url, timeout=60) as http,
    ):
        headers = {"content-type": f"multipart/form-data; boundary={boundary}"}
        refused = http.post("/v1/documents/upload", content=body(), headers=headers)
        assert_problem(refused, 413, "payload_too_large")
        declared = http.post("/v1/documents/upload", files={"file": ("big.pdf", data)})
        assert_problem(declared, 413, "payload_too_large")
    assert count_rows(database_url) == before


def head_of_reply(port: int, request: bytes) -> bytes:
    """The status line and headers the service answers a request whose body never comes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while b"\r\n\r\n" not in answer:
            part = sock.recv(65536)
            if not part:
                break
            answer += part
    return answer


def test_the_storage_limit_takes_uploads_and_json_stays_within_32_mib(served: Served) -> None:
    """With the default limits, a 100 MB upload is read (no answer before its body); a JSON
    document of 50 MB is refused at once."""
    json_body = (
        b"POST /v1/documents HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 50000000\r\n\r\n{"
    )
    assert head_of_reply(served.port, json_body).startswith(b"HTTP/1.1 413")
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/documents/upload HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: multipart/form-data; boundary=b\r\n"
            b"Content-Length: 100000000\r\n\r\n--b\r\n"
        )
        sock.settimeout(1)
        with pytest.raises(TimeoutError):  # waiting for the rest of the body
            sock.recv(65536)
