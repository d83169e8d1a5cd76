"""Conversations: fixed documents, follow-ups that keep their grounding and hit the cache."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.settings import Settings
from tests.conftest import Served, behind
from tests.fake_upstream import GRASS, GRASS_ANSWER, FakeUpstream, Reply, message
from tests.fixture_files import FIXTURES

# The recorded answer, citing the document titled "Colours".
CITED = [
    GRASS_ANSWER[0],
    {
        **GRASS_ANSWER[1],
        "citations": [{**GRASS_ANSWER[1]["citations"][0], "document_title": "Colours"}],
    },
]


@pytest.fixture(scope="module")
def faked(settings: Settings, fake: FakeUpstream) -> Iterator[Served]:
    with behind(settings, fake) as app:
        yield app


@pytest.fixture
def api(client: httpx.Client, faked: Served, fake: FakeUpstream) -> Iterator[httpx.Client]:
    fake.reset(Reply(body=message(CITED)))
    with httpx.Client(base_url=faked.base_url, timeout=30) as http:
        yield http


def documents(http: httpx.Client) -> list[str]:
    first = http.post(
        "/v1/documents", json={"source": {"type": "text", "data": GRASS}, "title": "Colours"}
    ).json()["id"]
    second = http.post(
        "/v1/documents",
        json={"source": {"type": "content", "content": [{"type": "text", "text": "Block."}]}},
    ).json()["id"]
    return [first, second]


def follow_up(http: httpx.Client, conversation_id: str, question: str) -> httpx.Response:
    return http.post("/v1/answers", json={"question": question, "conversation_id": conversation_id})


def test_create_get_list_delete(api: httpx.Client) -> None:
    ids = documents(api)
    created = api.post(
        "/v1/conversations", json={"document_ids": ids, "title": "Colours", "system": "Be brief."}
    )
    assert created.status_code == 201, created.text
    conversation = created.json()
    assert conversation["id"].startswith("conv_")
    assert [d["document_id"] for d in conversation["documents"]] == ids
    assert conversation["title"] == "Colours" and conversation["system"] == "Be brief."
    first = follow_up(api, conversation["id"], "What colour is the grass?").json()
    second = follow_up(api, conversation["id"], "And the sky?").json()
    assert first["conversation_id"] == second["conversation_id"] == conversation["id"]
    got = api.get(f"/v1/conversations/{conversation['id']}").json()
    assert [a["id"] for a in got["answers"]] == [first["id"], second["id"]]
    assert [a["question"] for a in got["answers"]] == ["What colour is the grass?", "And the sky?"]
    assert got["answers"][0] == api.get(f"/v1/answers/{first['id']}").json()
    other = api.post("/v1/conversations", json={"document_ids": ids[:1]}).json()
    page = api.get("/v1/conversations", params={"limit": 1}).json()
    assert [c["id"] for c in page["data"]] == [other["id"]] and page["next_cursor"]
    rest = api.get("/v1/conversations", params={"cursor": page["next_cursor"]}).json()
    assert [c["id"] for c in rest["data"]] == [conversation["id"]]
    assert api.delete(f"/v1/conversations/{conversation['id']}").status_code == 204
    assert api.get(f"/v1/conversations/{conversation['id']}").status_code == 404
    assert api.get(f"/v1/answers/{first['id']}").status_code == 404


def test_every_view_of_a_conversation_names_its_documents(api: httpx.Client) -> None:
    """Created, got (before and after an answer) and listed: the same documents and titles."""
    ids = documents(api)
    created = api.post("/v1/conversations", json={"document_ids": ids}).json()
    expected = [
        {"document_index": 0, "document_id": ids[0], "title": "Colours"},
        {"document_index": 1, "document_id": ids[1], "title": None},
    ]
    assert created["documents"] == expected
    path = f"/v1/conversations/{created['id']}"
    assert api.get(path).json()["documents"] == expected
    listed = api.get("/v1/conversations", params={"limit": 1}).json()["data"]
    assert [(c["id"], c["documents"]) for c in listed] == [(created["id"], expected)]
    follow_up(api, created["id"], "What colour is the grass?")
    assert api.get(path).json()["documents"] == expected
    api.delete(f"/v1/documents/{ids[0]}")
    assert api.get(path).json()["documents"][0] == {**expected[0], "title": None}


@pytest.mark.parametrize(
    "body",
    [
        {"question": "Q?"},
        {"question": "Q?", "document_ids": ["doc_x"], "conversation_id": "conv_x"},
        {"question": "Q?", "conversation_id": "conv_x", "model": "other"},
        {"question": "Q?", "conversation_id": "conv_x", "system": "other"},
    ],
)
def test_documents_or_conversation(api: httpx.Client, body: dict[str, Any]) -> None:
    response = api.post("/v1/answers", json=body)
    assert response.status_code == 422 and response.json()["code"] == "validation_error"


def test_unknown_ids(api: httpx.Client) -> None:
    assert follow_up(api, "conv_missing", "Q?").json()["code"] == "conversation_not_found"
    response = api.post("/v1/conversations", json={"document_ids": ["doc_missing"]})
    assert response.status_code == 404 and response.json()["code"] == "document_not_found"
    assert api.delete("/v1/conversations/conv_missing").status_code == 404


def test_follow_up_replays_the_grounding(api: httpx.Client, fake: FakeUpstream) -> None:
    ids = documents(api)
    conversation = api.post(
        "/v1/conversations", json={"document_ids": ids, "system": "Be brief.", "model": "m-1"}
    ).json()
    follow_up(api, conversation["id"], "What colour is the grass?")
    follow_up(api, conversation["id"], "Are you sure?")
    third = follow_up(api, conversation["id"], "And the sky?")
    assert third.status_code == 200, third.text
    first, _, last = (r.body for r in fake.requests)
    assert last["system"] == "Be brief." and last["model"] == "m-1"
    # The documents once, in the first user turn, in the same order and bytes as before.
    assert last["messages"][0]["content"][:2] == first["messages"][0]["content"][:2]
    roles = [m["role"] for m in last["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
    assert [b["type"] for b in last["messages"][0]["content"]] == ["document", "document", "text"]
    assert last["messages"][0]["content"][2]["text"] == "What colour is the grass?"
    assert last["messages"][-1]["content"] == [{"type": "text", "text": "And the sky?"}]
    answer_blocks = last["messages"][1]["content"]
    assert answer_blocks[0] == {"type": "text", "text": "Based on the document, "}
    assert answer_blocks[1]["citations"] == [
        {
            "type": "char_location",
            "cited_text": "The grass is green. ",
            "document_index": 0,
            "document_title": "Colours",
            "start_char_index": 0,
            "end_char_index": 20,
        }
    ]
    # No citations on user text, which the API refuses.
    for turn in last["messages"]:
        if turn["role"] == "user":
            assert all("citations" not in b for b in turn["content"] if b["type"] == "text")
    marked = [
        (i, j)
        for i, turn in enumerate(last["messages"])
        for j, block in enumerate(turn["content"])
        if "cache_control" in block
    ]
    assert len(marked) <= 4
    assert (0, 1) in marked  # the last document
    assert marked[-1] == (3, len(last["messages"][3]["content"]) - 1)  # the previous answer


def test_failed_turns_are_left_out_of_the_history(api: httpx.Client, fake: FakeUpstream) -> None:
    ids = documents(api)
    conversation = api.post("/v1/conversations", json={"document_ids": ids}).json()
    fake.reset(
        Reply(400, {"type": "error", "error": {"type": "invalid_request_error", "message": "no"}})
    )
    assert follow_up(api, conversation["id"], "Bad question?").status_code == 422
    fake.reset(Reply(body=message(CITED)))
    assert follow_up(api, conversation["id"], "Good question?").status_code == 200
    sent = fake.requests[-1].body
    assert len(sent["messages"]) == 1
    assert sent["messages"][0]["content"][-1]["text"] == "Good question?"


def test_two_follow_ups_at_once_one_is_refused(api: httpx.Client, fake: FakeUpstream) -> None:
    ids = documents(api)
    conversation = api.post("/v1/conversations", json={"document_ids": ids}).json()
    fake.reset(Reply(body=message(CITED), delay=1.0))
    results: list[httpx.Response] = []

    def ask(question: str) -> None:
        with httpx.Client(base_url=str(api.base_url), timeout=30) as http:
            results.append(follow_up(http, conversation["id"], question))

    threads = [threading.Thread(target=ask, args=(f"Question {n}?",)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    statuses = sorted(r.status_code for r in results)
    assert statuses == [200, 409]
    refused = next(r for r in results if r.status_code == 409)
    assert refused.json()["code"] == "conversation_busy" and refused.headers["retry-after"]
    assert len(api.get(f"/v1/conversations/{conversation['id']}").json()["answers"]) == 1
    fake.reset(Reply(body=message(CITED)))
    assert follow_up(api, conversation["id"], "Later?").status_code == 200  # free again
    assert len(api.get(f"/v1/conversations/{conversation['id']}").json()["answers"]) == 2


def test_turns_read_the_prompt_cache_with_the_local_engine(client: httpx.Client) -> None:
    raw = (FIXTURES / "amazon_2023_letter.pdf").read_bytes()
    document = client.post("/v1/documents/upload", files={"file": ("letter.pdf", raw)}).json()
    conversation = client.post("/v1/conversations", json={"document_ids": [document["id"]]}).json()
    turns = [
        follow_up(client, conversation["id"], question).json()
        for question in (
            "What was Amazon's total revenue in 2023?",
            "How did AWS revenue grow?",
            "What about operating income?",
        )
    ]
    assert all(turn["status"] == "completed" for turn in turns)
    for turn in turns[1:]:
        assert turn["usage"]["cache_read_input_tokens"] > 1000, turn["usage"]
    # Each turn reads more than the one before: the previous answers are cached too.
    assert (
        turns[2]["usage"]["cache_read_input_tokens"] > turns[1]["usage"]["cache_read_input_tokens"]
    )


def test_streamed_follow_up(client: httpx.Client) -> None:
    document = client.post("/v1/documents", json={"source": {"type": "text", "data": GRASS}}).json()
    conversation = client.post("/v1/conversations", json={"document_ids": [document["id"]]}).json()
    follow_up(client, conversation["id"], "What colour is the grass?")
    with client.stream(
        "POST",
        "/v1/answers",
        json={"question": "And the sky?", "conversation_id": conversation["id"], "stream": True},
    ) as response:
        body = response.read().decode()
    assert "event: answer.done" in body
    answers = client.get(f"/v1/conversations/{conversation['id']}").json()["answers"]
    assert [a["question"] for a in answers] == ["What colour is the grass?", "And the sky?"]
    assert answers[1]["conversation_id"] == conversation["id"]


def test_follow_up_after_a_document_was_deleted(api: httpx.Client) -> None:
    """A failure after the conversation was claimed frees it again (no 409 afterwards)."""
    ids = documents(api)
    conversation = api.post("/v1/conversations", json={"document_ids": ids}).json()
    assert api.delete(f"/v1/documents/{ids[1]}").status_code == 204
    for _ in range(2):
        response = follow_up(api, conversation["id"], "Still there?")
        assert response.status_code == 404, response.text
        assert response.json()["code"] == "document_not_found"
