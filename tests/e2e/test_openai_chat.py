"""Chat Completions through the official OpenAI Python SDK: answers over stored documents
(whole and streamed) whose annotations cite verified spans, what goes upstream, the answer
stored like any other, and errors and refusals in OpenAI's shape; against the local engine and
against the fake upstream on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from app.settings import Settings
from tests.conftest import Served, ServedApp, behind
from tests.e2e.test_auth import make_key
from tests.fake_upstream import (
    GRASS,
    GRASS_ANSWER,
    FakeUpstream,
    Reply,
    error,
    message,
    sse_message,
)
from tests.fixture_files import AMAZON_PDF

QUESTION = "What color is the grass? What was Amazon's total revenue in 2023?"


def sdk(base_url: str, key: str = "sk-any") -> openai.OpenAI:
    """The official client with Citegate as its base URL; no retries, so errors show at once."""
    return openai.OpenAI(base_url=f"{base_url}/openai/v1", api_key=key, max_retries=0)


def file_part(file_id: str) -> dict[str, Any]:
    return {"type": "file", "file": {"file_id": file_id}}


def ask(*file_ids: str, question: str = QUESTION) -> list[Any]:
    parts = [file_part(file_id) for file_id in file_ids]
    return [{"role": "user", "content": [*parts, {"type": "text", "text": question}]}]


def upload(base_url: str, name: str, data: bytes, key: str | None = None) -> str:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    response = httpx.post(
        f"{base_url}/v1/documents/upload", files={"file": (name, data)}, headers=headers
    )
    assert response.status_code == 201, response.text
    document_id: str = response.json()["id"]
    return document_id


def document_text(base_url: str, document_id: str) -> str:
    chunks = httpx.get(
        f"{base_url}/v1/documents/{document_id}/chunks", params={"limit": 100}
    ).json()
    return "".join(chunk["text"] for chunk in chunks["data"])


def check_annotations(
    base_url: str, content: str, annotations: list[dict[str, Any]], stored: dict[str, Any]
) -> None:
    """Each annotation covers a cited segment of the content, points at its span, and quotes
    exactly what the stored document says there."""
    segments = {(s["start"], s["end"]): s for s in stored["segments"] if s["citations"]}
    assert annotations and len(annotations) == sum(len(s["citations"]) for s in segments.values())
    for annotation in annotations:
        assert annotation["type"] == "url_citation"
        where, citegate = annotation["url_citation"], annotation["citegate"]
        start, end = where["start_index"], where["end_index"]
        assert content[start:end] == segments[(start, end)]["text"]
        span = citegate["span"]
        assert where["url"] == (
            f"{base_url}/v1/documents/{citegate['document_id']}"
            f"#chars={span['start_char']}-{span['end_char']}"
        )
        assert citegate["verified"] is True, annotation
        # The support verdict the stored answer gives this citation of the segment.
        verdicts = [
            citation["support"]
            for citation in segments[(start, end)]["citations"]
            if citation["document_id"] == citegate["document_id"]
        ]
        assert citegate["support"] in verdicts, annotation
        assert citegate["support"]["verdict"] in {"supported", "partial", "unsupported"}
        text = document_text(base_url, citegate["document_id"])
        quoted = text[span["start_char"] : span["end_char"]]
        assert " ".join(quoted.split()) == " ".join(citegate["cited_text"].split())


@pytest.fixture
def documents(client: httpx.Client, served: Served) -> Iterator[tuple[openai.OpenAI, str, str]]:
    with sdk(served.base_url) as api:
        text_id = upload(served.base_url, "grass.txt", GRASS.encode())
        pdf_id = upload(served.base_url, AMAZON_PDF.name, AMAZON_PDF.read_bytes())
        yield api, text_id, pdf_id


def test_a_chat_completion_cites_verified_spans_and_is_stored(
    documents: tuple[openai.OpenAI, str, str], served: Served
) -> None:
    api, text_id, pdf_id = documents
    raw = api.chat.completions.with_raw_response.create(
        model="claude-sonnet-5", messages=ask(text_id, pdf_id)
    )
    completion = raw.parse()
    assert completion.object == "chat.completion"
    (choice,) = completion.choices
    assert (choice.index, choice.finish_reason, choice.message.role) == (0, "stop", "assistant")
    content = choice.message.content
    assert content
    annotations = [a.model_dump() for a in choice.message.annotations or []]

    answer_id = raw.headers["citegate-answer-id"]
    assert completion.id == answer_id
    stored = httpx.get(f"{served.base_url}/v1/answers/{answer_id}").json()
    assert (stored["status"], stored["question"], stored["text"]) == (
        "completed",
        QUESTION,
        content,
    )
    assert [d["document_id"] for d in stored["documents"]] == [text_id, pdf_id]
    check_annotations(served.base_url, content, annotations, stored)
    assert {a["citegate"]["document_id"] for a in annotations} == {text_id, pdf_id}
    usage = completion.usage
    assert usage is not None
    assert usage.prompt_tokens == (
        stored["usage"]["input_tokens"]
        + stored["usage"]["cache_creation_input_tokens"]
        + stored["usage"]["cache_read_input_tokens"]
    )
    assert usage.completion_tokens == stored["usage"]["output_tokens"]
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_a_streamed_chat_completion_sends_text_and_annotations_as_chunks(
    documents: tuple[openai.OpenAI, str, str], served: Served
) -> None:
    api, text_id, pdf_id = documents
    with api.chat.completions.with_streaming_response.create(
        model="claude-sonnet-5",
        messages=ask(text_id, pdf_id),
        stream=True,
        stream_options={"include_usage": True},
    ) as response:
        answer_id = response.headers["citegate-answer-id"]
        chunks = list(response.parse())
    assert {chunk.id for chunk in chunks} == {answer_id}
    assert chunks[0].choices[0].delta.role == "assistant"
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    annotations = [
        annotation
        for chunk in chunks
        if chunk.choices
        for annotation in (chunk.choices[0].delta.model_extra or {}).get("annotations") or []
    ]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop" and not any(finishes[:-1])
    # The last chunk has no choice and the usage; the others have none.
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert all(chunk.usage is None for chunk in chunks[:-1])

    stored = httpx.get(f"{served.base_url}/v1/answers/{answer_id}").json()
    assert stored["status"] == "completed" and stored["text"] == content
    check_annotations(served.base_url, content, annotations, stored)
    assert chunks[-1].usage.completion_tokens == stored["usage"]["output_tokens"]

    # Without include_usage, no usage chunk; the stream still ends with [DONE].
    raw = httpx.post(
        f"{served.base_url}/openai/v1/chat/completions",
        json={"model": "m", "messages": ask(text_id), "stream": True},
        timeout=60,
    )
    datas = [line[6:] for line in raw.text.splitlines() if line.startswith("data: ")]
    assert datas[-1] == "[DONE]"
    assert all('"usage"' not in data for data in datas)


@pytest.fixture(scope="module")
def upstream(fake: FakeUpstream, settings: Settings) -> Iterator[ServedApp]:
    with behind(settings, fake, upstream_max_attempts=1) as app:
        yield app


def test_system_history_and_limits_go_upstream_and_usage_comes_back_in_openai_names(
    client: httpx.Client, upstream: ServedApp, fake: FakeUpstream
) -> None:
    text_id = upload(upstream.base_url, "grass.txt", GRASS.encode())
    usage = {
        "input_tokens": 25,
        "output_tokens": 40,
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": 900,
    }
    fake.reset(Reply(body=message(GRASS_ANSWER, usage=usage)))
    chat: list[Any] = [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": [{"type": "text", "text": "Cite."}]},
        {"role": "user", "content": [file_part(text_id), {"type": "text", "text": "Hi"}]},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "What color is the grass?"},
    ]
    with sdk(upstream.base_url) as api:
        completion = api.chat.completions.create(
            model="claude-sonnet-5",
            max_completion_tokens=321,
            # What the SDKs and LangChain may send, and which changes nothing in a cited answer.
            temperature=0.2,
            n=1,
            user="u-1",
            metadata={"k": "v"},
            store=False,
            messages=chat,
        )
    body = fake.requests[-1].body
    assert (body["model"], body["max_tokens"], body["system"]) == (
        "claude-sonnet-5",
        321,
        "Be brief.\n\nCite.",
    )
    assert "temperature" not in body and "metadata" not in body
    first, reply, last = body["messages"]
    assert first["role"] == "user" and first["content"][0]["type"] == "document"
    assert first["content"][0]["source"]["data"] == GRASS
    assert first["content"][-1]["text"] == "Hi"
    assert reply == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Hello.", "cache_control": {"type": "ephemeral"}}],
    }
    assert last == {
        "role": "user",
        "content": [{"type": "text", "text": "What color is the grass?"}],
    }

    message_out = completion.choices[0].message
    assert message_out.content == "Based on the document, the grass is green"
    (annotation,) = [a.model_dump() for a in message_out.annotations or []]
    assert annotation["url_citation"]["start_index"] == len("Based on the document, ")
    assert annotation["url_citation"]["end_index"] == len(message_out.content)
    assert annotation["citegate"]["cited_text"] == "The grass is green. "
    assert annotation["citegate"]["document_id"] == text_id
    assert completion.usage is not None
    assert completion.usage.model_dump(exclude_none=True) | {} == {
        "prompt_tokens": 1025,
        "completion_tokens": 40,
        "total_tokens": 1065,
        "prompt_tokens_details": {
            "cached_tokens": 900,
            "cache_write_tokens": 100,
            "audio_tokens": 0,
        },
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def test_a_stream_through_the_fake_upstream_and_an_upstream_error(
    client: httpx.Client, upstream: ServedApp, fake: FakeUpstream
) -> None:
    text_id = upload(upstream.base_url, "grass.txt", GRASS.encode())
    fake.reset(Reply(events=sse_message(GRASS_ANSWER)))
    with sdk(upstream.base_url) as api:
        chunks = list(api.chat.completions.create(model="m", messages=ask(text_id), stream=True))
        content = "".join(c.choices[0].delta.content or "" for c in chunks)
        assert content == "Based on the document, the grass is green"
        (with_annotations,) = [c for c in chunks if c.choices[0].delta.model_extra]
        (annotation,) = (with_annotations.choices[0].delta.model_extra or {})["annotations"]
        assert annotation["citegate"]["verified"] is True
        assert (
            annotation["url_citation"]["start_index"],
            annotation["url_citation"]["end_index"],
        ) == (
            len("Based on the document, "),
            len(content),
        )
        assert fake.requests[-1].body["stream"] is True

        fake.reset(error(429, "rate_limit_error", "Slow down."))
        with pytest.raises(openai.RateLimitError) as limited:
            api.chat.completions.create(model="m", messages=ask(text_id))
        assert limited.value.body == {
            "message": "Slow down.",
            "type": "requests",
            "param": None,
            "code": "rate_limit_error",
        }


def test_errors_and_refusals_are_in_openais_shape(
    client: httpx.Client, served: Served, database_url: str
) -> None:
    _, key = make_key(database_url, "openai-a")
    _, other_key = make_key(database_url, "openai-b")
    mine = upload(served.base_url, "grass.txt", GRASS.encode(), key)
    with sdk(served.base_url, key) as api, sdk(served.base_url, other_key) as other:
        with (
            sdk(served.base_url, "cg_not_a_key") as stranger,
            pytest.raises(openai.AuthenticationError) as refused,
        ):
            stranger.chat.completions.create(model="m", messages=ask(mine))
        assert refused.value.body == {
            "message": "A valid Citegate API key is required: Authorization: Bearer <key>.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
        # Another tenant's file is not found, exactly as one that does not exist.
        for api_client, file_id in ((other, mine), (api, "doc_missing")):
            with pytest.raises(openai.NotFoundError) as missing:
                api_client.chat.completions.create(model="m", messages=ask(file_id))
            assert missing.value.body["type"] == "invalid_request_error"  # type: ignore[index]
            assert missing.value.code == "document_not_found"

        refusals: list[tuple[dict[str, Any], str]] = [
            ({"n": 2}, "n"),
            ({"logprobs": True}, "logprobs"),
            ({"top_logprobs": 3}, "top_logprobs"),
            ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
            ({"response_format": {"type": "json_object"}}, "response_format"),
            ({"modalities": ["text", "audio"]}, "modalities"),
            ({"stop": ["\n"]}, "stop"),
            ({"extra_body": {"future_option": 1}}, "future_option"),
        ]
        for options, param in refusals:
            with pytest.raises(openai.BadRequestError) as refusal:
                api.chat.completions.create(model="m", messages=ask(mine), **options)
            assert (refusal.value.param, refusal.value.code) == (param, "unsupported_parameter")
        assert "Unrecognized request argument supplied: future_option" in str(refusal.value)

        image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
        invalid: list[tuple[list[Any], str, str]] = [
            (
                [{"role": "user", "content": [file_part(mine), image]}],
                "messages[0].content[1].type",
                "unsupported_parameter",
            ),
            ([{"role": "user", "content": "Hi"}], "messages", "invalid_parameter"),
            (
                [*ask(mine), {"role": "assistant", "content": "Hm."}],
                "messages",
                "invalid_parameter",
            ),
            (
                [{"role": "tool", "content": "x", "tool_call_id": "t"}],
                "messages[0].role",
                "unsupported_parameter",
            ),
            (ask(mine, question="   "), "messages", "invalid_parameter"),
        ]
        for messages, param, code in invalid:
            with pytest.raises(openai.BadRequestError) as bad:
                api.chat.completions.create(model="m", messages=messages)
            assert (bad.value.param, bad.value.code) == (param, code), bad.value.body
        with pytest.raises(openai.BadRequestError) as bad:
            api.chat.completions.create(model="m", messages=ask(mine), max_completion_tokens=0)
        assert bad.value.param == "max_completion_tokens"

    for body in (b"{not json", b"[1]"):
        malformed = httpx.post(
            f"{served.base_url}/openai/v1/chat/completions",
            content=body,
            headers={"Authorization": f"Bearer {key}", "content-type": "application/json"},
        )
        assert malformed.status_code == 400
        assert malformed.json()["error"]["code"] == "malformed_body"
    unknown = httpx.get(
        f"{served.base_url}/openai/v1/nothing-here", headers={"Authorization": f"Bearer {key}"}
    )
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"
