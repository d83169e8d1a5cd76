"""Search results in the local engine: chunked by their text blocks, ranked with the documents,
cited with ``search_result_location`` (top level and inside a ``tool_result``), counted, cached,
streamed, and refused where the real API refuses them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.local_engine import LocalEngine, create_local_engine_app
from app.local_engine.answering import INTRO, NOTHING_FOUND_ANSWER
from app.local_engine.documents import chunk_search_result
from app.local_engine.request_validation import ParsedRequest, parse_create_request
from app.local_engine.streaming import message_events
from app.local_engine.tokens import estimate_tokens
from app.local_engine.wire import (
    CharLocation,
    Message,
    SearchResultBlockParam,
    SearchResultLocation,
)

VERSION = "2026-10-21"
HEADERS = {"anthropic-version": VERSION, "x-api-key": "anything"}

PETS = [
    "Cats sleep for about fifteen hours a day.",
    "Dogs need a walk at least twice a day.",
    "Parrots can live for more than fifty years.",
]
BILLING = [
    "Invoices are sent on the first day of each month.",
    "A refund reaches your card within five business days.",
]


def search_result(
    texts: list[str],
    *,
    source: str = "https://example.com/pets",
    title: str = "Pet care",
    citations: bool | None = True,
    cache_control: dict[str, Any] | None = None,
) -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": "search_result",
        "source": source,
        "title": title,
        "content": [{"type": "text", "text": text} for text in texts],
    }
    if citations is not None:
        block["citations"] = {"enabled": citations}
    if cache_control is not None:
        block["cache_control"] = cache_control
    return block


def text_document(data: str, *, citations: bool | None = True) -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": data},
        "title": "Notes",
    }
    if citations is not None:
        block["citations"] = {"enabled": citations}
    return block


def tool_result(*content: dict[str, Any], tool_use_id: str = "toolu_01") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": list(content)}


def tool_use(tool_use_id: str = "toolu_01") -> dict[str, Any]:
    return {
        "type": "tool_use",
        "id": tool_use_id,
        "name": "search",
        "input": {"query": "pets"},
    }


def body(*blocks: dict[str, Any], question: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-5",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": [*blocks, {"type": "text", "text": question}]}],
        **extra,
    }


def tool_conversation(*results: dict[str, Any], question: str) -> dict[str, Any]:
    """The question, the model's call of a search tool, and the tool's results."""
    return {
        "model": "claude-sonnet-5",
        "max_tokens": 1024,
        "messages": [
            {"role": "user", "content": question},
            {"role": "assistant", "content": [tool_use()]},
            {"role": "user", "content": [tool_result(*results)]},
        ],
    }


def parse(data: dict[str, Any]) -> ParsedRequest:
    return parse_create_request(json.dumps(data).encode(), VERSION)


def answer(engine: LocalEngine, data: dict[str, Any]) -> Message:
    message = engine.create_message_blocking(parse(data))
    assert isinstance(message, Message)  # no judge's request here
    return message


def citations_of(message: Message) -> list[Any]:
    return [citation for block in message.content for citation in block.citations or ()]


def contents_of(data: dict[str, Any]) -> list[list[str]]:
    """The text blocks of every search result of a request, in request order."""
    found: list[list[str]] = []

    def visit(block: dict[str, Any]) -> None:
        if block.get("type") == "search_result":
            found.append([item["text"] for item in block["content"]])
        elif block.get("type") == "tool_result" and isinstance(block.get("content"), list):
            for item in block["content"]:
                visit(item)

    for message in data["messages"]:
        if isinstance(message["content"], list):
            for block in message["content"]:
                visit(block)
    return found


def assert_cites_exactly(citation: SearchResultLocation, data: dict[str, Any]) -> None:
    texts = contents_of(data)[citation.search_result_index]
    assert citation.end_block_index > citation.start_block_index
    cited = texts[citation.start_block_index : citation.end_block_index]
    assert citation.cited_text == "".join(cited)


@pytest.fixture
def engine() -> LocalEngine:
    return LocalEngine(min_cacheable_tokens=0)


# --- chunking and answers ------------------------------------------------------------------------


def test_a_search_result_is_chunked_by_its_text_blocks() -> None:
    block = SearchResultBlockParam.model_validate(search_result(PETS))
    chunked = chunk_search_result(block, 4)
    assert (chunked.index, chunked.kind, chunked.source, chunked.title) == (
        4,
        "search_result",
        "https://example.com/pets",
        "Pet care",
    )
    assert [(c.position, c.text, c.start, c.end) for c in chunked.chunks] == [
        (n, text, n, n + 1) for n, text in enumerate(PETS)
    ]


def test_the_winning_block_is_cited_with_search_result_location(engine: LocalEngine) -> None:
    data = body(search_result(PETS), question="How long do parrots live?")
    message = answer(engine, data)
    assert message.content[0].text == INTRO
    assert message.content[0].citations is None
    [citation] = citations_of(message)
    assert citation == SearchResultLocation(
        cited_text=PETS[2],
        source="https://example.com/pets",
        title="Pet care",
        search_result_index=0,
        start_block_index=2,
        end_block_index=3,
    )
    assert message.content[1].text == PETS[2]
    assert citation.model_dump(mode="json") == {
        "type": "search_result_location",
        "cited_text": PETS[2],
        "source": "https://example.com/pets",
        "title": "Pet care",
        "search_result_index": 0,
        "start_block_index": 2,
        "end_block_index": 3,
    }


def test_neighbouring_blocks_keep_a_citation_each(engine: LocalEngine) -> None:
    texts = ["Cats purr when they are happy.", "Cats also purr when they are hurt."]
    message = answer(engine, body(search_result(texts), question="Why do cats purr?"))
    citations = citations_of(message)
    assert [(c.start_block_index, c.end_block_index) for c in citations] == [(0, 1), (1, 2)]
    assert [c.cited_text for c in citations] == texts


def test_search_result_index_counts_apart_from_document_index(engine: LocalEngine) -> None:
    data = body(
        search_result(PETS),
        text_document("The office cat is called Mittens. "),
        search_result(BILLING, source="https://example.com/billing", title="Billing"),
        question="When does a refund reach my card, and what is the cat called?",
    )
    citations = citations_of(answer(engine, data))
    by_type = {type(citation): citation for citation in citations}
    assert set(by_type) == {SearchResultLocation, CharLocation}
    refund = by_type[SearchResultLocation]
    assert (refund.search_result_index, refund.source, refund.title) == (
        1,
        "https://example.com/billing",
        "Billing",
    )
    assert refund.cited_text == BILLING[1]
    assert by_type[CharLocation].document_index == 0


def test_search_result_index_counts_across_user_turns(engine: LocalEngine) -> None:
    data = {
        "model": "claude-sonnet-5",
        "max_tokens": 1024,
        "messages": [
            {
                "role": "user",
                "content": [search_result(PETS), {"type": "text", "text": "Tell me about pets."}],
            },
            {"role": "assistant", "content": "Pets need care."},
            {
                "role": "user",
                "content": [
                    search_result(BILLING, source="https://example.com/billing", title="Billing"),
                    {"type": "text", "text": "When are invoices sent?"},
                ],
            },
        ],
    }
    [citation] = citations_of(answer(engine, data))
    assert isinstance(citation, SearchResultLocation)
    assert (citation.search_result_index, citation.start_block_index) == (1, 0)
    assert_cites_exactly(citation, data)


def test_search_results_inside_a_tool_result_are_cited(engine: LocalEngine) -> None:
    data = tool_conversation(
        search_result(PETS),
        search_result(BILLING, source="https://example.com/billing", title="Billing"),
        question="How often should dogs be walked?",
    )
    [citation] = citations_of(answer(engine, data))
    assert isinstance(citation, SearchResultLocation)
    assert (citation.search_result_index, citation.start_block_index) == (0, 1)
    assert citation.cited_text == PETS[1]


def test_top_level_and_tool_result_search_results_share_one_count(engine: LocalEngine) -> None:
    data = tool_conversation(
        search_result(BILLING, source="https://example.com/billing", title="Billing"),
        question="When are invoices sent?",
    )
    data["messages"][0]["content"] = [
        search_result(PETS),
        {"type": "text", "text": data["messages"][0]["content"]},
    ]
    [citation] = citations_of(answer(engine, data))
    assert (citation.search_result_index, citation.cited_text) == (1, BILLING[0])


def test_without_citations_the_quotes_come_uncited(engine: LocalEngine) -> None:
    data = body(search_result(PETS, citations=None), question="How long do parrots live?")
    message = answer(engine, data)
    assert [block.citations for block in message.content] == [None]
    assert message.content[0].text == INTRO + PETS[2]


def test_nothing_matching_says_so(engine: LocalEngine) -> None:
    message = answer(engine, body(search_result(PETS), question="Who won the election?"))
    assert [(block.text, block.citations) for block in message.content] == [
        (NOTHING_FOUND_ANSWER, None)
    ]


_WORDS = st.sampled_from(["cats", "dogs", "parrots", "sleep", "walk", "live", "years", "day"])


@settings(max_examples=60, deadline=None)
@given(
    results=st.lists(
        st.lists(
            st.lists(_WORDS, min_size=1, max_size=6).map(lambda w: " ".join(w) + ". "),
            min_size=1,
            max_size=4,
        ),
        min_size=1,
        max_size=3,
    ),
    question=st.lists(_WORDS, min_size=1, max_size=3),
    inside_tool_result=st.booleans(),
)
def test_every_citation_is_the_join_of_the_blocks_it_names(
    results: list[list[str]], question: list[str], inside_tool_result: bool
) -> None:
    blocks = [search_result(texts, source=f"doc-{n}") for n, texts in enumerate(results)]
    text = " ".join(question) + "?"
    data = (
        tool_conversation(*blocks, question=text)
        if inside_tool_result
        else body(*blocks, question=text)
    )
    for citation in citations_of(answer(LocalEngine(), data)):
        assert isinstance(citation, SearchResultLocation)
        assert citation.source == f"doc-{citation.search_result_index}"
        assert_cites_exactly(citation, data)


# --- tokens, cache, stream -----------------------------------------------------------------------


def test_count_tokens_counts_source_title_and_each_block(engine: LocalEngine) -> None:
    question = "How long do parrots live?"
    block = search_result(PETS)
    own = (
        estimate_tokens(block["source"])
        + estimate_tokens(block["title"])
        + sum(estimate_tokens(text) for text in PETS)
    )
    count = engine.count_tokens_blocking
    assert count(parse(body(block, question=question))) == own + estimate_tokens(question)
    # Inside a tool result, the same tokens as at the top level.
    with_result = count(parse(tool_conversation(block, question=question)))
    assert with_result - count(parse(tool_conversation(question=question))) == own


BIG_BLOCKS = [f"Passage {n} says that topic {n % 7} matters." for n in range(400)]


@pytest.mark.parametrize("inside_tool_result", [False, True], ids=["top level", "in tool_result"])
def test_a_cached_search_result_is_written_then_read(inside_tool_result: bool) -> None:
    engine = LocalEngine()  # the upstream's 1,024-token minimum
    block = search_result(BIG_BLOCKS, cache_control={"type": "ephemeral"})
    question = "What about topic 3?"
    data = (
        tool_conversation(block, question=question)
        if inside_tool_result
        else body(block, question=question)
    )
    request = parse(data)
    total = engine.count_tokens_blocking(request)
    first = engine.create_message_blocking(request).usage
    assert first.cache_creation_input_tokens >= 1024
    assert first.cache_read_input_tokens == 0
    assert first.input_tokens + first.cache_creation_input_tokens == total
    second = engine.create_message_blocking(request).usage
    assert (second.cache_creation_input_tokens, second.cache_read_input_tokens) == (
        0,
        first.cache_creation_input_tokens,
    )


def test_a_cache_control_on_the_last_text_block_marks_the_search_result() -> None:
    engine = LocalEngine()
    block = search_result(BIG_BLOCKS)
    block["content"][-1]["cache_control"] = {"type": "ephemeral"}
    request = parse(body(block, question="What about topic 3?"))
    engine.create_message_blocking(request)
    assert engine.create_message_blocking(request).usage.cache_read_input_tokens >= 1024


def test_stream_sends_search_result_citations_before_the_text(engine: LocalEngine) -> None:
    message = answer(engine, body(search_result(PETS), question="How long do parrots live?"))
    events = message_events(message, request_id="req_test")
    own = [data for _, data in events if data.get("index") == 1]
    assert own[0]["content_block"] == {"type": "text", "text": "", "citations": []}
    deltas = [data["delta"] for data in own[1:-1]]
    [citation] = message.content[1].citations or []
    assert deltas[0] == {"type": "citations_delta", "citation": citation.model_dump(mode="json")}
    assert deltas[0]["citation"]["type"] == "search_result_location"
    assert all(delta["type"] == "text_delta" for delta in deltas[1:])
    assert "".join(delta["text"] for delta in deltas[1:]) == PETS[2]


# --- validation, over HTTP in process --------------------------------------------------------


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    app = create_local_engine_app(LocalEngine(min_cacheable_tokens=0))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://engine") as client:
        yield client


MIXED = (
    "citations must be enabled on all or none of the documents and search results within a request"
)


def _edit(data: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    copy: dict[str, Any] = json.loads(json.dumps(data))
    change(copy)
    return copy


GOOD = body(search_result(PETS), question="How long do parrots live?")
IN_TOOL = tool_conversation(search_result(PETS), question="How long do parrots live?")


def _first_result(data: dict[str, Any]) -> dict[str, Any]:
    block: dict[str, Any] = data["messages"][0]["content"][0]
    return block


def _tool_result_item(data: dict[str, Any]) -> dict[str, Any]:
    item: dict[str, Any] = data["messages"][2]["content"][0]["content"][0]
    return item


INVALID = [
    (
        "citations on one search result only",
        body(search_result(PETS), search_result(BILLING, citations=None), question="q?"),
        MIXED,
    ),
    (
        "citations disabled on one search result",
        body(search_result(PETS), search_result(BILLING, citations=False), question="q?"),
        MIXED,
    ),
    (
        "search result cited, document not",
        body(search_result(PETS), text_document("Cats.", citations=None), question="q?"),
        MIXED,
    ),
    (
        "document cited, search result in a later tool result not",
        _edit(
            tool_conversation(search_result(PETS, citations=None), question="q?"),
            lambda d: d["messages"][0].update(
                content=[text_document("Cats."), {"type": "text", "text": "q?"}]
            ),
        ),
        MIXED,
    ),
    (
        "empty content",
        _edit(GOOD, lambda d: _first_result(d).update(content=[])),
        "messages.0.content.0.search_result.content: "
        "List should have at least 1 item after validation, not 0",
    ),
    (
        "no content",
        _edit(GOOD, lambda d: _first_result(d).pop("content")),
        "messages.0.content.0.search_result.content: Field required",
    ),
    (
        "empty text block",
        _edit(GOOD, lambda d: _first_result(d)["content"][1].update(text="")),
        "messages: text content blocks must be non-empty",
    ),
    (
        "whitespace text block",
        _edit(GOOD, lambda d: _first_result(d)["content"][1].update(text=" \n")),
        "messages: text content blocks must contain non-whitespace text",
    ),
    (
        "empty content inside a tool result",
        _edit(IN_TOOL, lambda d: _tool_result_item(d).update(content=[])),
        "messages.2.content.0.tool_result.content.0.search_result.content: "
        "List should have at least 1 item after validation, not 0",
    ),
    (
        "empty text block inside a tool result",
        _edit(IN_TOOL, lambda d: _tool_result_item(d)["content"][0].update(text="")),
        "messages: text content blocks must be non-empty",
    ),
    (
        "an image in a search result",
        _edit(GOOD, lambda d: _first_result(d)["content"].append({"type": "image"})),
        "messages.0.content.0.search_result.content.3.type: Input should be 'text'",
    ),
    (
        "no source",
        _edit(GOOD, lambda d: _first_result(d).pop("source")),
        "messages.0.content.0.search_result.source: Field required",
    ),
    (
        "an unknown field",
        _edit(GOOD, lambda d: _first_result(d).update(url="https://example.com")),
        "messages.0.content.0.search_result.url: Extra inputs are not permitted",
    ),
    (
        "citations on a text block of a search result",
        _edit(GOOD, lambda d: _first_result(d)["content"][0].update(citations=[])),
        "messages.0.content.0.search_result.content.0.citations: Extra inputs are not permitted",
    ),
    (
        "cache_control on a text block that is not the last",
        _edit(
            GOOD,
            lambda d: _first_result(d)["content"][0].update(cache_control={"type": "ephemeral"}),
        ),
        "messages.0.content.0.search_result.content.0.cache_control: cache_control is only "
        "allowed on the last block of a search result; put it on the search_result block instead",
    ),
    (
        "a fifth cache_control, inside a tool result",
        _edit(
            tool_conversation(
                *[
                    search_result([f"Fact {n}."], cache_control={"type": "ephemeral"})
                    for n in range(4)
                ],
                question="q?",
            ),
            lambda d: d["messages"][2]["content"][0].update(cache_control={"type": "ephemeral"}),
        ),
        "A maximum of 4 blocks with cache_control may be provided. Found 5.",
    ),
    (
        "a tool result's 1h breakpoint, after the 5m one of a search result inside it",
        _edit(
            tool_conversation(
                search_result(["A."], cache_control={"type": "ephemeral"}), question="q?"
            ),
            lambda d: d["messages"][2]["content"][0].update(
                cache_control={"type": "ephemeral", "ttl": "1h"}
            ),
        ),
        "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block",
    ),
    (
        "a 1h breakpoint after a 5m one, inside a search result",
        body(
            search_result(["A."], cache_control={"type": "ephemeral"}),
            search_result(["B."], cache_control={"type": "ephemeral", "ttl": "1h"}),
            question="q?",
        ),
        "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block",
    ),
]


@pytest.mark.parametrize(
    ("payload", "message"),
    [(payload, message) for _, payload, message in INVALID],
    ids=[name for name, _, _ in INVALID],
)
async def test_invalid_search_results_are_refused_as_the_upstream_refuses_them(
    http: httpx.AsyncClient, payload: dict[str, Any], message: str
) -> None:
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        data = (
            payload
            if path == "/v1/messages"
            else {k: v for k, v in payload.items() if k != "max_tokens"}
        )
        response = await http.post(path, json=data, headers=HEADERS)
        assert response.status_code == 400, response.text
        assert response.json()["error"] == {"type": "invalid_request_error", "message": message}


async def test_valid_search_results_answer_over_http(http: httpx.AsyncClient) -> None:
    for data in (GOOD, IN_TOOL):
        response = await http.post("/v1/messages", json=data, headers=HEADERS)
        assert response.status_code == 200, response.text
        [citation] = [c for block in response.json()["content"] for c in block.get("citations", [])]
        assert citation["type"] == "search_result_location"
        assert citation["cited_text"] == PETS[2]


async def test_a_breakpoint_inside_a_tool_result_comes_before_the_tool_results_own(
    http: httpx.AsyncClient,
) -> None:
    inner = search_result(["A."], cache_control={"type": "ephemeral", "ttl": "1h"})
    data = tool_conversation(inner, question="q?")
    data["messages"][2]["content"][0]["cache_control"] = {"type": "ephemeral"}
    response = await http.post("/v1/messages", json=data, headers=HEADERS)
    assert response.status_code == 200, response.text
