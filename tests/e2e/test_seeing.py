"""Seeing a citation, over real HTTP: page images, boxes on spans (also for answers stored
before boxes existed), share links and the page they open, in headless Chromium."""

from __future__ import annotations

import asyncio
import io
from datetime import timedelta
from typing import Any

import httpx
import pypdfium2 as pdfium
from PIL import Image
from sqlalchemy import update
from sqlalchemy.pool import NullPool

from app.db.engine import create_engine
from app.db.models import Answer, AnswerShareLink, utcnow
from app.documents.pdf import without_hyphenation
from tests.e2e.test_documents import assert_problem
from tests.fixture_files import CORPUS

MULTICOLUMN = CORPUS / "multicolumn.pdf"
TEXT = (
    "Citegate keeps every document it is given. The grass is green in spring. "
    "The sky is blue on a clear day. Owls hunt at night and sleep by day."
)


def _db(database_url: str, statement: Any) -> None:
    async def run() -> None:
        engine = create_engine(database_url, poolclass=NullPool)
        async with engine.begin() as connection:
            await connection.execute(statement)
        await engine.dispose()

    asyncio.run(run())


def _pdf(client: httpx.Client) -> dict[str, Any]:
    response = client.post(
        "/v1/documents/upload",
        files={"file": ("multicolumn.pdf", MULTICOLUMN.read_bytes())},
        data={"title": "Two columns"},
    )
    assert response.status_code == 201, response.text
    document: dict[str, Any] = response.json()
    return document


def _text(client: httpx.Client) -> dict[str, Any]:
    body = {"source": {"type": "text", "media_type": "text/plain", "data": TEXT}, "title": "Notes"}
    response = client.post("/v1/documents", json=body)
    assert response.status_code == 201, response.text
    document: dict[str, Any] = response.json()
    return document


def _ask(client: httpx.Client, question: str, *document_ids: str) -> dict[str, Any]:
    response = client.post("/v1/answers", json={"question": question, "document_ids": document_ids})
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def _citations(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for segment in answer["segments"] for c in segment["citations"]]


def _pdfium_centres(citation: dict[str, Any]) -> list[tuple[int, float, float]]:
    """Where PDFium says each cited character is: page, and its centre as fractions."""
    offset, centres = 0, []
    span = citation["span"]
    with pdfium.PdfDocument(MULTICOLUMN.read_bytes()) as document:  # and its pages
        for number, page in enumerate(document, start=1):
            textpage = page.get_textpage()
            # The stored text leaves PDFium's hyphenation marks out.
            stored, kept = without_hyphenation(textpage.get_text_range())
            count = len(stored)
            width, height = page.get_size()
            ours = range(max(span["start_char"], offset), min(span["end_char"], offset + count))
            for index in ours:
                held = kept[index - offset] if kept else index - offset
                left, bottom, right, top = textpage.get_charbox(held)
                if right > left:
                    centres.append(
                        (number, (left + right) / 2 / width, 1 - (bottom + top) / 2 / height)
                    )
            offset += count
    return centres


def _covered(centres: list[tuple[int, float, float]], boxes: list[dict[str, Any]]) -> bool:
    slack = 0.003
    return all(
        any(
            b["page"] == page
            and b["x0"] - slack <= x <= b["x1"] + slack
            and b["y0"] - slack <= y <= b["y1"] + slack
            for b in boxes
        )
        for page, x, y in centres
    )


QUESTION = "What does Pellentesque habitant morbi tristique mean?"


def test_pdf_spans_have_boxes_that_cover_the_cited_characters(
    client: httpx.Client, database_url: str
) -> None:
    document = _pdf(client)
    answer = _ask(client, QUESTION, document["id"])
    citations = [c for c in _citations(answer) if c["span"]]
    assert citations
    for citation in citations:
        assert citation["span"]["boxes"], citation
        assert _covered(_pdfium_centres(citation), citation["span"]["boxes"])
    # An answer stored before boxes existed gets the same boxes when read.
    stored = answer["segments"]
    legacy = [
        {
            **s,
            "citations": [
                {**c, "span": c["span"] and {k: v for k, v in c["span"].items() if k != "boxes"}}
                for c in s["citations"]
            ],
        }
        for s in stored
    ]
    _db(database_url, update(Answer).where(Answer.id == answer["id"]).values(segments=legacy))
    again = client.get(f"/v1/answers/{answer['id']}").json()
    assert again["segments"] == stored


def test_text_spans_have_no_boxes(client: httpx.Client) -> None:
    document = _text(client)
    answer = _ask(client, "What colour is the grass?", document["id"])
    spans = [c["span"] for c in _citations(answer) if c["span"]]
    assert spans and all(span["boxes"] == [] for span in spans)


def test_page_images(client: httpx.Client) -> None:
    document = _pdf(client)
    url = f"/v1/documents/{document['id']}/pages/2/image"
    response = client.get(url, params={"width": 600})
    assert response.status_code == 200
    assert response.headers["content-type"] == "image/png"
    picture = Image.open(io.BytesIO(response.content))
    assert picture.width == 600 and picture.height == round(600 * 841.89 / 595.276)
    etag = response.headers["etag"]
    cached = client.get(url, params={"width": 600}, headers={"If-None-Match": etag})
    assert cached.status_code == 304
    assert Image.open(io.BytesIO(client.get(url).content)).width == 1000  # the default
    assert_problem(
        client.get(f"/v1/documents/{document['id']}/pages/4/image"), 404, "page_not_found"
    )
    assert_problem(client.get(url, params={"width": 5000}), 422, "validation_error")
    text = _text(client)
    assert_problem(client.get(f"/v1/documents/{text['id']}/pages/1/image"), 422, "document_not_pdf")
    assert_problem(client.get("/v1/documents/doc_nope/pages/1/image"), 404, "document_not_found")


def _share(client: httpx.Client, answer_id: str, **body: int) -> str:
    response = client.post(f"/v1/answers/{answer_id}/share-links", json=body or None)
    assert response.status_code == 201, response.text
    url: str = response.json()["url"]
    return url


def test_share_links_expire_and_go_with_their_answer(
    client: httpx.Client, database_url: str
) -> None:
    document = _pdf(client)
    answer = _ask(client, QUESTION, document["id"])
    url = _share(client, answer["id"], expires_in=3600)
    assert url.startswith(str(client.base_url) + "/share/")
    with httpx.Client(timeout=30) as anyone:  # no key
        page = anyone.get(url)
        assert page.status_code == 200
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert answer["question"] in page.text
        image = anyone.get(f"{url}/documents/{document['id']}/pages/1/image")
        assert image.headers["content-type"] == "image/png"
        other = _text(client)  # the tenant's, but not the answer's
        assert anyone.get(f"{url}/documents/{other['id']}/text").status_code == 404
        assert anyone.get(url + "x").status_code == 404
        assert_problem(
            client.post("/v1/answers/ans_nope/share-links", json={}), 404, "answer_not_found"
        )
        assert_problem(
            client.post(f"/v1/answers/{answer['id']}/share-links", json={"expires_in": 1}),
            422,
            "validation_error",
        )

        expiring = _share(client, answer["id"])
        _db(
            database_url, update(AnswerShareLink).values(expires_at=utcnow() - timedelta(seconds=1))
        )
        for gone in (url, expiring):
            response = anyone.get(gone)
            assert response.status_code == 404
            assert answer["question"] not in response.text and answer["id"] not in response.text

        fresh = _share(client, answer["id"])
        assert anyone.get(fresh).status_code == 200
        assert client.delete(f"/v1/answers/{answer['id']}").status_code == 204
        assert anyone.get(fresh).status_code == 404
        assert anyone.get(f"{fresh}/documents/{document['id']}/pages/1/image").status_code == 404
    assert_problem(client.get(f"/v1/answers/{answer['id']}"), 404, "answer_not_found")


def test_the_viewer_page_is_small(client: httpx.Client) -> None:
    document = _pdf(client)
    url = _share(client, _ask(client, QUESTION, document["id"])["id"])
    page = client.get(url)
    assets = [
        client.get(f"{client.base_url}/assets/{name}") for name in ("viewer.js", "viewer.css")
    ]
    assert all(asset.status_code == 200 for asset in assets)
    assert len(page.content) + sum(len(asset.content) for asset in assets) < 100_000
