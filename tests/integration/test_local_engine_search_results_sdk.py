"""Search results answered by the local engine served by uvicorn on loopback, with the official
``anthropic`` SDK as the independent client: its ``search_result_location`` citations must parse
into the SDK's own types, stream into the same message, and its refusals reach the SDK as 400s."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import anthropic
import pytest
from anthropic.types import CitationsSearchResultLocation, Message, MessageParam, TextBlock

from app.local_engine import MODEL_NAME, LocalEngine, create_local_engine_app
from tests.conftest import Served

ARTICLES = {
    "https://help.example.com/returns": (
        "Returns",
        [
            "Most items can be returned within 30 days of delivery.",
            "Opened pet food cannot be returned.",
            "Refunds reach your card within five business days.",
        ],
    ),
    "https://help.example.com/shipping": (
        "Shipping",
        [
            "Orders ship within two business days.",
            "Your tracking number is in the confirmation email.",
        ],
    ),
}


def search_result(url: str, *, citations: bool | None = True) -> Any:
    """A search result block as JSON (Any: some tests send it deliberately invalid)."""
    title, texts = ARTICLES[url]
    block: dict[str, Any] = {
        "type": "search_result",
        "source": url,
        "title": title,
        "content": [{"type": "text", "text": text} for text in texts],
    }
    if citations is not None:
        block["citations"] = {"enabled": citations}
    return block


RETURNS = "https://help.example.com/returns"
SHIPPING = "https://help.example.com/shipping"

TOP_LEVEL: list[MessageParam] = [
    {
        "role": "user",
        "content": [
            search_result(RETURNS),
            search_result(SHIPPING),
            {"type": "text", "text": "Where is my tracking number?"},
        ],
    }
]

TOOL_CALL: list[MessageParam] = [
    {"role": "user", "content": "How long does a refund take?"},
    {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "toolu_01", "name": "search", "input": {"q": "refund"}}
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01",
                "content": [search_result(SHIPPING), search_result(RETURNS)],
            }
        ],
    },
]

TWO_TURNS: list[MessageParam] = [
    {
        "role": "user",
        "content": [search_result(SHIPPING), {"type": "text", "text": "When do orders ship?"}],
    },
    {"role": "assistant", "content": "Orders ship within two business days."},
    {
        "role": "user",
        "content": [search_result(RETURNS), {"type": "text", "text": "Can I return pet food?"}],
    },
]


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    with Served(create_local_engine_app(LocalEngine())) as engine:
        yield engine


@pytest.fixture
def client(served: Served) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=served.base_url, api_key="dummy-key", max_retries=0) as sdk:
        yield sdk


def search_citations(message: Message) -> list[CitationsSearchResultLocation]:
    citations = [
        citation
        for block in message.content
        if isinstance(block, TextBlock)
        for citation in block.citations or ()
    ]
    assert citations, "the answer has no citations"
    parsed = [c for c in citations if isinstance(c, CitationsSearchResultLocation)]
    assert parsed == citations, "every citation parses as CitationsSearchResultLocation"
    return parsed


def sent_results(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """Every search result of the request, top level or in a tool result, in request order."""
    found: list[dict[str, Any]] = []
    for message in messages:
        for block in message["content"] if isinstance(message["content"], list) else ():
            inner = block.get("content") if block["type"] == "tool_result" else [block]
            found.extend(item for item in inner if item["type"] == "search_result")
    return found


def check_against_request(citation: CitationsSearchResultLocation, messages: Sequence[Any]) -> None:
    sent = sent_results(messages)[citation.search_result_index]
    assert (citation.source, citation.title) == (sent["source"], sent["title"])
    texts = [item["text"] for item in sent["content"]]
    joined = "".join(texts[citation.start_block_index : citation.end_block_index])
    assert citation.cited_text == joined


def test_top_level_search_results_are_cited_in_sdk_types(client: anthropic.Anthropic) -> None:
    message = client.messages.create(model="claude-sonnet-5", max_tokens=512, messages=TOP_LEVEL)
    assert message.model == MODEL_NAME
    [citation] = search_citations(message)
    assert citation.type == "search_result_location"
    assert (citation.search_result_index, citation.start_block_index) == (1, 1)
    assert citation.end_block_index == 2
    assert citation.cited_text == "Your tracking number is in the confirmation email."
    check_against_request(citation, TOP_LEVEL)


def test_search_results_inside_a_tool_result_are_cited(client: anthropic.Anthropic) -> None:
    message = client.messages.create(model="claude-sonnet-5", max_tokens=512, messages=TOOL_CALL)
    [citation] = search_citations(message)
    # RETURNS is the second search result of the tool result.
    assert (citation.search_result_index, citation.source) == (1, RETURNS)
    assert citation.cited_text == "Refunds reach your card within five business days."
    check_against_request(citation, TOOL_CALL)


def test_search_result_index_counts_across_two_user_turns(client: anthropic.Anthropic) -> None:
    message = client.messages.create(model="claude-sonnet-5", max_tokens=512, messages=TWO_TURNS)
    [citation] = search_citations(message)
    assert (citation.search_result_index, citation.source) == (1, RETURNS)
    assert citation.cited_text == "Opened pet food cannot be returned."
    check_against_request(citation, TWO_TURNS)


def test_a_cited_answer_replays_in_a_later_turn(client: anthropic.Anthropic) -> None:
    first = client.messages.create(model="m", max_tokens=512, messages=TOP_LEVEL)
    replayed: Any = [block.to_dict() for block in first.content]  # the SDK's blocks as JSON
    follow_up: list[MessageParam] = [
        *TOP_LEVEL,
        {"role": "assistant", "content": replayed},
        {"role": "user", "content": "And when do orders ship?"},
    ]
    message = client.messages.create(model="m", max_tokens=512, messages=follow_up)
    [citation] = search_citations(message)
    assert citation.cited_text == "Orders ship within two business days."
    check_against_request(citation, follow_up)


@pytest.mark.parametrize(
    "messages", [TOP_LEVEL, TOOL_CALL, TWO_TURNS], ids=["top level", "tool result", "two turns"]
)
def test_stream_accumulates_the_same_message(
    client: anthropic.Anthropic, messages: list[MessageParam]
) -> None:
    created = client.messages.create(model="claude-sonnet-5", max_tokens=512, messages=messages)
    with client.messages.stream(
        model="claude-sonnet-5", max_tokens=512, messages=messages
    ) as stream:
        streamed = stream.get_final_message()
    created_data, streamed_data = created.to_dict(), streamed.to_dict()
    assert created_data.pop("id") != streamed_data.pop("id")
    assert streamed_data == created_data
    for citation in search_citations(streamed):
        check_against_request(citation, messages)


def test_count_tokens_matches_the_input_of_an_answer(client: anthropic.Anthropic) -> None:
    counted = client.messages.count_tokens(model="claude-sonnet-5", messages=TOOL_CALL)
    usage = client.messages.create(model="claude-sonnet-5", max_tokens=64, messages=TOOL_CALL).usage
    total = (
        usage.input_tokens
        + (usage.cache_creation_input_tokens or 0)
        + (usage.cache_read_input_tokens or 0)
    )
    assert counted.input_tokens == total > 0


def _with_result(block: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [block, {"type": "text", "text": "Refund?"}]}]


EMPTY = {**search_result(RETURNS), "content": []}
EMPTY_TEXT = {**search_result(RETURNS), "content": [{"type": "text", "text": ""}]}
MIXED = (
    "citations must be enabled on all or none of the documents and search results within a request"
)

INVALID = [
    (
        "citations on some search results only",
        [
            {
                "role": "user",
                "content": [
                    search_result(RETURNS),
                    search_result(SHIPPING, citations=None),
                    {"type": "text", "text": "Refund?"},
                ],
            }
        ],
        MIXED,
    ),
    (
        "citations on the documents but not the search results",
        [
            {
                "role": "user",
                "content": [
                    {
                        "type": "document",
                        "source": {"type": "text", "media_type": "text/plain", "data": "Hi."},
                        "citations": {"enabled": True},
                    },
                    search_result(RETURNS, citations=False),
                    {"type": "text", "text": "Refund?"},
                ],
            }
        ],
        MIXED,
    ),
    (
        "empty content",
        _with_result(EMPTY),
        "messages.0.content.0.search_result.content: List should have at least 1 item",
    ),
    (
        "an empty text block",
        _with_result(EMPTY_TEXT),
        "messages: text content blocks must be non-empty",
    ),
    (
        "empty content inside a tool result",
        [
            *TOOL_CALL[:2],
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": [EMPTY]}],
            },
        ],
        "messages.2.content.0.tool_result.content.0.search_result.content: "
        "List should have at least 1 item",
    ),
]


@pytest.mark.parametrize(
    ("messages", "message"),
    [(messages, message) for _, messages, message in INVALID],
    ids=[name for name, _, _ in INVALID],
)
def test_refusals_reach_the_sdk_as_bad_requests(
    client: anthropic.Anthropic, messages: list[Any], message: str
) -> None:
    for call in (
        lambda: client.messages.create(model="m", max_tokens=100, messages=messages),
        lambda: client.messages.count_tokens(model="m", messages=messages),
    ):
        with pytest.raises(anthropic.BadRequestError) as raised:
            call()
        error = raised.value
        assert error.status_code == 400
        assert error.request_id is not None and error.request_id.startswith("req_")
        assert isinstance(error.body, dict)
        assert error.body["error"]["type"] == "invalid_request_error"
        assert error.body["error"]["message"].startswith(message)
