"""The local engine's token estimate and its prompt cache (writes, reads, TTLs, bounds)."""

from __future__ import annotations

import asyncio
import math
import threading
from typing import Any

import pytest

from app.documents.pdf import extract_pdf_text
from app.local_engine import LocalEngine
from app.local_engine.documents import upstream_page_text
from app.local_engine.prompt_cache import PromptCache
from app.local_engine.tokens import estimate_tokens, prompt_units
from tests.fixture_files import AMAZON_PDF
from tests.unit.local_engine.request_bodies import (
    GRASS_SKY,
    GRASS_SKY_QUESTION,
    FakeClock,
    body,
    parse,
    pdf_document,
    text_document,
)

# --- token estimate --------------------------------------------------------------------------


def test_estimate_is_a_quarter_of_the_characters_rounded_up() -> None:
    assert [estimate_tokens(text) for text in ("", "a", "abcd", "abcde")] == [0, 1, 1, 2]


def test_request_tokens_count_title_data_and_question(engine: LocalEngine) -> None:
    request = parse(body(text_document(GRASS_SKY), question=GRASS_SKY_QUESTION))
    # title "My Document" 11 chars -> 3, data 36 -> 9, question 32 -> 8
    assert engine.count_tokens_blocking(request) == 3 + 9 + 8


def test_pdf_tokens_are_counted_page_by_page(engine: LocalEngine) -> None:
    request = parse(body(pdf_document(AMAZON_PDF.read_bytes()), question="Revenue?"))
    pages = [upstream_page_text(p) for p in extract_pdf_text(AMAZON_PDF.read_bytes()).pages]
    expected = sum(math.ceil(len(page) / 4) for page in pages) + estimate_tokens("Revenue?")
    assert engine.count_tokens_blocking(request) == expected


def test_system_string_and_blocks_are_the_same_prompt(engine: LocalEngine) -> None:
    as_string = parse(body(question="Hi", system="Be brief."))
    as_blocks = parse(body(question="Hi", system=[{"type": "text", "text": "Be brief."}]))
    units = prompt_units(as_string, [])
    assert units == prompt_units(as_blocks, [])
    assert engine.count_tokens_blocking(as_string) == 3 + 1


# --- prompt cache ----------------------------------------------------------------------------

BIG = " ".join(f"Sentence number {n} talks about topic {n % 7}." for n in range(400))


def cached_request(ttl: str | None = None) -> dict[str, Any]:
    control = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    return body(text_document(BIG, cache_control=control), question="What about topic 3?")


def test_cache_first_request_writes_second_reads_and_ttl_expires() -> None:
    clock = FakeClock()
    engine = LocalEngine(clock=clock)
    request = parse(cached_request())
    total = engine.count_tokens_blocking(request)
    document_tokens = total - estimate_tokens("What about topic 3?")
    assert document_tokens >= 1024

    first = engine.create_message_blocking(request).usage
    assert (first.cache_creation_input_tokens, first.cache_read_input_tokens) == (
        document_tokens,
        0,
    )
    assert first.cache_creation.ephemeral_5m_input_tokens == document_tokens
    assert first.input_tokens == total - document_tokens

    clock.advance(200)
    second = engine.create_message_blocking(request).usage
    assert (second.cache_creation_input_tokens, second.cache_read_input_tokens) == (
        0,
        document_tokens,
    )
    assert second.input_tokens == first.input_tokens

    clock.advance(299)  # the read at t=200 started the 5 minutes again
    assert engine.create_message_blocking(request).usage.cache_read_input_tokens == document_tokens

    clock.advance(301)
    expired = engine.create_message_blocking(request).usage
    assert (expired.cache_creation_input_tokens, expired.cache_read_input_tokens) == (
        document_tokens,
        0,
    )


def test_cache_one_hour_ttl() -> None:
    clock = FakeClock()
    engine = LocalEngine(clock=clock)
    request = parse(cached_request("1h"))
    first = engine.create_message_blocking(request).usage
    assert first.cache_creation.ephemeral_1h_input_tokens == first.cache_creation_input_tokens > 0
    assert first.cache_creation.ephemeral_5m_input_tokens == 0
    clock.advance(3_000)
    assert engine.create_message_blocking(request).usage.cache_read_input_tokens > 0
    clock.advance(3_601)
    assert engine.create_message_blocking(request).usage.cache_read_input_tokens == 0


def test_cache_ignores_prefixes_below_the_minimum() -> None:
    engine = LocalEngine(clock=FakeClock())  # 1,024 tokens, as on Sonnet models
    small = body(text_document(GRASS_SKY, cache_control={"type": "ephemeral"}), question="Sky?")
    for _ in range(2):
        usage = engine.create_message_blocking(parse(small)).usage
        assert (usage.cache_creation_input_tokens, usage.cache_read_input_tokens) == (0, 0)
        assert usage.input_tokens == engine.count_tokens_blocking(parse(small))


def test_cache_reads_an_earlier_prefix_through_the_lookback() -> None:
    engine = LocalEngine(clock=FakeClock())
    first_turn = cached_request()
    first = engine.create_message_blocking(parse(first_turn)).usage
    follow_up = {
        **first_turn,
        "messages": [
            first_turn["messages"][0],
            {"role": "assistant", "content": "Topic 3 comes up often."},
            {
                "role": "user",
                "content": [
                    {
                        "type": "text",
                        "text": "And topic 4?",
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
            },
        ],
    }
    request = parse(follow_up)
    usage = engine.create_message_blocking(request).usage
    assert usage.cache_read_input_tokens == first.cache_creation_input_tokens
    after_document = engine.count_tokens_blocking(request) - usage.cache_read_input_tokens
    assert usage.cache_creation_input_tokens == after_document
    assert usage.input_tokens == 0


def test_cache_splits_creation_by_ttl_and_counts_automatic_breakpoint() -> None:
    engine = LocalEngine(clock=FakeClock(), min_cacheable_tokens=0)
    data = body(
        text_document(GRASS_SKY, cache_control={"type": "ephemeral", "ttl": "1h"}),
        question=GRASS_SKY_QUESTION,
        cache_control={"type": "ephemeral"},
    )
    usage = engine.create_message_blocking(parse(data)).usage
    # document (3 + 9) under 1h, the question (8) under the automatic 5m breakpoint
    assert usage.cache_creation.ephemeral_1h_input_tokens == 12
    assert usage.cache_creation.ephemeral_5m_input_tokens == 8
    assert usage.input_tokens == 0


def test_cache_is_bounded_and_evicts_the_oldest_prefix() -> None:
    cache_engine = LocalEngine(clock=FakeClock(), min_cacheable_tokens=0, prompt_cache_entries=2)
    requests = [
        parse(body(text_document(f"Fact {n}.", cache_control={"type": "ephemeral"}), question="?x"))
        for n in range(3)
    ]
    for request in requests:
        cache_engine.create_message_blocking(request)
    assert len(cache_engine.prompt_cache) == 2
    assert cache_engine.create_message_blocking(requests[2]).usage.cache_read_input_tokens > 0
    assert cache_engine.create_message_blocking(requests[0]).usage.cache_read_input_tokens == 0


def test_cache_key_includes_the_model_and_every_earlier_block() -> None:
    engine = LocalEngine(clock=FakeClock(), min_cacheable_tokens=0)
    control = {"type": "ephemeral"}
    base = body(text_document(GRASS_SKY, cache_control=control), question="Sky?")
    engine.create_message_blocking(parse(base))
    other_model = {**base, "model": "claude-opus-5"}
    with_system = {**base, "system": "Be brief."}
    for variant in (other_model, with_system):
        assert engine.create_message_blocking(parse(variant)).usage.cache_read_input_tokens == 0
    assert engine.create_message_blocking(parse(base)).usage.cache_read_input_tokens == 12


async def test_concurrent_identical_requests_write_the_cache_once() -> None:
    engine = LocalEngine(clock=FakeClock())
    request = parse(cached_request())
    messages = await asyncio.gather(*(engine.create_message(request) for _ in range(8)))
    writes = [m.usage.cache_creation_input_tokens for m in messages]
    reads = [m.usage.cache_read_input_tokens for m in messages]
    assert sum(1 for tokens in writes if tokens) == 1
    assert sorted(reads) == [0] + [max(writes)] * 7


async def test_engine_work_runs_off_the_event_loop_thread() -> None:
    threads: list[threading.Thread] = []

    def clock() -> float:
        threads.append(threading.current_thread())
        return 0.0

    engine = LocalEngine(clock=clock)
    await engine.create_message(parse(cached_request()))
    assert threads
    assert all(thread is not threading.current_thread() for thread in threads)


def test_prompt_cache_refuses_a_size_of_zero() -> None:
    with pytest.raises(ValueError, match="max_entries"):
        PromptCache(max_entries=0)
