"""Cited answers against a fake Messages API on 127.0.0.1 that replays real responses for the
real documents they answered: every citation must resolve to the stored span and verify."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from app.settings import Settings
from tests.conftest import Served, behind, count_rows
from tests.fake_upstream import FakeUpstream, Reply, error, message
from tests.fixture_files import CORPUS, FIXTURES

SECRET = "sk-ant-test-0123456789abcdefghijklmnop"


@pytest.fixture(scope="module")
def answering(settings: Settings, fake: FakeUpstream) -> Iterator[Served]:
    with behind(
        settings,
        fake,
        anthropic_api_key=SecretStr(SECRET),
        upstream_read_timeout=1.0,
        upstream_max_attempts=3,
        upstream_max_retry_seconds=10.0,
    ) as app:
        yield app


@pytest.fixture
def api(client: httpx.Client, answering: Served, fake: FakeUpstream) -> Iterator[httpx.Client]:
    """A client of Citegate talking to the fake upstream; the store starts empty."""
    fake.reset(Reply(500, {"type": "error"}))
    with httpx.Client(base_url=answering.base_url, timeout=30) as http:
        yield http


def fixture(name: str) -> dict[str, Any]:
    recorded: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return recorded


def store(api: httpx.Client, block: dict[str, Any]) -> str:
    """Store a request's document block as Citegate's createDocument takes it."""
    body = {key: block[key] for key in ("source", "title", "context") if key in block}
    response = api.post("/v1/documents", json=body)
    assert response.status_code in (200, 201), response.text
    return str(response.json()["id"])


def complete(
    content: list[dict[str, Any]], documents: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Fill in the citation fields that the fixtures' printouts dropped, by the fixtures' rule
    (exact search of cited_text in the document with that title)."""
    titles = [block.get("title") for block in documents]
    for block in content:
        for citation in block.get("citations") or []:
            if citation["type"] not in ("char_location", "content_block_location"):
                continue
            citation.setdefault("document_index", titles.index(citation["document_title"]))
            source = documents[citation["document_index"]]["source"]
            if citation["type"] == "char_location" and "start_char_index" not in citation:
                start = source["data"].index(citation["cited_text"])
                citation["start_char_index"] = start
                citation["end_char_index"] = start + len(citation["cited_text"])
            if citation["type"] == "content_block_location" and "start_block_index" not in citation:
                texts = [b["text"] for b in source["content"]]
                first = texts.index(citation["cited_text"])
                citation["start_block_index"], citation["end_block_index"] = first, first + 1
    return content


def ask(api: httpx.Client, question: str, ids: list[str], **extra: Any) -> httpx.Response:
    return api.post("/v1/answers", json={"question": question, "document_ids": ids, **extra})


def all_citations(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for segment in answer["segments"] for c in segment["citations"]]


def assert_every_citation_verifies(api: httpx.Client, answer: dict[str, Any]) -> None:
    citations = all_citations(answer)
    assert citations
    for citation in citations:
        assert citation["verified"] is True, citation
        span = citation["span"]
        chunks = []
        cursor = None
        while True:
            page = api.get(
                f"/v1/documents/{citation['document_id']}/chunks",
                params={"limit": 100, **({"cursor": cursor} if cursor else {})},
            ).json()
            chunks += page["data"]
            if not (cursor := page["next_cursor"]):
                break
        text = "".join(chunk["text"] for chunk in chunks)
        stored = text[span["start_char"] : span["end_char"]]
        if citation["type"] == "page_location":
            assert " ".join(stored.split()) == " ".join(citation["cited_text"].split())
        else:
            assert stored == citation["cited_text"]
        covered = [
            c["index"]
            for c in chunks
            if c["start_char"] < span["end_char"] and c["end_char"] > span["start_char"]
        ]
        assert span["chunk_indices"] == covered


def test_grass_and_sky(api: httpx.Client, fake: FakeUpstream) -> None:
    recorded = fixture("grass_sky_char_location.json")
    document = recorded["request"]["messages"][0]["content"][0]
    document_id = store(api, document)
    fake.reset(Reply(body=message(recorded["response_content"])))
    response = ask(api, "What color is the grass and sky?", [document_id])
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["id"].startswith("ans_") and answer["status"] == "completed"
    assert answer["text"] == "".join(b["text"] for b in recorded["response_content"])
    for segment in answer["segments"]:
        assert answer["text"][segment["start"] : segment["end"]] == segment["text"]
    spans = [(c["span"]["start_char"], c["span"]["end_char"]) for c in all_citations(answer)]
    assert spans == [(0, 20), (20, 36)]
    first = all_citations(answer)[0]
    assert first["document_id"] == document_id and first["document_title"] == "My Document"
    assert first["start_char_index"] == 0 and first["type"] == "char_location"
    assert_every_citation_verifies(api, answer)
    assert answer["documents"] == [
        {"document_index": 0, "document_id": document_id, "title": "My Document"}
    ]
    assert answer["usage"] == {
        "input_tokens": 25,
        "output_tokens": 40,
        "cache_creation_input_tokens": 900,
        "cache_read_input_tokens": 0,
    }
    assert answer["upstream"] == {"message_id": "msg_fake0001", "request_id": "req_fake0001"}
    assert api.get(f"/v1/answers/{answer['id']}").json() == answer

    (sent,) = fake.requests
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == SECRET
    assert sent.headers["anthropic-version"] == "2026-10-21"
    assert not {"temperature", "top_p", "top_k"} & set(sent.body)
    assert sent.body["messages"] == [
        {
            "role": "user",
            "content": [
                {
                    "type": "document",
                    "source": document["source"],
                    "title": "My Document",
                    "context": document["context"],
                    "citations": {"enabled": True},
                    "cache_control": {"type": "ephemeral"},
                },
                {"type": "text", "text": "What color is the grass and sky?"},
            ],
        }
    ]


@pytest.mark.parametrize(
    "name", ["plaintext_multidoc_char_location.json", "custom_content_block_location.json"]
)
def test_help_centre_articles(api: httpx.Client, fake: FakeUpstream, name: str) -> None:
    recorded = fixture(name)
    request = recorded["request"]
    documents = [b for b in request["messages"][0]["content"] if b["type"] == "document"]
    question = request["messages"][-1]["content"][-1]["text"]
    ids = [store(api, block) for block in documents]
    content = complete(recorded["response_as_printed"]["content"], documents)
    fake.reset(Reply(body=message(content)))
    response = ask(api, question, ids, system=request["system"], max_tokens=1024)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert_every_citation_verifies(api, answer)
    for citation in all_citations(answer):
        assert citation["document_id"] == ids[citation["document_index"]]
    (sent,) = fake.requests
    sent_documents = [b for b in sent.body["messages"][0]["content"] if b["type"] == "document"]
    # The documents in the caller's order, with their exact content, citations on all.
    assert [b["source"] for b in sent_documents] == [b["source"] for b in documents]
    assert [b["title"] for b in sent_documents] == [b["title"] for b in documents]
    assert all(b["citations"] == {"enabled": True} for b in sent_documents)
    marked = [i for i, b in enumerate(sent_documents) if "cache_control" in b]
    assert len(marked) <= 4 and marked[-1] == len(documents) - 1
    assert sent.body["system"] == request["system"]


def test_single_document_with_context(api: httpx.Client, fake: FakeUpstream) -> None:
    recorded = fixture("single_doc_context_char_location.json")
    request = recorded["request"]
    document = request["messages"][0]["content"][0]
    document_id = store(api, document)
    fake.reset(
        Reply(body=message(complete(recorded["response_as_printed"]["content"], [document])))
    )
    answer = ask(api, request["messages"][0]["content"][-1]["text"], [document_id]).json()
    assert_every_citation_verifies(api, answer)
    # One citation covers two consecutive sentences: two chunks.
    assert all_citations(answer)[0]["span"]["chunk_indices"] == [0, 1]
    assert fake.requests[0].body["messages"][0]["content"][0]["context"] == document["context"]


def test_amazon_pdf_page_locations(api: httpx.Client, fake: FakeUpstream) -> None:
    recorded = fixture("pdf_page_location_amazon.json")
    raw = (FIXTURES / "amazon_2023_letter.pdf").read_bytes()
    document_id = api.post(
        "/v1/documents/upload",
        files={"file": ("letter.pdf", raw)},
        data={"title": recorded["request_document"]["title"]},
    ).json()["id"]
    content = recorded["response_as_printed"]["content"]
    for block in content:
        for citation in block.get("citations", []):
            citation["document_index"] = 0
    fake.reset(Reply(body=message(content)))
    answer = ask(api, recorded["question"], [document_id]).json()
    assert_every_citation_verifies(api, answer)
    for citation in all_citations(answer):
        assert citation["span"]["start_page"] == citation["span"]["end_page"] == 1
    source = fake.requests[0].body["messages"][0]["content"][0]["source"]
    assert source["media_type"] == "application/pdf"
    assert base64.b64decode(source["data"]) == raw


def test_seven_documents_carry_at_most_four_breakpoints(
    api: httpx.Client, fake: FakeUpstream
) -> None:
    ids = [
        store(api, {"source": {"type": "text", "data": f"Fact number {n} is true."}})
        for n in range(7)
    ]
    fake.reset(Reply(body=message([{"type": "text", "text": "Fine."}])))
    assert ask(api, "Which facts?", ids).status_code == 200
    blocks = fake.requests[0].body["messages"][0]["content"]
    marked = [i for i, b in enumerate(blocks) if "cache_control" in b]
    assert 1 <= len(marked) <= 4 and marked[-1] == 6
    assert [b["source"]["data"] for b in blocks[:7]] == [
        f"Fact number {n} is true." for n in range(7)
    ]


def test_web_search_and_broken_citations_are_kept_unresolved(
    api: httpx.Client, fake: FakeUpstream
) -> None:
    document_id = store(api, {"source": {"type": "text", "data": "The grass is green."}})
    final = fixture("web_search_stream_final.json")
    web = next(
        citation
        for block in final["final_message_accumulated_by_anthropic_sdk_2_14_accumulate_event"][
            "content"
        ]
        if block["type"] == "text"
        for citation in block.get("citations") or []
    )
    broken = [
        {
            "type": "char_location",
            "cited_text": "x",
            "document_index": 5,
            "start_char_index": 0,
            "end_char_index": 1,
        },
        {
            "type": "char_location",
            "cited_text": "nowhere",
            "document_index": 0,
            "start_char_index": 900,
            "end_char_index": 9999,
        },
        {
            "type": "page_location",
            "cited_text": "x",
            "document_index": 0,
            "start_page_number": 3,
            "end_page_number": 4,
        },
        {
            "type": "content_block_location",
            "cited_text": "x",
            "document_index": 0,
            "start_block_index": 4,
            "end_block_index": 2,
        },
        # Its type's fields missing: kept as it came, shown and stored all the same.
        {"type": "char_location", "cited_text": "x", "document_index": 0},
    ]
    content = [{"type": "text", "text": "Cited.", "citations": [web, *broken]}]
    fake.reset(Reply(body=message(content)))
    response = ask(api, "Anything?", [document_id])
    assert response.status_code == 200, response.text
    kept = all_citations(response.json())
    # Each is checked against the segment's text all the same.
    assert all(citation.pop("support")["method"] == "lexical" for citation in kept)
    assert kept[0] == {**web, "document_id": None, "span": None, "verified": False}
    for original, resolved in zip(broken, kept[1:], strict=True):
        assert resolved == {
            **original,
            "document_id": None if original["document_index"] == 5 else document_id,
            "span": None,
            "verified": False,
        }
    stored = api.get(f"/v1/answers/{response.json()['id']}").json()
    assert stored == response.json()


def test_count_tokens(api: httpx.Client, fake: FakeUpstream) -> None:
    document_id = store(api, {"source": {"type": "text", "data": "The grass is green."}})
    fake.reset(Reply(body={"input_tokens": 1234}))
    response = api.post(
        "/v1/answers/count-tokens", json={"question": "Grass?", "document_ids": [document_id]}
    )
    assert response.json() == {"input_tokens": 1234}
    (sent,) = fake.requests
    assert sent.path == "/v1/messages/count_tokens"
    assert "max_tokens" not in sent.body
    assert sent.body["messages"][0]["content"][0]["citations"] == {"enabled": True}


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["code"] == code
    assert SECRET not in response.text
    return body


def test_429_with_retry_after_then_success(api: httpx.Client, fake: FakeUpstream) -> None:
    document_id = store(api, {"source": {"type": "text", "data": "The grass is green."}})
    limited = error(429, "rate_limit_error", "Number of requests has exceeded your rate limit")
    limited.headers["retry-after"] = "0"
    fake.reset(limited, Reply(body=message([{"type": "text", "text": "Green."}])))
    response = ask(api, "Grass?", [document_id])
    assert response.status_code == 200, response.text
    assert len(fake.requests) == 2


def test_a_compressed_answer_is_read(api: httpx.Client, fake: FakeUpstream) -> None:
    """The upstream (or a proxy before it) may compress what it sends: Citegate offers only
    the encodings it decodes."""
    document_id = store(api, {"source": {"type": "text", "data": "The grass is green."}})
    body = json.dumps(message([{"type": "text", "text": "Green."}])).encode()
    fake.reset(Reply(body=gzip.compress(body), headers={"content-encoding": "gzip"}))
    response = ask(api, "Grass?", [document_id])
    assert response.status_code == 200, response.text
    assert response.json()["text"] == "Green."
    offered = fake.requests[0].headers["accept-encoding"].split(",")
    assert {encoding.strip() for encoding in offered} <= {"gzip", "deflate"}


def test_a_body_that_does_not_decode_is_a_bad_response(
    api: httpx.Client, fake: FakeUpstream
) -> None:
    document_id = store(api, {"source": {"type": "text", "data": "The grass is green."}})
    fake.reset(Reply(body=b"not gzip at all", headers={"content-encoding": "gzip"}))
    response = ask(api, "Grass?", [document_id])
    assert response.status_code == 502, response.text
    assert response.json()["code"] == "upstream_bad_response"
    stream = {"question": "Grass?", "document_ids": [document_id], "stream": True}
    fake.reset(Reply(events=[b"not gzip at all"], headers={"content-encoding": "gzip"}))
    response = api.post("/v1/answers", json=stream)
    assert response.status_code == 502, response.text
    assert response.json()["code"] == "upstream_bad_response"


def test_a_cookie_the_upstream_sets_never_goes_out_again(
    client: httpx.Client, settings: Settings, fake: FakeUpstream
) -> None:
    # One HTTP client serves every tenant: a cookie kept from one answer would ride along on
    # the next request, whoever asks it. The upstream is named by a host name, as in
    # production: a cookie jar that refuses cookies of IP addresses would hide a jar that keeps.
    by_name = fake.base_url.replace("127.0.0.1", "localhost")
    reply = message([{"type": "text", "text": "Green."}])
    fake.reset(
        Reply(body=reply, headers={"set-cookie": "__cf_bm=abc; Path=/; HttpOnly"}),
        Reply(body=reply),
    )
    with (
        behind(settings, fake, anthropic_base_url=by_name) as app,
        httpx.Client(base_url=app.base_url, timeout=30) as api,
    ):
        document_id = store(api, {"source": {"type": "text", "data": "The grass is green."}})
        assert ask(api, "Grass?", [document_id]).status_code == 200
        assert ask(api, "Grass again?", [document_id]).status_code == 200
    assert [r.headers.get("cookie") for r in fake.requests] == [None, None]


def test_529_until_attempts_run_out(
    api: httpx.Client, fake: FakeUpstream, database_url: str
) -> None:
    document_id = store(api, {"source": {"type": "text", "data": "The grass is green."}})
    overloaded = error(529, "overloaded_error", "Overloaded")
    overloaded.headers["retry-after-ms"] = "20"
    fake.reset(overloaded)
    body = assert_problem(ask(api, "Grass?", [document_id]), 503, "upstream_overloaded")
    assert body["upstream_request_id"] == "req_fakeerr"
    assert len(fake.requests) == 3  # upstream_max_attempts
    assert count_rows(database_url, ("answers",))["answers"] == 0


def test_the_retry_budget_counts_from_the_first_attempt(
    client: httpx.Client, settings: Settings, fake: FakeUpstream
) -> None:
    # Attempts may go on for 1.8 s. The first takes 1 s to be refused, the second starts 0.5 s
    # later (1.5 s in), and a third would start at 2 s: past the budget, so none is made.
    # Counted from the end of the first attempt instead, a third and a fourth would be.
    overloaded = error(529, "overloaded_error", "Overloaded")
    overloaded.headers["retry-after-ms"] = "500"
    slow = error(529, "overloaded_error", "Overloaded")
    slow.headers["retry-after-ms"] = "500"
    slow.delay = 1.0
    fake.reset(slow, overloaded)
    with (
        behind(
            settings,
            fake,
            upstream_read_timeout=5.0,
            upstream_max_attempts=5,
            upstream_max_retry_seconds=1.8,
        ) as app,
        httpx.Client(base_url=app.base_url, timeout=30) as api,
    ):
        document_id = store(api, {"source": {"type": "text", "data": "The grass is green."}})
        assert_problem(ask(api, "Grass?", [document_id]), 503, "upstream_overloaded")
    assert len(fake.requests) == 2


def test_rate_limited_upstream_backs_off_then_gives_up(
    api: httpx.Client, fake: FakeUpstream
) -> None:
    document_id = store(api, {"source": {"type": "text", "data": "The grass is green."}})
    fake.reset(error(429, "rate_limit_error", "Too many requests"))  # no retry-after: backoff
    response = ask(api, "Grass?", [document_id])
    body = assert_problem(response, 503, "upstream_rate_limited")
    assert int(response.headers["retry-after"]) >= 1 and body["retry_after"] >= 1
    assert len(fake.requests) == 3


def test_read_timeout(api: httpx.Client, fake: FakeUpstream) -> None:
    document_id = store(api, {"source": {"type": "text", "data": "The grass is green."}})
    fake.reset(Reply(body=message([{"type": "text", "text": "Late."}]), delay=3))
    assert_problem(ask(api, "Grass?", [document_id]), 504, "upstream_timeout")
    assert len(fake.requests) == 1  # not retried: the upstream may be generating it already


@pytest.mark.parametrize(
    ("reply", "status", "code"),
    [
        (Reply(body=b"{not json"), 502, "upstream_bad_response"),
        (Reply(body={"type": "message", "content": "nope"}), 502, "upstream_bad_response"),
        (
            error(
                400, "invalid_request_error", "prompt is too long: 250000 tokens > 200000 maximum"
            ),
            422,
            "upstream_rejected",
        ),
        (error(401, "authentication_error", "invalid x-api-key"), 502, "upstream_auth_failed"),
        (
            error(413, "request_too_large", "Request exceeds the maximum allowed number of bytes."),
            413,
            "upstream_request_too_large",
        ),
    ],
)
def test_upstream_failures_become_our_errors(
    api: httpx.Client, fake: FakeUpstream, database_url: str, reply: Reply, status: int, code: str
) -> None:
    document_id = store(api, {"source": {"type": "text", "data": "The grass is green."}})
    fake.reset(reply)
    body = assert_problem(ask(api, "Grass?", [document_id]), status, code)
    assert body["upstream_request_id"] in ("req_fakeerr", "req_fake0001")
    if code == "upstream_rejected":
        assert "prompt is too long: 250000 tokens > 200000 maximum" in body["detail"]
    assert len(fake.requests) == 1
    assert count_rows(database_url, ("answers",))["answers"] == 0


def test_bad_questions_are_refused_before_the_upstream(
    api: httpx.Client, fake: FakeUpstream, database_url: str
) -> None:
    text_id = store(api, {"source": {"type": "text", "data": "The grass is green."}})
    scan = api.post(
        "/v1/documents/upload",
        files={"file": ("scan.pdf", (CORPUS / "imagemagick-images.pdf").read_bytes())},
    ).json()["id"]
    assert_problem(ask(api, "Q?", [text_id, text_id]), 422, "duplicate_document_ids")
    assert_problem(ask(api, "Q?", [text_id, "doc_missing"]), 404, "document_not_found")
    assert_problem(ask(api, "Q?", [scan]), 422, "document_not_citable")
    assert_problem(ask(api, "Q?", []), 422, "validation_error")
    assert_problem(ask(api, " ", [text_id]), 422, "validation_error")
    assert_problem(ask(api, "Q?", [text_id], temperature=0.5), 422, "validation_error")
    assert_problem(api.get("/v1/answers/ans_missing"), 404, "answer_not_found")
    assert fake.requests == []
    assert count_rows(database_url, ("answers",))["answers"] == 0


def test_the_page_limit_bounds_each_pdf_block(
    settings: Settings, fake: FakeUpstream, client: httpx.Client
) -> None:
    fake.reset(Reply(body=message([{"type": "text", "text": "Both."}])))
    with (
        behind(settings, fake, max_pdf_pages_per_document=3) as app,
        httpx.Client(base_url=app.base_url) as http,
    ):
        files = [
            (CORPUS / name).read_bytes() for name in ("pdflatex-4-pages.pdf", "multicolumn.pdf")
        ]
        ids = [
            http.post(
                "/v1/documents/upload", files={"file": ("f.pdf", data)}, data={"title": "T"}
            ).json()["id"]
            for data in files
        ]
        # 7 pages in all: the 4-page PDF goes as two windows, the 3-page one whole.
        assert ask(http, "Q?", ids, retrieval={"mode": "documents"}).status_code == 200
        blocks = [
            b for b in fake.requests[-1].body["messages"][0]["content"] if b["type"] == "document"
        ]
        assert [b["title"] for b in blocks] == ["T (pages 1–3)", "T (pages 4–4)", "T"]
        assert base64.b64decode(blocks[2]["source"]["data"]) == files[1]
        assert all(base64.b64decode(b["source"]["data"]).startswith(b"%PDF-") for b in blocks)
