"""The Anthropic-compatible API through the official Python SDK: files, messages over them
(whole and streamed), token counts and errors, against the local engine and against a fake
upstream on 127.0.0.1 that shows exactly what went upstream."""

from __future__ import annotations

import base64
import copy
import json
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
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
    sse,
    sse_message,
)
from tests.fixture_files import AMAZON_PDF

QUESTION = "What color is the grass? What was Amazon's total revenue in 2023?"
EPHEMERAL = {"type": "ephemeral"}


def sdk(base_url: str, key: str = "sk-any", **options: Any) -> anthropic.Anthropic:
    """The official client with Citegate as its base URL; no retries, so errors show at once."""
    return anthropic.Anthropic(
        base_url=f"{base_url}/anthropic", api_key=key, max_retries=0, **options
    )


def file_block(file_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "type": "document",
        "source": {"type": "file", "file_id": file_id},
        "citations": {"enabled": True},
        **fields,
    }


def ask(*blocks: dict[str, Any], question: str = QUESTION) -> Any:
    """One user turn: these blocks, then the question (as the SDK's params: plain dicts)."""
    return [{"role": "user", "content": [*blocks, {"type": "text", "text": question}]}]


def error_of(exc: anthropic.APIStatusError) -> Any:
    """The ``error`` member of the Messages API error body the SDK read."""
    assert isinstance(exc.body, dict)
    return exc.body["error"]


def citations_of(content: list[Any]) -> list[dict[str, Any]]:
    return [
        citation.model_dump()
        for block in content
        if block.type == "text"
        for citation in block.citations or []
    ]


@pytest.fixture
def files(client: httpx.Client, served: Served) -> Iterator[tuple[anthropic.Anthropic, str, str]]:
    """The SDK on the served app (local engine), and a text file and the PDF uploaded."""
    with sdk(served.base_url) as api:
        text = api.files.upload(file=("grass.txt", GRASS.encode(), "text/plain"))
        pdf = api.files.upload(file=(AMAZON_PDF.name, AMAZON_PDF.read_bytes(), "application/pdf"))
        yield api, text.id, pdf.id


def test_files_are_documents(files: tuple[anthropic.Anthropic, str, str], served: Served) -> None:
    api, text_id, pdf_id = files
    pdf = api.files.retrieve_metadata(pdf_id)
    assert (pdf.type, pdf.filename, pdf.mime_type) == ("file", AMAZON_PDF.name, "application/pdf")
    assert pdf.size_bytes == AMAZON_PDF.stat().st_size
    assert api.files.download(pdf_id).read() == AMAZON_PDF.read_bytes()
    # A file id is a document id: the same document through /v1.
    document = httpx.get(f"{served.base_url}/v1/documents/{text_id}").json()
    assert (document["kind"], document["filename"]) == ("text", "grass.txt")

    # Newest first, one a page: the SDK follows the pages itself.
    assert [f.id for f in api.files.list(limit=1)] == [pdf_id, text_id]
    raw = httpx.get(f"{served.base_url}/anthropic/v1/files", params={"limit": 1}).json()
    assert (raw["first_id"], raw["last_id"], raw["has_more"]) == (pdf_id, pdf_id, True)
    older = httpx.get(f"{served.base_url}/anthropic/v1/files", params={"after_id": pdf_id}).json()
    assert ([f["id"] for f in older["data"]], older["has_more"]) == ([text_id], False)
    newer = httpx.get(f"{served.base_url}/anthropic/v1/files", params={"before_id": text_id}).json()
    assert ([f["id"] for f in newer["data"]], newer["has_more"]) == ([pdf_id], False)

    deleted = api.files.delete(text_id)
    assert (deleted.id, deleted.type) == (text_id, "file_deleted")
    with pytest.raises(anthropic.NotFoundError):
        api.files.retrieve_metadata(text_id)
    assert [f.id for f in api.files.list()] == [pdf_id]


def test_messages_over_files_cite_verified_spans(
    files: tuple[anthropic.Anthropic, str, str], served: Served
) -> None:
    api, text_id, pdf_id = files
    messages = ask(file_block(text_id), file_block(pdf_id))
    raw = api.messages.with_raw_response.create(
        model="claude-sonnet-5", max_tokens=500, messages=messages
    )
    created = raw.parse()
    citations = citations_of(created.content)
    assert {c["citegate"]["document_id"] for c in citations} == {text_id, pdf_id}
    for citation in citations:
        assert citation["citegate"]["verified"] is True, citation
        assert citation["citegate"]["span"]["end_char"] > citation["citegate"]["span"]["start_char"]
    by_type = {c["type"]: c for c in citations}
    assert by_type["char_location"]["cited_text"] == "The grass is green. "
    assert by_type["page_location"]["citegate"]["span"]["start_page"] == 1

    # The message is stored as an Answer, readable through getAnswer.
    stored = httpx.get(f"{served.base_url}/v1/answers/{raw.headers['citegate-answer-id']}").json()
    assert stored["status"] == "completed"
    assert stored["question"] == QUESTION
    assert stored["text"] == "".join(b.text for b in created.content if b.type == "text")
    assert [d["document_id"] for d in stored["documents"]] == [text_id, pdf_id]
    # The same resolution; the stored spans also have their boxes (the PDF's measured).
    stored_citations = [c for s in copy.deepcopy(stored["segments"]) for c in s["citations"]]
    boxes = [citation["span"].pop("boxes") for citation in stored_citations]
    assert stored_citations == [
        {k: v for k, v in c.items() if k not in ("citegate", "file_id")} | c["citegate"]
        for c in citations
    ]
    assert [bool(b) for b in boxes] == [c["type"] == "page_location" for c in citations]

    # The stream helper's final message is the one answered whole.
    with api.messages.stream(model="claude-sonnet-5", max_tokens=500, messages=messages) as stream:
        streamed = stream.get_final_message()
        answer_id = stream.response.headers["citegate-answer-id"]
    assert [b.model_dump() for b in streamed.content] == [b.model_dump() for b in created.content]
    assert (streamed.model, streamed.stop_reason) == (created.model, created.stop_reason)
    streamed_answer = httpx.get(f"{served.base_url}/v1/answers/{answer_id}").json()
    assert streamed_answer["segments"] == stored["segments"]

    # count_tokens counts what /v1 would send for the same question about the same documents.
    counted = api.messages.count_tokens(model="claude-sonnet-5", messages=messages)
    v1 = httpx.post(
        f"{served.base_url}/v1/answers/count-tokens",
        json={"question": QUESTION, "document_ids": [text_id, pdf_id]},
    ).json()
    assert counted.input_tokens == v1["input_tokens"] > 0

    # The same metrics as /v1: requests by route, the upstream's tokens.
    metrics = httpx.get(f"{served.base_url}/metrics").text
    assert 'route="/anthropic/v1/messages",status="200"' in metrics


def test_errors_are_the_sdks_own(client: httpx.Client, served: Served, database_url: str) -> None:
    _, key = make_key(database_url, "compat-a")
    _, other_key = make_key(database_url, "compat-b")
    with (
        sdk(served.base_url, key) as api,
        sdk(served.base_url, other_key) as other,
        sdk(served.base_url, "cg_not_a_key") as stranger,
    ):
        mine = api.files.upload(file=("grass.txt", GRASS.encode(), "text/plain"))
        with pytest.raises(anthropic.AuthenticationError) as refused:
            stranger.files.list()
        assert error_of(refused.value)["type"] == "authentication_error"
        # x-api-key works as well as the SDK's Authorization: Bearer.
        listed = httpx.get(f"{served.base_url}/anthropic/v1/files", headers={"x-api-key": key})
        assert [f["id"] for f in listed.json()["data"]] == [mine.id]

        # Another tenant's file is not found, exactly as one that does not exist.
        for api_client, file_id in ((other, mine.id), (api, "doc_missing")):
            with pytest.raises(anthropic.NotFoundError) as missing:
                api_client.messages.create(
                    model="m", max_tokens=10, messages=ask(file_block(file_id))
                )
            assert error_of(missing.value)["type"] == "not_found_error"
            with pytest.raises(anthropic.NotFoundError):
                api_client.files.retrieve_metadata(file_id)

        with pytest.raises(anthropic.BadRequestError) as invalid:
            api.messages.create(model="m", max_tokens=0, messages=ask(file_block(mine.id)))
        assert "max_tokens" in invalid.value.message
        malformed = httpx.post(
            f"{served.base_url}/anthropic/v1/messages",
            content=b"{not json",
            headers={"x-api-key": key, "content-type": "application/json"},
        )
        assert malformed.status_code == 400
        assert malformed.json()["error"]["type"] == "invalid_request_error"
        upload = httpx.post(f"{served.base_url}/anthropic/v1/files", headers={"x-api-key": key})
        assert (upload.status_code, upload.json()["error"]["type"]) == (
            400,
            "invalid_request_error",
        )


def test_a_rate_limit_is_a_rate_limit_error(client: httpx.Client, settings: Settings) -> None:
    with (
        ServedApp(settings.model_copy(update={"rate_limit_per_minute": 1})) as app,
        sdk(app.base_url) as api,
    ):
        api.files.list()
        with pytest.raises(anthropic.RateLimitError) as limited:
            api.files.list()
    assert int(limited.value.response.headers["retry-after"]) > 0


@pytest.fixture(scope="module")
def upstream(fake: FakeUpstream, settings: Settings) -> Iterator[ServedApp]:
    """Citegate in front of the fake upstream, without retries of the upstream's errors."""
    with behind(settings, fake, upstream_max_attempts=1) as app:
        yield app


def test_the_upstream_gets_the_stored_documents_and_every_field_untouched(
    client: httpx.Client, upstream: ServedApp, fake: FakeUpstream
) -> None:
    with sdk(upstream.base_url) as api:
        text = api.files.upload(file=("grass.txt", GRASS.encode(), "text/plain"))
        pdf = api.files.upload(file=(AMAZON_PDF.name, AMAZON_PDF.read_bytes(), "application/pdf"))
        unknown = {"future_option": {"nested": [1, 2.5, None, "x"]}}
        system: Any = [{"type": "text", "text": "Be brief.", "cache_control": EPHEMERAL}]
        tools: Any = [
            {
                "name": "lookup",
                "description": "Look something up.",
                "input_schema": {"type": "object", "properties": {}},
            }
        ]
        fake.reset(Reply(body=message(GRASS_ANSWER)))
        raw = api.messages.with_raw_response.create(
            model="claude-sonnet-5",
            max_tokens=300,
            system=system,
            tools=tools,
            metadata={"user_id": "u-1"},
            messages=ask(file_block(text.id, title="Mine"), file_block(pdf.id)),
            extra_headers={"anthropic-beta": "future-feature-2027-01-01"},
            extra_body=unknown,
        )
    sent = fake.requests[-1]
    assert sent.headers["anthropic-version"] == anthropic._constants.ANTHROPIC_API_VERSION
    assert sent.headers["anthropic-beta"] == "future-feature-2027-01-01"
    assert sent.headers["x-api-key"] == "sk-test"  # Citegate's key, not the caller's
    body = sent.body
    assert body["future_option"] == unknown["future_option"]
    assert (body["tools"], body["metadata"], body["max_tokens"]) == (tools, {"user_id": "u-1"}, 300)
    assert body["system"] == [{"type": "text", "text": "Be brief.", "cache_control": EPHEMERAL}]
    text_block, pdf_block, question = body["messages"][0]["content"]
    assert question == {"type": "text", "text": QUESTION}
    # Each document is the stored bytes, the caller's title kept; with 3 breakpoints left
    # (the system prompt has one), both are cached.
    assert text_block == {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": GRASS},
        "citations": {"enabled": True},
        "title": "Mine",
        "cache_control": EPHEMERAL,
    }
    assert pdf_block["source"]["media_type"] == "application/pdf"
    assert base64.b64decode(pdf_block["source"]["data"]) == AMAZON_PDF.read_bytes()
    assert pdf_block["cache_control"] == EPHEMERAL

    # The upstream's answer comes back as it was, each citation with where it points.
    answer = raw.parse()
    assert raw.headers["request-id"] == "req_fake0001"
    expected = message(GRASS_ANSWER)
    assert answer.id == expected["id"] and answer.usage.cache_creation_input_tokens == 900
    (citation,) = citations_of(answer.content)
    assert citation["citegate"] == {
        "document_id": text.id,
        "span": {
            "start_char": 0,
            "end_char": 20,
            "start_page": None,
            "end_page": None,
            "chunk_indices": [0],
            "locator": None,
        },
        "verified": True,
        # The Anthropic-compatible API shows each citation's support here too.
        "support": {"verdict": "supported", "score": 1.0, "method": "lexical", "reasons": []},
    }


def test_caching_never_passes_four_breakpoints_nor_removes_the_callers(
    client: httpx.Client, upstream: ServedApp, fake: FakeUpstream
) -> None:
    fake.reset(Reply(body=message(GRASS_ANSWER)))
    with sdk(upstream.base_url) as api:
        ids = [
            api.files.upload(file=(f"{n}.txt", f"{GRASS} Number {n}.".encode(), "text/plain")).id
            for n in range(6)
        ]
        hour: Any = {"type": "ephemeral", "ttl": "1h"}
        # Two breakpoints of the caller's (one 1h, on the 4th document): two left for the rest.
        blocks = [file_block(i) for i in ids]
        blocks[3]["cache_control"] = hour
        api.messages.create(
            model="m",
            max_tokens=10,
            system=[{"type": "text", "text": "Be brief.", "cache_control": hour}],
            messages=ask(*blocks),
        )
        marks = [b.get("cache_control") for b in fake.requests[-1].body["messages"][0]["content"]]
        # On the last document and spread before it; before the caller's 1h breakpoint, an
        # added one is 1h too (the upstream refuses 1h after 5m).
        assert marks == [None, hour, None, hour, None, EPHEMERAL, None]

        full = [file_block(i, cache_control=EPHEMERAL) for i in ids[:4]]
        api.messages.create(model="m", max_tokens=10, messages=ask(*full, file_block(ids[4])))
        marks = [b.get("cache_control") for b in fake.requests[-1].body["messages"][0]["content"]]
        assert marks == [EPHEMERAL] * 4 + [None, None]


def test_a_stream_is_the_upstreams_with_citations_enriched(
    client: httpx.Client, upstream: ServedApp, fake: FakeUpstream
) -> None:
    with sdk(upstream.base_url) as api:
        text = api.files.upload(file=("grass.txt", GRASS.encode(), "text/plain"))
        messages = ask(file_block(text.id))
        fake.reset(Reply(body=message(GRASS_ANSWER)))
        created = api.messages.create(model="claude-sonnet-5", max_tokens=99, messages=messages)
        fake.reset(Reply(events=sse_message(GRASS_ANSWER)))
        with api.messages.stream(model="claude-sonnet-5", max_tokens=99, messages=messages) as s:
            final = s.get_final_message()
            answer_id = s.response.headers["citegate-answer-id"]
    assert fake.requests[-1].body["stream"] is True
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in created.content]
    assert citations_of(final.content)[0]["citegate"]["verified"] is True
    stored = httpx.get(f"{upstream.base_url}/v1/answers/{answer_id}").json()
    assert (stored["status"], stored["text"]) == (
        "completed",
        "Based on the document, the grass is green",
    )

    # Every event but the citations_delta is the upstream's own data, byte for byte.
    events = sse_message(GRASS_ANSWER)
    fake.reset(Reply(events=events))
    with httpx.stream(
        "POST",
        f"{upstream.base_url}/anthropic/v1/messages",
        json={"model": "m", "max_tokens": 99, "stream": True, "messages": messages},
    ) as response:
        relayed = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    sent = [event.decode().split("data: ", 1)[1].rstrip("\n") for event in events]
    assert len(relayed) == len(sent)

    def is_citation(data: str) -> bool:
        return bool(json.loads(data).get("delta", {}).get("type") == "citations_delta")

    # A citation, its support checked against its block's text, comes just before the block's
    # content_block_stop; the other events keep their order and bytes.
    assert [d for d in relayed if not is_citation(d)] == [d for d in sent if not is_citation(d)]
    for sent_data in filter(is_citation, sent):
        block = json.loads(sent_data)["index"]
        at = next(i for i, d in enumerate(relayed) if is_citation(d))
        relayed_data = relayed.pop(at)
        assert json.loads(relayed[at]) == {"type": "content_block_stop", "index": block}
        cited = json.loads(relayed_data)["delta"]["citation"]
        citegate = cited.pop("citegate")
        assert citegate["verified"] is True
        assert citegate["support"]["verdict"] == "supported"
        assert cited == json.loads(sent_data)["delta"]["citation"]


def test_upstream_errors_pass_through_with_their_type_and_request_id(
    client: httpx.Client, upstream: ServedApp, fake: FakeUpstream
) -> None:
    with sdk(upstream.base_url) as api:
        fake.reset(error(400, "invalid_request_error", "prompt is too long: 300000 tokens"))
        with pytest.raises(anthropic.BadRequestError) as rejected:
            api.messages.create(model="m", max_tokens=10, messages=ask())
        assert rejected.value.message.endswith(
            "prompt is too long: 300000 tokens'}, 'request_id': 'req_fakeerr'}"
        )
        assert rejected.value.request_id == "req_fakeerr"

        fake.reset(error(529, "overloaded_error", "Overloaded"))
        with pytest.raises(anthropic.OverloadedError) as overloaded:
            api.messages.create(model="m", max_tokens=10, messages=ask())
        assert error_of(overloaded.value) == {"type": "overloaded_error", "message": "Overloaded"}

        # Citegate's own key refused upstream is no fault of the caller's key.
        fake.reset(error(401, "authentication_error", "invalid x-api-key"))
        with pytest.raises(anthropic.InternalServerError) as ours:
            api.messages.count_tokens(model="m", messages=ask())
        assert ours.value.status_code == 500

        # An error event in the middle of a stream is relayed; the answer is stored failed.
        events = sse_message(GRASS_ANSWER)
        overloaded_event = {"type": "error", "error": error_of(overloaded.value)}
        events.insert(4, sse("error", overloaded_event))
        fake.reset(Reply(events=events))
        with (
            pytest.raises(anthropic.APIStatusError),
            api.messages.stream(model="m", max_tokens=10, messages=ask()) as stream,
        ):
            answer_id = stream.response.headers["citegate-answer-id"]
            stream.get_final_message()
    stored = httpx.get(f"{upstream.base_url}/v1/answers/{answer_id}").json()
    assert stored["status"] == "failed"


def test_a_stream_cut_off_upstream_ends_with_an_error_event(
    client: httpx.Client, upstream: ServedApp, fake: FakeUpstream
) -> None:
    fake.reset(Reply(events=sse_message(GRASS_ANSWER)[:7], drop=True))
    body = {"model": "m", "max_tokens": 10, "stream": True, "messages": ask()}
    with httpx.stream("POST", f"{upstream.base_url}/anthropic/v1/messages", json=body) as response:
        assert response.status_code == 200
        answer_id = response.headers["citegate-answer-id"]
        lines = [line for line in response.iter_lines() if line]
    assert lines[-2] == "event: error"
    assert json.loads(lines[-1].removeprefix("data: "))["error"]["type"] == "api_error"
    stored = httpx.get(f"{upstream.base_url}/v1/answers/{answer_id}").json()
    assert stored["status"] == "failed"


def test_a_client_going_away_stops_the_upstream_and_stores_cancelled(
    client: httpx.Client, upstream: ServedApp, fake: FakeUpstream
) -> None:
    events = sse_message(GRASS_ANSWER)
    fake.reset(Reply(events=[*events[:6], *[sse("ping", {"type": "ping"})] * 100], pause=0.1))
    with sdk(upstream.base_url) as api:
        with api.messages.stream(model="m", max_tokens=10, messages=ask()) as stream:
            answer_id = stream.response.headers["citegate-answer-id"]
            next(iter(stream))  # message_start; then the client leaves
        fake_closed = fake.stream_closed
        for _ in range(100):
            stored = httpx.get(f"{upstream.base_url}/v1/answers/{answer_id}")
            if stored.status_code == 200 and fake_closed.is_set():
                break
            time.sleep(0.05)
    assert fake_closed.is_set() and not fake.stream_finished  # long before its 10 s of pings
    assert stored.json()["status"] == "cancelled"
