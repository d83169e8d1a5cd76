"""The local engine served by uvicorn on loopback, driven by the official ``anthropic`` SDK as an
independent client: what it emits must parse into the SDK's types, stream into the same final
message, and fail with the SDK's error classes."""

from __future__ import annotations

import base64
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types import (
    CitationCharLocation,
    CitationContentBlockLocation,
    CitationPageLocation,
    DocumentBlockParam,
    Message,
    MessageParam,
    TextBlock,
)

from app.documents.pdf import extract_pdf_text
from app.local_engine import MODEL_NAME, LocalEngine, create_local_engine_app
from app.local_engine.documents import upstream_page_text
from tests.conftest import Served, free_port
from tests.fixture_files import AMAZON_PDF, FIXTURES

GRASS_SKY = "The grass is green. The sky is blue."


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    with Served(create_local_engine_app(LocalEngine())) as engine:
        yield engine


@pytest.fixture
def client(served: Served) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=served.base_url, api_key="dummy-key", max_retries=0) as sdk:
        yield sdk


def text_document(data: str, title: str | None = "My Document") -> DocumentBlockParam:
    return {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": data},
        "title": title,
        "citations": {"enabled": True},
    }


def help_center() -> list[tuple[str, str]]:
    """The ten help-center articles as (title, text): each file is a title line, then the text."""
    articles = []
    for number in range(10):
        raw = (FIXTURES / "help_center" / f"help_center_{number}.txt").read_text()
        title_line, text = raw.split("\n", 1)
        articles.append((title_line.removeprefix("title: "), text))
    return articles


def content_documents(cache_last: bool = False) -> list[DocumentBlockParam]:
    documents: list[DocumentBlockParam] = [
        {
            "type": "document",
            "source": {"type": "content", "content": [{"type": "text", "text": text}]},
            "title": title,
            "citations": {"enabled": True},
        }
        for title, text in help_center()
    ]
    if cache_last:
        documents[-1]["cache_control"] = {"type": "ephemeral"}
    return documents


def pdf_document() -> DocumentBlockParam:
    return {
        "type": "document",
        "source": {
            "type": "base64",
            "media_type": "application/pdf",
            "data": base64.b64encode(AMAZON_PDF.read_bytes()).decode(),
        },
        "title": "Amazon 2023 Shareholder Letter",
        "citations": {"enabled": True},
    }


def user_turn(*documents: DocumentBlockParam, question: str) -> list[MessageParam]:
    return [{"role": "user", "content": [*documents, {"type": "text", "text": question}]}]


GRASS_SKY_TURN = user_turn(text_document(GRASS_SKY), question="What color is the grass and sky?")
PDF_TURN = user_turn(
    pdf_document(),
    question="What was Amazon's total revenue in 2023 and how much did it grow year-over-year?",
)
CONTENT_TURN = user_turn(*content_documents(), question="Where is my order tracking number?")


def citations_of(message: Message) -> list[Any]:
    return [
        citation
        for block in message.content
        if isinstance(block, TextBlock)
        for citation in block.citations or ()
    ]


def test_grass_and_sky_parse_into_sdk_types(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model="claude-sonnet-5", max_tokens=512, messages=GRASS_SKY_TURN
    )
    assert message.model == MODEL_NAME
    assert message.stop_reason == "end_turn"
    assert all(isinstance(block, TextBlock) for block in message.content)
    citations = citations_of(message)
    assert all(isinstance(citation, CitationCharLocation) for citation in citations)
    assert [(c.start_char_index, c.end_char_index) for c in citations] == [(0, 20), (20, 36)]
    for citation in citations:
        assert citation.cited_text == GRASS_SKY[citation.start_char_index : citation.end_char_index]
        assert (citation.document_index, citation.document_title) == (0, "My Document")
    assert message.usage.service_tier == "standard"
    assert message.usage.cache_creation is not None


def test_pdf_citations_are_the_page_text_of_page_1(client: anthropic.Anthropic) -> None:
    message = client.messages.create(model="claude-sonnet-5", max_tokens=1024, messages=PDF_TURN)
    pages = [upstream_page_text(page) for page in extract_pdf_text(AMAZON_PDF.read_bytes()).pages]
    citations = citations_of(message)
    assert citations
    for citation in citations:
        assert isinstance(citation, CitationPageLocation)
        assert citation.document_title == "Amazon 2023 Shareholder Letter"
        covered = "".join(pages[citation.start_page_number - 1 : citation.end_page_number - 1])
        assert citation.cited_text in covered
    assert (citations[0].start_page_number, citations[0].end_page_number) == (1, 2)
    assert "total revenue grew 12%" in citations[0].cited_text


def test_content_documents_cite_joined_blocks(client: anthropic.Anthropic) -> None:
    articles = help_center()
    message = client.messages.create(
        model="claude-sonnet-5", max_tokens=1024, messages=CONTENT_TURN
    )
    citations = citations_of(message)
    assert citations
    for citation in citations:
        assert isinstance(citation, CitationContentBlockLocation)
        blocks = [articles[citation.document_index][1]]  # each document is one block
        assert citation.cited_text == "".join(
            blocks[citation.start_block_index : citation.end_block_index]
        )
        assert citation.document_title == articles[citation.document_index][0]
    assert citations[0].document_title == "Order Tracking Information"
    assert (citations[0].start_block_index, citations[0].end_block_index) == (0, 1)


@pytest.mark.parametrize(
    "messages", [GRASS_SKY_TURN, PDF_TURN, CONTENT_TURN], ids=["text", "pdf", "content"]
)
def test_stream_helper_accumulates_the_same_message(
    client: anthropic.Anthropic, messages: list[MessageParam]
) -> None:
    created = client.messages.create(model="claude-sonnet-5", max_tokens=1024, messages=messages)
    with client.messages.stream(
        model="claude-sonnet-5", max_tokens=1024, messages=messages
    ) as stream:
        streamed = stream.get_final_message()
    created_data, streamed_data = created.to_dict(), streamed.to_dict()
    assert created_data.pop("id") != streamed_data.pop("id")
    assert streamed_data == created_data
    assert any(block.citations for block in streamed.content if isinstance(block, TextBlock))


def test_stream_cut_by_max_tokens_matches_too(client: anthropic.Anthropic) -> None:
    created = client.messages.create(model="m", max_tokens=10, messages=GRASS_SKY_TURN)
    with client.messages.stream(model="m", max_tokens=10, messages=GRASS_SKY_TURN) as stream:
        streamed = stream.get_final_message()
    assert created.stop_reason == streamed.stop_reason == "max_tokens"
    created_data, streamed_data = created.to_dict(), streamed.to_dict()
    created_data.pop("id"), streamed_data.pop("id")
    assert streamed_data == created_data
    assert created.usage.output_tokens == 10


def test_raw_stream_has_a_ping_after_message_start(served: Served) -> None:
    response = httpx.post(
        f"{served.base_url}/v1/messages",
        json={"model": "m", "max_tokens": 100, "messages": GRASS_SKY_TURN, "stream": True},
        headers={"anthropic-version": "2026-10-21"},
        timeout=30,
    )
    assert response.status_code == 200
    events = [chunk for chunk in response.text.split("\n\n") if chunk]
    assert events[0].startswith("event: message_start\ndata: ")
    assert events[1] == 'event: ping\ndata: {"type": "ping"}'
    assert events[-1] == 'event: message_stop\ndata: {"type":"message_stop"}'


def test_count_tokens_matches_the_input_of_an_answer(client: anthropic.Anthropic) -> None:
    counted = client.messages.count_tokens(model="claude-sonnet-5", messages=PDF_TURN)
    usage = client.messages.create(model="claude-sonnet-5", max_tokens=64, messages=PDF_TURN).usage
    total = (
        usage.input_tokens
        + (usage.cache_creation_input_tokens or 0)
        + (usage.cache_read_input_tokens or 0)
    )
    assert counted.input_tokens == total > 1_000


def test_second_identical_request_reads_the_cache(client: anthropic.Anthropic) -> None:
    # A system prompt of its own so that no other test has cached this prefix.
    system = f"Answer from the help center only. Test run {time.time_ns()}."
    messages = user_turn(*content_documents(cache_last=True), question="How do I return an item?")
    first = client.messages.create(model="m", max_tokens=256, system=system, messages=messages)
    second = client.messages.create(model="m", max_tokens=256, system=system, messages=messages)
    assert first.usage.cache_creation_input_tokens
    assert first.usage.cache_creation_input_tokens >= 1_024
    assert first.usage.cache_read_input_tokens == 0
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0
    assert second.usage.input_tokens == first.usage.input_tokens
    assert second.content == first.content


def test_a_replayed_answer_is_accepted_in_a_later_turn(client: anthropic.Anthropic) -> None:
    first = client.messages.create(model="m", max_tokens=512, messages=GRASS_SKY_TURN)
    follow_up = client.messages.create(
        model="m",
        max_tokens=512,
        messages=[
            *GRASS_SKY_TURN,
            first.to_param(),
            {"role": "user", "content": "And what color is the sky?"},
        ],
    )
    [citation] = citations_of(follow_up)
    assert isinstance(citation, CitationCharLocation)
    assert (citation.start_char_index, citation.end_char_index) == (20, 36)


FIVE_CACHED = user_turn(
    *(
        DocumentBlockParam(
            **text_document(f"Fact number {n}."), cache_control={"type": "ephemeral"}
        )
        for n in range(5)
    ),
    question="Which facts?",
)
INVALID: list[tuple[str, dict[str, Any], str]] = [
    (
        "five cache_control blocks",
        {"messages": FIVE_CACHED},
        "A maximum of 4 blocks with cache_control may be provided. Found 5.",
    ),
    (
        "mixed citations",
        {
            "messages": user_turn(
                text_document("A."),
                {**text_document("B."), "citations": {"enabled": False}},
                question="?",
            )
        },
        "citations must be enabled on all or none of the documents within a request",
    ),
    (
        "temperature",
        {"messages": GRASS_SKY_TURN, "extra_body": {"temperature": 0.0}},
        "temperature: Extra inputs are not permitted",
    ),
    (
        "document in an assistant turn",
        {
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": [text_document("A.")]},
                {"role": "user", "content": "Well?"},
            ]
        },
        "messages.1.content.0: Input tag 'document' found using 'type'",
    ),
    (
        "citations on a user text block",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "text",
                            "text": "Quote this.",
                            "citations": [
                                {
                                    "type": "char_location",
                                    "cited_text": "x",
                                    "document_index": 0,
                                    "document_title": None,
                                    "start_char_index": 0,
                                    "end_char_index": 1,
                                }
                            ],
                        }
                    ],
                }
            ]
        },
        "messages.0.content.0.text.citations: Extra inputs are not permitted",
    ),
    (
        "empty text block",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}]},
        "messages: text content blocks must be non-empty",
    ),
    (
        "unknown citation config",
        {
            "messages": user_turn(
                # A key the SDK's types do not have, sent anyway: the engine must refuse it.
                {**text_document("A."), "citations": {"enabled": True, "style": "apa"}},  # type: ignore[typeddict-item]
                question="?",
            )
        },
        "messages.0.content.0.document.citations.style: Extra inputs are not permitted",
    ),
]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [(arguments, message) for _, arguments, message in INVALID],
    ids=[name for name, _, _ in INVALID],
)
def test_validation_errors_reach_the_sdk_as_bad_requests(
    client: anthropic.Anthropic, arguments: dict[str, Any], message: str
) -> None:
    with pytest.raises(anthropic.BadRequestError) as raised:
        client.messages.create(model="m", max_tokens=100, **arguments)
    error = raised.value
    assert error.status_code == 400
    assert error.request_id is not None and error.request_id.startswith("req_")
    assert isinstance(error.body, dict)
    assert error.body["type"] == "error"
    assert error.body["request_id"] == error.request_id
    assert error.body["error"]["type"] == "invalid_request_error"
    assert error.body["error"]["message"].startswith(message)
    assert error.message.startswith("Error code: 400")


def test_a_mid_stream_error_reaches_the_sdk() -> None:
    with (
        Served(create_local_engine_app(LocalEngine(fail_streams_after_blocks=1))) as faulty,
        anthropic.Anthropic(base_url=faulty.base_url, api_key="dummy", max_retries=0) as sdk,
        pytest.raises(anthropic.APIStatusError) as raised,
        sdk.messages.stream(model="m", max_tokens=100, messages=GRASS_SKY_TURN) as stream,
    ):
        stream.get_final_message()
    assert raised.value.status_code == 200
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["error"] == {"type": "overloaded_error", "message": "Overloaded"}


def test_serve_runs_the_engine_standalone() -> None:
    port = free_port()
    code = f"from app.local_engine import serve; serve('127.0.0.1', {port})"
    process = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("serve() did not start") from None
                time.sleep(0.05)
        with anthropic.Anthropic(
            base_url=f"http://127.0.0.1:{port}", api_key="dummy", max_retries=0
        ) as sdk:
            message = sdk.messages.create(model="m", max_tokens=100, messages=GRASS_SKY_TURN)
        assert message.model == MODEL_NAME
        assert len(citations_of(message)) == 2
    finally:
        process.terminate()
        process.communicate(timeout=30)
