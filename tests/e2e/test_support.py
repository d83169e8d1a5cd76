"""Every citation of every answer carries its support: answered whole, streamed, stored and read
again, in a conversation and in a batch; the `support` option chooses how it is checked."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse
from pydantic import SecretStr

from app.settings import Settings
from tests.conftest import Served, ServedApp, behind
from tests.fake_upstream import FakeUpstream, Reply, message, sse_message

SECRET = "sk-ant-test-0123456789abcdefghijklmnop"
LETTER = "Revenue grew 12% to $575B in 2023. AWS revenue grew 13% that year. Kuiper launched."


def cite(sentence: str, title: str = "Letter") -> dict[str, Any]:
    start = LETTER.index(sentence)
    return {
        "type": "char_location",
        "cited_text": sentence,
        "document_index": 0,
        "document_title": title,
        "start_char_index": start,
        "end_char_index": start + len(sentence),
    }


# The model's answer: the first claim holds, the second misquotes its figure, the third cites
# nothing.
CONTENT: list[dict[str, Any]] = [
    {
        "type": "text",
        "text": "Revenue grew 12 percent to 575 billion dollars.",
        "citations": [cite("Revenue grew 12% to $575B in 2023. ")],
    },
    {
        "type": "text",
        "text": " AWS revenue grew 31% that year.",
        "citations": [cite("AWS revenue grew 13% that year. ")],
    },
    {"type": "text", "text": " That is all I found."},
]


@pytest.fixture(scope="module")
def answering(settings: Settings, fake: FakeUpstream) -> Iterator[Served]:
    with behind(settings, fake, anthropic_api_key=SecretStr(SECRET)) as app:
        yield app


@pytest.fixture
def api(client: httpx.Client, answering: Served, fake: FakeUpstream) -> Iterator[httpx.Client]:
    fake.reset(Reply(body=message(CONTENT)))
    with httpx.Client(base_url=answering.base_url, timeout=30) as http:
        yield http


def letter(api: httpx.Client) -> str:
    response = api.post(
        "/v1/documents", json={"source": {"type": "text", "data": LETTER}, "title": "Letter"}
    )
    assert response.status_code in (200, 201), response.text
    return str(response.json()["id"])


def supports(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return [c["support"] for s in answer["segments"] for c in s["citations"]]


def test_each_citation_gets_a_verdict_that_is_stored(api: httpx.Client) -> None:
    document_id = letter(api)
    response = api.post("/v1/answers", json={"question": "How?", "document_ids": [document_id]})
    assert response.status_code == 200, response.text
    answer = response.json()
    first, second = supports(answer)
    assert first == {"verdict": "supported", "score": 1.0, "method": "lexical", "reasons": []}
    assert second["verdict"] == "partial" and second["method"] == "lexical"
    (reason,) = second["reasons"]
    assert (reason["code"], reason["claim"]) == ("number_not_in_source", "31%")
    assert answer["support_summary"] == {
        "supported": 1,
        "partial": 1,
        "unsupported": 0,
        "unchecked": 0,
        "uncited_segments": 1,
    }
    stored = api.get(f"/v1/answers/{answer['id']}")
    assert stored.status_code == 200 and stored.json() == answer


def test_support_off_leaves_every_citation_unchecked(api: httpx.Client) -> None:
    document_id = letter(api)
    body = {"question": "How?", "document_ids": [document_id], "support": "off"}
    answer = api.post("/v1/answers", json=body).json()
    assert {s["verdict"] for s in supports(answer)} == {"unchecked"}
    assert answer["support_summary"]["unchecked"] == 2
    assert api.get(f"/v1/answers/{answer['id']}").json() == answer


@pytest.mark.parametrize("value", ["LEXICAL", "maybe", 1, None, ""])
def test_an_invalid_support_value_is_refused(api: httpx.Client, value: Any) -> None:
    document_id = letter(api)
    body = {"question": "How?", "document_ids": [document_id], "support": value}
    response = api.post("/v1/answers", json=body)
    if value is None:  # null is as good as absent
        assert response.status_code == 200, response.text
        return
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == "validation_error"


def test_a_stream_sends_each_citation_after_its_text_with_its_verdict(
    api: httpx.Client, fake: FakeUpstream
) -> None:
    document_id = letter(api)
    fake.reset(Reply(events=sse_message(CONTENT)))
    body = {"question": "How?", "document_ids": [document_id], "stream": True}
    with connect_sse(api, "POST", "/v1/answers", json=body) as source:
        assert source.response.status_code == 200
        events = [(event.event, json.loads(event.data)) for event in source.iter_sse()]
    names = [name for name, _ in events]
    for segment in (0, 1):
        at = names.index("citation", names.index("segment.started") if segment == 0 else 0)
        of_segment = [
            i for i, (name, data) in enumerate(events) if data.get("segment_index") == segment
        ]
        kinds = [names[i] for i in of_segment]
        assert kinds[-2:] == ["citation", "segment.done"], kinds
        assert "text.delta" not in kinds[kinds.index("citation") :]
        assert at >= 0
    streamed = [data["citation"]["support"] for name, data in events if name == "citation"]
    done = events[-1][1]
    assert names[-1] == "answer.done"
    assert streamed == supports(done)
    assert [s["verdict"] for s in streamed] == ["supported", "partial"]
    assert done["support_summary"]["partial"] == 1
    assert api.get(f"/v1/answers/{done['id']}").json() == done


def test_each_turn_of_a_conversation_takes_its_own_support(
    api: httpx.Client, fake: FakeUpstream
) -> None:
    document_id = letter(api)
    conversation = api.post("/v1/conversations", json={"document_ids": [document_id]}).json()
    first = api.post(
        "/v1/answers", json={"question": "How?", "conversation_id": conversation["id"]}
    ).json()
    second = api.post(
        "/v1/answers",
        json={"question": "And?", "conversation_id": conversation["id"], "support": "off"},
    ).json()
    assert [s["verdict"] for s in supports(first)] == ["supported", "partial"]
    assert [s["verdict"] for s in supports(second)] == ["unchecked", "unchecked"]
    turns = api.get(f"/v1/conversations/{conversation['id']}").json()["answers"]
    assert turns == [first, second]


def test_the_setting_chooses_when_the_question_does_not(
    settings: Settings, fake: FakeUpstream, client: httpx.Client
) -> None:
    fake.reset(Reply(body=message(CONTENT)))
    with (
        behind(settings, fake, anthropic_api_key=SecretStr(SECRET), support_check="off") as app,
        httpx.Client(base_url=app.base_url, timeout=30) as http,
    ):
        document_id = letter(http)
        body = {"question": "How?", "document_ids": [document_id]}
        assert {s["verdict"] for s in supports(http.post("/v1/answers", json=body).json())} == {
            "unchecked"
        }
        lexical = http.post("/v1/answers", json={**body, "support": "lexical"}).json()
        assert [s["verdict"] for s in supports(lexical)] == ["supported", "partial"]


def test_a_batchs_answers_are_checked_as_each_request_asks(
    settings: Settings, client: httpx.Client
) -> None:
    fast = {"batch_poller": True, "batch_poll_seconds": 0.05, "batch_poll_max_seconds": 0.2}
    # The local engine answers: its quotes of the letter support themselves.
    with (
        ServedApp(settings.model_copy(update=fast)) as app,
        httpx.Client(base_url=app.base_url, timeout=60) as http,
    ):
        document_id = letter(http)
        ask = {"question": "How fast did AWS revenue grow?", "document_ids": [document_id]}
        requests = [
            {"custom_id": "checked", **ask},
            {"custom_id": "unchecked", **ask, "support": "off"},
            {"custom_id": "invalid", **ask, "support": "sometimes"},
        ]
        created = http.post("/v1/answer-batches", json={"requests": requests})
        assert created.status_code in (200, 201), created.text
        batch_id = created.json()["id"]
        deadline = time.monotonic() + 60
        while http.get(f"/v1/answer-batches/{batch_id}").json()["status"] != "ended":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        results = http.get(f"/v1/answer-batches/{batch_id}/results").json()["data"]
        by_id = {result["custom_id"]: result for result in results}
        assert by_id["invalid"]["status"] == "errored"
        assert by_id["invalid"]["error"]["code"] == "validation_error"
        checked = by_id["checked"]["answer"]
        unchecked = by_id["unchecked"]["answer"]
        assert supports(checked) and {s["verdict"] for s in supports(checked)} == {"supported"}
        assert {s["verdict"] for s in supports(unchecked)} == {"unchecked"}
        stored = http.get(f"/v1/answers/{checked['id']}").json()
        assert stored["support_summary"] == checked["support_summary"]


def judged(*verdicts: dict[str, Any], input_tokens: int = 321, output_tokens: int = 45) -> Reply:
    """The judge's answer: its record_support call."""
    call = {
        "type": "tool_use",
        "id": "toolu_fake01",
        "name": "record_support",
        "input": {"verdicts": list(verdicts)},
    }
    usage = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    return Reply(body=message([call], stop_reason="tool_use", usage=usage))


def has_documents(body: dict[str, Any]) -> bool:
    return any(
        isinstance(block, dict) and block.get("type") in ("document", "search_result")
        for turn in body["messages"]
        for block in (turn["content"] if isinstance(turn["content"], list) else [])
    )


def test_the_judge_is_one_more_call_about_what_the_lexical_check_doubted(
    api: httpx.Client, fake: FakeUpstream
) -> None:
    document_id = letter(api)
    fake.reset(
        Reply(body=message(CONTENT)),
        judged({"citation": 0, "verdict": "unsupported", "reason": "31% is not 13%."}),
    )
    body = {"question": "How?", "document_ids": [document_id], "support": "judge"}
    response = api.post("/v1/answers", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert fake.paths() == ["/v1/messages", "/v1/messages"]  # exactly one extra call
    asked, judge = (recorded.body for recorded in fake.requests)
    assert has_documents(asked) and not has_documents(judge)  # citations off: nothing to cite
    assert [tool["name"] for tool in judge["tools"]] == ["record_support"]
    assert judge["tool_choice"] == {"type": "tool", "name": "record_support"}
    assert judge["model"] == asked["model"]
    # Only the citation the lexical check did not find supported is judged.
    prompt = judge["messages"][0]["content"]
    assert "AWS revenue grew 31% that year." in prompt and "575 billion" not in prompt
    first, second = supports(answer)
    assert first["method"] == "lexical" and first["verdict"] == "supported"
    assert second["method"] == "judge" and second["verdict"] == "unsupported"
    assert second["reasons"][0]["detail"] == "31% is not 13%."
    assert answer["usage"]["support_check"] == {"input_tokens": 321, "output_tokens": 45}
    assert answer["usage"]["input_tokens"] == 25  # the answer's own call's, unchanged
    assert answer["support_summary"]["unsupported"] == 1
    assert api.get(f"/v1/answers/{answer['id']}").json() == answer


def test_nothing_doubted_asks_no_judge(api: httpx.Client, fake: FakeUpstream) -> None:
    document_id = letter(api)
    fake.reset(Reply(body=message(CONTENT[:1])), judged())
    body = {"question": "How?", "document_ids": [document_id], "support": "judge"}
    answer = api.post("/v1/answers", json=body).json()
    assert fake.paths() == ["/v1/messages"]
    assert [s["verdict"] for s in supports(answer)] == ["supported"]
    assert "support_check" not in answer["usage"]


@pytest.mark.parametrize(
    ("reply", "tokens"),
    [
        (Reply(body=message([{"type": "text", "text": "They look fine."}])), True),
        (judged({"citation": 7, "verdict": "supported", "reason": ""}), True),
        (Reply(400, {"type": "error", "error": {"type": "invalid_request_error"}}), False),
    ],
    ids=["no tool call", "wrong citation number", "refused"],
)
def test_a_judge_that_fails_leaves_the_lexical_verdict(
    api: httpx.Client, fake: FakeUpstream, reply: Reply, tokens: bool
) -> None:
    document_id = letter(api)
    fake.reset(Reply(body=message(CONTENT)), reply)
    body = {"question": "How?", "document_ids": [document_id], "support": "judge"}
    response = api.post("/v1/answers", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert fake.paths() == ["/v1/messages", "/v1/messages"]  # no retry of a usable refusal
    second = supports(answer)[1]
    assert (second["method"], second["verdict"]) == ("lexical", "partial")
    assert [r["code"] for r in second["reasons"]] == ["number_not_in_source", "judge_failed"]
    assert ("support_check" in answer["usage"]) is tokens


def test_a_judged_stream_sends_lexical_verdicts_then_the_judges_in_answer_done(
    api: httpx.Client, fake: FakeUpstream
) -> None:
    document_id = letter(api)
    fake.reset(
        Reply(events=sse_message(CONTENT)),
        judged({"citation": 0, "verdict": "unsupported", "reason": "No."}),
    )
    body = {"question": "How?", "document_ids": [document_id], "support": "judge", "stream": True}
    with connect_sse(api, "POST", "/v1/answers", json=body) as source:
        events = [(event.event, json.loads(event.data)) for event in source.iter_sse()]
    streamed = [data["citation"]["support"] for name, data in events if name == "citation"]
    assert [(s["method"], s["verdict"]) for s in streamed] == [
        ("lexical", "supported"),
        ("lexical", "partial"),
    ]
    done = events[-1][1]
    assert [(s["method"], s["verdict"]) for s in supports(done)] == [
        ("lexical", "supported"),
        ("judge", "unsupported"),
    ]
    assert done["usage"]["support_check"] == {"input_tokens": 321, "output_tokens": 45}
    assert api.get(f"/v1/answers/{done['id']}").json() == done


def test_a_batchs_judged_answers_are_judged_before_they_are_stored(
    settings: Settings, fake: FakeUpstream, client: httpx.Client, database_url: str
) -> None:
    fast = {"batch_poller": True, "batch_poll_seconds": 0.05, "batch_poll_max_seconds": 0.2}
    verdict = {"citation": 0, "verdict": "unsupported", "reason": "31% is not 13%."}
    with (
        behind(settings, fake, anthropic_api_key=SecretStr(SECRET), **fast) as app,
        httpx.Client(base_url=app.base_url, timeout=60) as http,
    ):
        document_id = letter(http)
        # Every request of the batch gets CONTENT (one citation in doubt); the judge's calls,
        # one per judged answer, each get the same verdict.
        fake.reset(judged(verdict), judged(verdict), judged(verdict))
        fake.batch_result = lambda custom_id, params: {
            "type": "succeeded",
            "message": message(CONTENT),
        }
        ask = {"question": "How?", "document_ids": [document_id]}
        requests = [
            {"custom_id": "judged-1", **ask, "support": "judge"},
            {"custom_id": "judged-2", **ask, "support": "judge"},
            {"custom_id": "lexical", **ask},
        ]
        created = http.post("/v1/answer-batches", json={"requests": requests})
        assert created.status_code == 201, created.text
        batch_id = created.json()["id"]
        deadline = time.monotonic() + 60
        while http.get(f"/v1/answer-batches/{batch_id}").json()["status"] != "ended":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        results = http.get(f"/v1/answer-batches/{batch_id}/results").json()["data"]
        by_id = {result["custom_id"]: result["answer"] for result in results}
        # Exactly one judge call per judged answer, citations off, the tool asked for.
        calls = [r.body for r in fake.requests if r.path == "/v1/messages"]
        assert len(calls) == 2
        for call in calls:
            assert not has_documents(call)
            assert call["tool_choice"] == {"type": "tool", "name": "record_support"}
            assert "AWS revenue grew 31% that year." in call["messages"][0]["content"]
        for custom_id in ("judged-1", "judged-2"):
            answer = by_id[custom_id]
            first, second = supports(answer)
            assert (first["method"], first["verdict"]) == ("lexical", "supported")
            assert (second["method"], second["verdict"]) == ("judge", "unsupported")
            assert answer["usage"]["support_check"] == {"input_tokens": 321, "output_tokens": 45}
            assert answer["support_summary"]["unsupported"] == 1
            # Stored as returned: judged before it was stored, never after.
            assert http.get(f"/v1/answers/{answer['id']}").json() == answer
        lexical = by_id["lexical"]
        assert [(s["method"], s["verdict"]) for s in supports(lexical)] == [
            ("lexical", "supported"),
            ("lexical", "partial"),
        ]
        assert "support_check" not in lexical["usage"]
