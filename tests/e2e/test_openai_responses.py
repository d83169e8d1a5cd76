"""The Responses API through the official OpenAI Python SDK and LangChain's ChatOpenAI: answers
over input files and over a vector store with file_search (whole and streamed, in OpenAI's
event order), file_citation annotations whose quotes are the stored text, follow-ups by
previous_response_id in one conversation, what goes upstream, and the refusals."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from langchain_openai import ChatOpenAI

from app.settings import Settings
from tests.conftest import Served, ServedApp, behind, count_rows
from tests.e2e.test_auth import make_key
from tests.e2e.test_openai_chat import document_text, sdk
from tests.fake_upstream import GRASS, GRASS_ANSWER, FakeUpstream, Reply, error, message
from tests.fixture_files import AMAZON_PDF

SEA = "The sea is deep and salty. Fish swim in it."
QUESTION = "What color is the grass? What was Amazon's total revenue in 2023?"


def input_files(*file_ids: str, question: str = QUESTION) -> list[Any]:
    parts = [{"type": "input_file", "file_id": file_id} for file_id in file_ids]
    return [{"role": "user", "content": [*parts, {"type": "input_text", "text": question}]}]


def file_search(store_id: str, **options: Any) -> list[Any]:
    return [{"type": "file_search", "vector_store_ids": [store_id], **options}]


def check_citations(base_url: str, output_text: dict[str, Any], stored: dict[str, Any]) -> None:
    """Each file_citation stands at the end of a cited segment and quotes exactly what its
    stored document says at its span."""
    ends = {s["end"]: s for s in stored["segments"] if s["citations"]}
    annotations = output_text["annotations"]
    assert annotations and len(annotations) == sum(len(s["citations"]) for s in ends.values())
    for annotation in annotations:
        assert annotation["type"] == "file_citation"
        citegate = annotation["citegate"]
        assert annotation["file_id"] == citegate["document_id"]
        assert annotation["index"] in ends
        assert citegate["verified"] is True, annotation
        verdicts = [  # the support verdict the stored answer gives this citation
            citation["support"]
            for citation in ends[annotation["index"]]["citations"]
            if citation["document_id"] == citegate["document_id"]
        ]
        assert citegate["support"] in verdicts, annotation
        span = citegate["span"]
        text = document_text(base_url, citegate["document_id"])
        quoted = text[span["start_char"] : span["end_char"]]
        assert " ".join(quoted.split()) == " ".join(citegate["cited_text"].split())


@pytest.fixture
def api(client: httpx.Client, served: Served) -> Iterator[openai.OpenAI]:
    with sdk(served.base_url) as api:
        yield api


def test_a_response_over_input_files_cites_verified_spans(
    api: openai.OpenAI, served: Served
) -> None:
    grass = api.files.create(file=("grass.txt", GRASS.encode()), purpose="user_data")
    pdf = api.files.create(
        file=(AMAZON_PDF.name, AMAZON_PDF.read_bytes(), "application/pdf"), purpose="user_data"
    )
    raw = api.responses.with_raw_response.create(
        model="claude-sonnet-5",
        input=input_files(grass.id, pdf.id),
        instructions="Be brief.",
        max_output_tokens=400,
    )
    response = raw.parse()
    assert (response.object, response.status, response.id) == (
        "response",
        "completed",
        raw.headers["citegate-answer-id"],
    )
    assert (response.instructions, response.max_output_tokens) == ("Be brief.", 400)
    (item,) = response.model_dump()["output"]
    assert (item["type"], item["role"], item["status"]) == ("message", "assistant", "completed")
    shown = response.model_dump()["output"][0]["content"][0]
    stored = httpx.get(f"{served.base_url}/v1/answers/{response.id}").json()
    assert stored["text"] == response.output_text == shown["text"]
    # Over documents, a response is a plain answer until a follow-up makes its conversation.
    assert stored["conversation_id"] is None
    check_citations(served.base_url, shown, stored)
    assert {a["file_id"] for a in shown["annotations"]} == {grass.id, pdf.id}
    assert {a["filename"] for a in shown["annotations"]} == {"grass.txt", AMAZON_PDF.name}
    usage = response.usage
    assert usage is not None and usage.output_tokens == stored["usage"]["output_tokens"]

    again = api.responses.retrieve(response.id)
    assert again.model_dump()["output"] == response.model_dump()["output"] or _same_but_boxes(
        again.model_dump()["output"], response.model_dump()["output"]
    )
    assert again.instructions == "Be brief."


def _plain(value: Any) -> Any:
    return value.model_dump() if hasattr(value, "model_dump") else value


def _same_but_boxes(one: Any, other: Any) -> bool:
    """Equal once every span's boxes are left out (a PDF's are measured once stored)."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "boxes"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return bool(strip(one) == strip(other))


def test_file_search_over_a_vector_store_and_a_follow_up(
    api: openai.OpenAI, served: Served
) -> None:
    grass = api.files.create(file=("grass.txt", GRASS.encode()), purpose="assistants")
    sea = api.files.create(file=("sea.txt", SEA.encode()), purpose="assistants")
    store = api.vector_stores.create(name="Nature", file_ids=[grass.id, sea.id])
    first = api.responses.create(
        model="claude-sonnet-5",
        input="How deep is the sea?",
        tools=file_search(store.id, max_num_results=5),
        include=["file_search_call.results"],
    )
    search, message_item = first.model_dump()["output"]
    assert (search["type"], search["status"], search["queries"]) == (
        "file_search_call",
        "completed",
        ["How deep is the sea?"],
    )
    results = search["results"]
    assert results[0]["file_id"] == sea.id and results[0]["filename"] == "sea.txt"
    assert all(r["text"] in document_text(served.base_url, r["file_id"]) for r in results)
    stored = httpx.get(f"{served.base_url}/v1/answers/{first.id}").json()
    assert stored["retrieval"]["mode"] == "passages" and len(stored["retrieval"]["passages"]) <= 5
    check_citations(served.base_url, message_item["content"][0], stored)
    assert {a["file_id"] for a in message_item["content"][0]["annotations"]} <= {
        r["file_id"] for r in results
    }
    # Without include, the call is there without its results.
    plain = api.responses.retrieve(first.id).model_dump()["output"][0]
    assert plain["type"] == "file_search_call" and plain["results"] is None

    follow = api.responses.create(
        model="claude-sonnet-5",
        input="And what color is the grass?",
        previous_response_id=first.id,
        tools=file_search(store.id),  # the same tool again, as agents resend it
    )
    assert follow.previous_response_id == first.id
    assert "green" in follow.output_text
    later = httpx.get(f"{served.base_url}/v1/answers/{follow.id}").json()
    assert later["conversation_id"] == stored["conversation_id"]
    conversation = httpx.get(f"{served.base_url}/v1/conversations/{later['conversation_id']}")
    assert [a["id"] for a in conversation.json()["answers"]] == [first.id, follow.id]
    assert conversation.json()["collection_id"] == store.id
    check_citations(served.base_url, follow.model_dump()["output"][1]["content"][0], later)
    again = api.responses.retrieve(follow.id)
    assert again.previous_response_id == first.id
    assert [t.model_dump(exclude_none=True) for t in again.tools] == [
        {"type": "file_search", "vector_store_ids": [store.id]}
    ]

    with pytest.raises(openai.BadRequestError) as refused:
        api.responses.create(
            model="claude-sonnet-5", input="Why?", previous_response_id=first.id, instructions="x"
        )
    assert refused.value.param == "instructions"


STREAM_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.file_search_call.in_progress",
    "response.file_search_call.searching",
    "response.file_search_call.completed",
    "response.output_item.done",
    "response.output_item.added",
    "response.content_part.added",
]
END_EVENTS = [
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]


def test_a_streamed_response_sends_openais_events_in_order(
    api: openai.OpenAI, served: Served
) -> None:
    grass = api.files.create(file=("grass.txt", GRASS.encode()), purpose="assistants")
    sea = api.files.create(file=("sea.txt", SEA.encode()), purpose="assistants")
    store = api.vector_stores.create(name="Nature", file_ids=[grass.id, sea.id])
    with api.responses.stream(
        model="claude-sonnet-5",
        input="How deep is the sea, and what color is the grass?",
        tools=file_search(store.id),
        include=["file_search_call.results"],
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [event.type for event in events]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert kinds[: len(STREAM_EVENTS)] == STREAM_EVENTS
    assert kinds[-len(END_EVENTS) :] == END_EVENTS
    middle = set(kinds[len(STREAM_EVENTS) : -len(END_EVENTS)])
    assert middle == {"response.output_text.delta", "response.output_text.annotation.added"}
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    added = [e for e in events if e.type == "response.output_text.annotation.added"]
    assert [e.annotation_index for e in added] == list(range(len(added)))
    annotations = [_plain(e.annotation) for e in added]
    # Each annotation is sent once the text it follows has been.
    for event, annotation in zip(added, annotations, strict=True):
        before = events[: events.index(event)]
        sent = "".join(e.delta for e in before if e.type == "response.output_text.delta")
        assert annotation["index"] == len(sent)

    stored = httpx.get(f"{served.base_url}/v1/answers/{final.id}").json()
    assert stored["status"] == "completed" and stored["text"] == text == final.output_text
    shown = final.model_dump()["output"][1]["content"][0]
    check_citations(served.base_url, shown, stored)
    assert _same_but_boxes(annotations, shown["annotations"])
    assert final.model_dump()["output"][0]["results"]  # asked for


def test_langchain_chat_openai_answers_with_annotations(api: openai.OpenAI, served: Served) -> None:
    grass = api.files.create(file=("grass.txt", GRASS.encode()), purpose="user_data")
    question = [
        {"type": "file", "file_id": grass.id},
        {"type": "text", "text": "What color is the grass?"},
    ]
    responses = ChatOpenAI(
        model="claude-sonnet-5",
        base_url=f"{served.base_url}/openai/v1",
        api_key="sk-any",
        use_responses_api=True,
        max_retries=0,
    )
    answer = responses.invoke([{"role": "user", "content": question}])
    blocks = [b for b in answer.content if isinstance(b, dict) and b.get("type") == "text"]
    assert "green" in "".join(b["text"] for b in blocks)
    annotations = [a for b in blocks for a in b.get("annotations") or []]
    assert annotations, answer.content
    stored = httpx.get(f"{served.base_url}/v1/answers/{answer.id}").json()
    for annotation in annotations:
        assert annotation["file_id"] == grass.id
        cited = annotation.get("citegate") or annotation.get("extras", {}).get("citegate")
        assert cited is not None, annotation
        span = cited["span"]
        assert GRASS[span["start_char"] : span["end_char"]] == cited["cited_text"]
    assert stored["status"] == "completed"

    # Through Chat Completions too (LangChain keeps no annotations of those: the text answers).
    chat = ChatOpenAI(
        model="claude-sonnet-5",
        base_url=f"{served.base_url}/openai/v1",
        api_key="sk-any",
        max_retries=0,
    )
    reply = chat.invoke(
        [
            {
                "role": "user",
                "content": [{"type": "file", "file": {"file_id": grass.id}}, question[1]],
            }
        ]
    )
    assert "green" in str(reply.content)
    streamed = "".join(
        str(chunk.content)
        for chunk in chat.stream(
            [
                {
                    "role": "user",
                    "content": [{"type": "file", "file": {"file_id": grass.id}}, question[1]],
                }
            ]
        )
    )
    assert "green" in streamed


@pytest.fixture(scope="module")
def upstream(fake: FakeUpstream, settings: Settings) -> Iterator[ServedApp]:
    with behind(settings, fake, upstream_max_attempts=1) as app:
        yield app


def test_what_goes_upstream_and_nothing_half_stored(
    client: httpx.Client, upstream: ServedApp, fake: FakeUpstream, database_url: str
) -> None:
    usage = {
        "input_tokens": 25,
        "output_tokens": 40,
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": 900,
    }
    with sdk(upstream.base_url) as api:
        grass = api.files.create(file=("grass.txt", GRASS.encode()), purpose="user_data")
        fake.reset(Reply(body=message(GRASS_ANSWER, usage=usage)))
        first = api.responses.create(
            model="claude-sonnet-5",
            input=input_files(grass.id, question="Hi, what color is the grass?"),
            instructions="Be brief.",
            max_output_tokens=123,
            metadata={"k": "v"},
            store=True,
            temperature=0.3,
        )
        body = fake.requests[-1].body
        assert (body["model"], body["max_tokens"], body["system"]) == (
            "claude-sonnet-5",
            123,
            "Be brief.",
        )
        assert body["messages"][0]["content"][0]["source"]["data"] == GRASS
        assert first.output_text == "Based on the document, the grass is green"
        (annotation,) = first.model_dump()["output"][0]["content"][0]["annotations"]
        assert annotation["index"] == len(first.output_text)
        assert annotation["citegate"]["cited_text"] == "The grass is green. "
        assert first.usage is not None
        assert first.usage.model_dump(exclude_none=True) == {
            "input_tokens": 1025,
            "input_tokens_details": {"cached_tokens": 900, "cache_write_tokens": 100},
            "output_tokens": 40,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 1065,
        }

        # The follow-up replays the conversation: the earlier answer with its citation.
        fake.reset(Reply(body=message([{"type": "text", "text": "Yes."}])))
        second = api.responses.create(
            model="claude-sonnet-5", input="Sure?", previous_response_id=first.id
        )
        sent = fake.requests[-1].body
        assert sent["system"] == "Be brief."
        roles = [m["role"] for m in sent["messages"]]
        assert roles == ["user", "assistant", "user"]
        assert sent["messages"][1]["content"][-1]["citations"][0]["cited_text"] == (
            "The grass is green. "
        )
        assert sent["messages"][2]["content"][-1] == {"type": "text", "text": "Sure?"}
        # Its conversation was made on the first response's documents and instructions.
        (conversation_id,) = {
            client.get(f"/v1/answers/{answer_id}").json()["conversation_id"]
            for answer_id in (first.id, second.id)
        }
        conversation = client.get(f"/v1/conversations/{conversation_id}").json()
        assert [a["id"] for a in conversation["answers"]] == [first.id, second.id]
        assert [d["document_id"] for d in conversation["documents"]] == [grass.id]
        assert (conversation["system"], conversation["model"]) == ("Be brief.", "claude-sonnet-5")
        # A third turn goes on in the same conversation.
        fake.reset(Reply(body=message([{"type": "text", "text": "Quite."}])))
        third = api.responses.create(
            model="claude-sonnet-5", input="Really?", previous_response_id=second.id
        )
        assert client.get(f"/v1/answers/{third.id}").json()["conversation_id"] == conversation_id
        assert [m["role"] for m in fake.requests[-1].body["messages"]] == [
            "user",
            "assistant",
        ] * 2 + ["user"]

        # An upstream error leaves no conversation behind (one over a vector store starts its
        # conversation before it asks), and answers in OpenAI's shape.
        store = api.vector_stores.create(name="Grass", file_ids=[grass.id])
        before = count_rows(database_url, ("conversations", "answers"))
        fake.reset(error(529, "overloaded_error", "Overloaded"))
        with pytest.raises(openai.InternalServerError) as failed:
            api.responses.create(
                model="claude-sonnet-5", input="What color?", tools=file_search(store.id)
            )
        assert failed.value.status_code == 503
        assert count_rows(database_url, ("conversations", "answers")) == before


def test_refusals_and_another_tenants_ids(
    client: httpx.Client, served: Served, database_url: str
) -> None:
    _, key = make_key(database_url, "openai-responses-a")
    _, other_key = make_key(database_url, "openai-responses-b")
    with sdk(served.base_url, key) as api, sdk(served.base_url, other_key) as other:
        grass = api.files.create(file=("grass.txt", GRASS.encode()), purpose="user_data")
        store = api.vector_stores.create(name="Mine", file_ids=[grass.id])
        first = api.responses.create(model="m", input=input_files(grass.id))
        calls: list[Callable[[], object]] = [
            lambda: other.responses.retrieve(first.id),
            lambda: other.responses.create(model="m", input="Hm?", previous_response_id=first.id),
            lambda: other.responses.create(model="m", input="Hm?", tools=file_search(store.id)),
            lambda: other.responses.create(model="m", input=input_files(grass.id)),
        ]
        for call in calls:
            with pytest.raises(openai.NotFoundError) as missing:
                call()
            assert missing.value.body["type"] == "invalid_request_error"  # type: ignore[index]

        refusals: list[tuple[dict[str, Any], str]] = [
            ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
            (
                {"tools": [{"type": "file_search", "vector_store_ids": [store.id, store.id]}]},
                "tools[0].vector_store_ids",
            ),
            ({"include": ["message.output_text.logprobs"]}, "include[0]"),
            ({"text": {"format": {"type": "json_object"}}}, "text"),
            ({"background": True}, "background"),
            ({"extra_body": {"colour": "blue"}}, "colour"),
            ({"reasoning": {"effort": "high"}}, "reasoning"),
        ]
        for options, param in refusals:
            with pytest.raises(openai.BadRequestError) as refused:
                api.responses.create(model="m", input=input_files(grass.id), **options)
            assert refused.value.param == param, refused.value.body
        for item, param in (
            ({"type": "function_call_output", "call_id": "c", "output": "x"}, "input[0].type"),
            (
                {"role": "user", "content": [{"type": "input_image", "image_url": "https://x"}]},
                "input[0].content[0].type",
            ),
        ):
            with pytest.raises(openai.BadRequestError) as refused:
                api.responses.create(model="m", input=[item])  # type: ignore[list-item]
            assert refused.value.param == param
        with pytest.raises(openai.BadRequestError) as refused:
            api.responses.create(model="m", input="No documents?")
        assert refused.value.param == "input"
        with pytest.raises(openai.BadRequestError) as refused:
            api.responses.create(
                model="m", input=input_files(grass.id), tools=file_search(store.id)
            )
        assert refused.value.param == "input"
