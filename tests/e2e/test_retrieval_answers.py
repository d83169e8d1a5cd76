"""Questions over a collection: passages go upstream as search results, and every
``search_result_location`` citation comes back resolved to the stored document it quotes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse

from app.settings import Settings
from tests.conftest import Served, behind
from tests.fake_upstream import GRASS, FakeUpstream, Reply, message, sse_message
from tests.fixture_files import FIXTURES

HELP_CENTER = sorted((FIXTURES / "help_center").glob("*.txt"))
PASSWORD = HELP_CENTER[0].read_text()  # "How to Change Your Password"


@pytest.fixture(scope="module")
def faked(settings: Settings, fake: FakeUpstream) -> Iterator[Served]:
    # A small budget: the grass sentence fits whole, a help-centre article does not.
    with behind(settings, fake, whole_documents_token_budget=50) as app:
        yield app


@pytest.fixture
def api(client: httpx.Client, faked: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=faked.base_url, timeout=60) as http:
        yield http


def text_document(http: httpx.Client, text: str, title: str) -> str:
    response = http.post(
        "/v1/documents", json={"source": {"type": "text", "data": text}, "title": title}
    )
    assert response.status_code in (200, 201), response.text
    document_id: str = response.json()["id"]
    return document_id


def collection_of(http: httpx.Client, *document_ids: str) -> str:
    collection = http.post("/v1/collections", json={"name": "Library"})
    assert collection.status_code == 201, collection.text
    collection_id: str = collection.json()["id"]
    added = http.post(
        f"/v1/collections/{collection_id}/documents", json={"document_ids": list(document_ids)}
    )
    assert added.status_code == 200, added.text
    return collection_id


def cited(index: int, text: str, first: int = 0, end: int = 1) -> dict[str, Any]:
    """A search_result_location as the real API writes it (source and title echoed)."""
    return {
        "type": "search_result_location",
        "cited_text": text,
        "source": "echoed",
        "title": "echoed",
        "search_result_index": index,
        "start_block_index": first,
        "end_block_index": end,
    }


def answer_citing(*citations: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"type": "text", "text": "From the library: "},
        {"type": "text", "text": "the grass is green", "citations": list(citations)},
    ]


def search_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        block
        for turn in body["messages"]
        if turn["role"] == "user"
        for block in turn["content"]
        if block["type"] == "search_result"
    ]


def cache_controls(body: dict[str, Any]) -> int:
    return sum("cache_control" in b for m in body["messages"] for b in m["content"])


def test_passages_go_upstream_as_search_results(api: httpx.Client, fake: FakeUpstream) -> None:
    grass = text_document(api, GRASS, "Colours")
    other = text_document(api, PASSWORD, "Passwords")
    collection_id = collection_of(api, grass, other)
    fake.reset(Reply(body=message(answer_citing(cited(0, "The grass is green. ")))))
    response = api.post(
        "/v1/answers",
        json={
            "question": "What colour is the grass?",
            "collection_id": collection_id,
            "retrieval": {"mode": "passages", "max_passages": 5},
        },
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    body = fake.requests[-1].body
    (turn,) = body["messages"]
    assert turn["content"][-1] == {"type": "text", "text": "What colour is the grass?"}
    assert not [b for b in turn["content"] if b["type"] == "document"]
    sent = search_results(body)
    passages = answer["retrieval"]["passages"]
    assert answer["retrieval"]["mode"] == "passages" and len(sent) == len(passages) <= 5
    assert passages[0]["document_id"] == grass
    assert all(block["citations"] == {"enabled": True} for block in sent)
    # One text block per chunk, the stored chunk texts exactly.
    chunks = api.get(f"/v1/documents/{grass}/chunks").json()["data"]
    assert [b["text"] for b in sent[0]["content"]] == [
        chunks[i]["text"] for i in passages[0]["chunk_indices"]
    ]
    assert 1 <= cache_controls(body) <= 4
    (citation,) = answer["segments"][1]["citations"]
    assert citation["document_id"] == grass and citation["verified"] is True
    assert citation["span"] == {
        "start_char": 0,
        "end_char": 20,
        "start_page": None,
        "end_page": None,
        "chunk_indices": [0],
        "locator": None,
        "boxes": [],  # a text document's span has no boxes on a page
    }
    assert citation["search_result_index"] == 0  # the upstream's fields are kept
    assert api.get(f"/v1/answers/{answer['id']}").json() == answer


def test_auto_sends_whole_documents_that_fit_and_passages_past_the_budget(
    api: httpx.Client, fake: FakeUpstream
) -> None:
    grass = text_document(api, GRASS, "Colours")
    fake.reset(Reply(body=message([{"type": "text", "text": "Green."}])))
    small = api.post("/v1/answers", json={"question": "Grass?", "document_ids": [grass]}).json()
    assert small["retrieval"] == {"mode": "documents", "passages": [], "first_new_passage": 0}
    assert [b["type"] for b in fake.requests[-1].body["messages"][0]["content"]] == [
        "document",
        "text",
    ]
    big = text_document(api, PASSWORD, "Passwords")
    large = api.post(
        "/v1/answers", json={"question": "How do I change my password?", "document_ids": [big]}
    ).json()
    assert large["retrieval"]["mode"] == "passages" and large["documents"] == []
    assert large["retrieval"]["passages"][0]["document_id"] == big
    assert search_results(fake.requests[-1].body)
    # Asked for whole documents, it gets them: the budget only guides `auto`.
    whole = api.post(
        "/v1/answers",
        json={
            "question": "How do I change my password?",
            "document_ids": [big],
            "retrieval": {"mode": "documents"},
        },
    )
    assert whole.status_code == 200 and whole.json()["retrieval"]["mode"] == "documents"


def test_documents_that_cannot_be_sent_whole_are_refused_in_documents_mode(
    api: httpx.Client, fake: FakeUpstream
) -> None:
    """101 documents are more than one request takes whole: `documents` is 422, `auto` passages."""
    ids = [text_document(api, f"Fact number {n} is true. ", f"Fact {n}") for n in range(101)]
    collection_id = collection_of(api, *ids)
    fake.reset(Reply(body=message([{"type": "text", "text": "True."}])))
    question = {"question": "Is fact number 7 true?", "collection_id": collection_id}
    refused = api.post("/v1/answers", json={**question, "retrieval": {"mode": "documents"}})
    assert refused.status_code == 422, refused.text
    assert refused.json()["code"] == "document_too_large"
    assert "101 documents" in refused.json()["detail"] and "passages" in refused.json()["detail"]
    assert fake.requests == []
    auto = api.post("/v1/answers", json=question)
    assert auto.status_code == 200 and auto.json()["retrieval"]["mode"] == "passages"


def test_a_streamed_passages_answer_is_the_stored_one(
    api: httpx.Client, fake: FakeUpstream
) -> None:
    grass = text_document(api, GRASS, "Colours")
    collection_id = collection_of(api, grass)
    content = answer_citing(cited(0, "The grass is green. "))
    body = {
        "question": "What colour is the grass?",
        "collection_id": collection_id,
        "retrieval": {"mode": "passages"},
    }
    fake.reset(Reply(events=sse_message(content)))
    events = stream(api, body)
    (citation,) = [data["citation"] for name, data in events if name == "citation"]
    assert citation["document_id"] == grass and citation["verified"] is True
    name, done = events[-1]
    assert name == "answer.done" and done["retrieval"]["mode"] == "passages"
    assert api.get(f"/v1/answers/{done['id']}").json() == done
    fake.reset(Reply(body=message(content)))
    whole = api.post("/v1/answers", json=body).json()
    differ = ("id", "created_at", "upstream", "usage")
    assert {k: v for k, v in done.items() if k not in differ} == {
        k: v for k, v in whole.items() if k not in differ
    }


def stream(http: httpx.Client, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    with connect_sse(http, "POST", "/v1/answers", json={**body, "stream": True}) as source:
        assert source.response.status_code == 200, source.response.read()
        return [(event.event, json.loads(event.data)) for event in source.iter_sse()]


def test_count_tokens_sends_the_passages(api: httpx.Client, fake: FakeUpstream) -> None:
    big = text_document(api, PASSWORD, "Passwords")
    collection_id = collection_of(api, big)
    fake.reset(Reply(body={"input_tokens": 321}))
    response = api.post(
        "/v1/answers/count-tokens",
        json={"question": "How do I change my password?", "collection_id": collection_id},
    )
    assert response.json() == {"input_tokens": 321}
    recorded = fake.requests[-1]
    assert recorded.path == "/v1/messages/count_tokens" and search_results(recorded.body)


def test_a_conversation_over_a_collection_replays_earlier_passages(
    api: httpx.Client, fake: FakeUpstream
) -> None:
    grass = text_document(api, GRASS, "Colours")
    password = text_document(api, PASSWORD, "Passwords")
    collection_id = collection_of(api, grass, password)
    created = api.post("/v1/conversations", json={"collection_id": collection_id})
    assert created.status_code == 201, created.text
    conversation = created.json()
    assert conversation["collection_id"] == collection_id and conversation["documents"] == []
    ask = {"conversation_id": conversation["id"]}
    fake.reset(Reply(body=message(answer_citing(cited(0, "The grass is green. ")))))
    first = api.post("/v1/answers", json={**ask, "question": "What colour is the grass?"}).json()
    first_request_passages = search_results(fake.requests[-1].body)
    earlier = len(first["retrieval"]["passages"])
    assert first["retrieval"]["first_new_passage"] == 0 and earlier >= 1
    # The second answer cites the first block of the best passage for the second question.
    question = "How do I change my password?"
    best = api.post(
        "/v1/search", json={"query": question, "collection_id": collection_id, "limit": 20}
    ).json()["data"][0]
    assert best["document_id"] == password
    chunks = api.get(f"/v1/documents/{password}/chunks").json()["data"]
    first_block = chunks[best["chunk_indices"][0]]["text"]
    fake.reset(Reply(body=message(answer_citing(cited(earlier, first_block)))))
    second = api.post("/v1/answers", json={**ask, "question": question}).json()
    body = fake.requests[-1].body
    user, assistant, follow_up = body["messages"]
    # The first turn goes back as it was asked: its passages, its question, its answer (the
    # breakpoint moves to the end of that answer: a mark, not part of the cached prefix).
    assert search_results({"messages": [user]}) == [
        {k: v for k, v in block.items() if k != "cache_control"} for block in first_request_passages
    ]
    assert user["content"][-1] == {"type": "text", "text": "What colour is the grass?"}
    assert assistant["content"][-1]["citations"][0]["search_result_index"] == 0
    assert follow_up["content"][-1] == {"type": "text", "text": "How do I change my password?"}
    assert second["retrieval"]["first_new_passage"] == earlier
    assert second["retrieval"]["passages"][:earlier] == first["retrieval"]["passages"]
    assert second["retrieval"]["passages"][earlier]["document_id"] == password
    (citation,) = second["segments"][1]["citations"]
    assert citation["document_id"] == password and citation["verified"] is True
    assert cache_controls(body) <= 4
    got = api.get(f"/v1/conversations/{conversation['id']}").json()
    assert [a["id"] for a in got["answers"]] == [first["id"], second["id"]]


def test_unknown_collection_in_a_question(api: httpx.Client) -> None:
    response = api.post("/v1/answers", json={"question": "Q?", "collection_id": "col_missing"})
    assert response.status_code == 404 and response.json()["code"] == "collection_not_found"
    both = api.post(
        "/v1/answers", json={"question": "Q?", "collection_id": "col_x", "document_ids": ["d"]}
    )
    assert both.status_code == 422 and both.json()["code"] == "validation_error"


# Questions from bench/retrieval_questions.jsonl whose answers stand on known pages of real PDFs.
QUESTIONS = [
    json.loads(line)
    for line in (Path(__file__).parents[2] / "bench" / "retrieval_questions.jsonl")
    .read_text()
    .splitlines()
    if line.strip()
]
# A sample over the four PDFs. The local engine is a plain extractive ranker: for some of the
# benchmark's questions (tables, paraphrases) it cites a neighbouring page; bench/retrieval.py
# measures retrieval over all of them.
ASKED = (
    "How much did Amazon's total revenue grow in 2023?",
    "What was North America revenue in 2023?",
    "How did international revenue change?",
    "round pegs in square holes",
    "Who wrote the two-column document and when?",
    "Was ist die Teilraumtopologie?",
)
PDF_QUESTIONS = [q for q in QUESTIONS if q["question"] in ASKED]


def page_of(http: httpx.Client, document_id: str, quote: str) -> int:
    chunks: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 100, **({"cursor": cursor} if cursor else {})}
        page = http.get(f"/v1/documents/{document_id}/chunks", params=params).json()
        chunks += page["data"]
        if not (cursor := page["next_cursor"]):
            break
    for start in range(len(chunks)):
        text = ""
        for chunk in chunks[start : start + 4]:
            text += chunk["text"]
            if " ".join(quote.split()) in " ".join(text.split()):
                number: int = chunks[start]["page_number"]
                return number
    raise AssertionError(f"{quote!r} is not in {document_id}")


def test_the_local_engine_cites_the_pages_that_answer(client: httpx.Client) -> None:
    """A library of the sample PDFs and the help-centre articles, asked through the embedded
    local engine: each answer cites, verified, a passage on the page that holds the answer."""
    ids = {}
    for name in sorted({q["document"] for q in QUESTIONS}):
        path = FIXTURES.parent / name
        uploaded = client.post(
            "/v1/documents/upload", files={"file": (path.name, path.read_bytes())}
        )
        assert uploaded.status_code == 201, uploaded.text
        ids[name] = uploaded.json()["id"]
    collection_id = collection_of(client, *ids.values())
    assert len(PDF_QUESTIONS) == len(ASKED)
    for question in PDF_QUESTIONS:
        document_id = ids[question["document"]]
        page = page_of(client, document_id, question["quote"])
        response = client.post(
            "/v1/answers",
            json={
                "question": question["question"],
                "collection_id": collection_id,
                "retrieval": {"mode": "passages", "max_passages": 10},
            },
        )
        assert response.status_code == 200, response.text
        answer = response.json()
        citations = [c for s in answer["segments"] for c in s["citations"]]
        assert citations and all(c["type"] == "search_result_location" for c in citations)
        assert all(c["verified"] for c in citations), citations
        on_page = [
            c
            for c in citations
            if c["document_id"] == document_id and c["span"]["start_page"] == page
        ]
        assert on_page, (question, page, [(c["document_id"], c["span"]) for c in citations])


@pytest.mark.parametrize(
    "question",
    ['"grass" AND NEAR(sky*)', "-(colour): 🌱", "'; DROP TABLE documents; --", "***", "()"],
)
def test_a_question_is_words_never_query_syntax(
    api: httpx.Client, fake: FakeUpstream, question: str
) -> None:
    grass = text_document(api, GRASS, "Colours")
    collection_id = collection_of(api, grass)
    fake.reset(Reply(body={"input_tokens": 5}))
    passages = {"mode": "passages"}
    response = api.post(
        "/v1/answers/count-tokens",
        json={"question": question, "collection_id": collection_id, "retrieval": passages},
    )
    assert response.status_code == 200, response.text


def test_a_turn_with_nothing_to_send_back_is_left_out_with_its_passages(
    api: httpx.Client, fake: FakeUpstream
) -> None:
    """A completed answer with no text is not replayed (the upstream refuses an empty assistant
    turn); its passages are not sent again either, so the next answer's indices count without
    them."""
    grass = text_document(api, GRASS, "Colours")
    collection_id = collection_of(api, grass)
    conversation = api.post("/v1/conversations", json={"collection_id": collection_id}).json()
    ask = {"conversation_id": conversation["id"], "question": "What colour is the grass?"}
    fake.reset(Reply(body=message([])))
    empty = api.post("/v1/answers", json=ask).json()
    assert empty["status"] == "completed" and empty["text"] == ""
    fake.reset(Reply(body=message(answer_citing(cited(0, "The grass is green. ")))))
    second = api.post("/v1/answers", json=ask).json()
    (turn,) = fake.requests[-1].body["messages"]  # nothing earlier is replayed
    assert len(search_results({"messages": [turn]})) == len(second["retrieval"]["passages"])
    assert second["retrieval"]["first_new_passage"] == 0
    (citation,) = second["segments"][1]["citations"]
    assert citation["document_id"] == grass and citation["verified"] is True
