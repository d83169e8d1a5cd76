"""The local engine answers a support judge's request itself: a record_support call judging
every item, the same each time, so that judge mode works offline."""

from __future__ import annotations

import json

from app.local_engine import LocalEngine
from app.local_engine.request_validation import parse_create_request
from app.local_engine.wire import Message, ToolUseMessage
from app.support.judge import Item, judge_request, read_verdicts
from tests.unit.local_engine.request_bodies import VERSION

ITEMS = [
    Item("Revenue grew 12% in 2023.", "In 2023, revenue grew 12% year over year."),
    Item("Revenue grew 21% in 2023.", "In 2023, revenue grew 12% year over year."),
    Item("The store is not open on Sundays.", "The store is open on Sundays."),
]


def ask(body: dict[str, object]) -> Message | ToolUseMessage:
    return LocalEngine().create_message_blocking(
        parse_create_request(json.dumps(body).encode(), VERSION)
    )


def test_a_judge_request_gets_its_tool_call_with_every_verdict() -> None:
    answered = ask(judge_request("citegate-local-1", ITEMS))
    assert isinstance(answered, ToolUseMessage)
    assert answered.stop_reason == "tool_use"
    assert answered.usage.input_tokens > 0 and answered.usage.output_tokens > 0
    content = [block.model_dump() for block in answered.content]
    verdicts = read_verdicts(content, len(ITEMS))
    assert verdicts is not None
    assert [v.verdict for v in verdicts] == ["supported", "partial", "unsupported"]
    assert all(v.method == "judge" for v in verdicts)
    again = ask(judge_request("citegate-local-1", ITEMS))
    assert [b.input for b in again.content] == [b.input for b in answered.content]  # type: ignore[union-attr]


def test_a_question_that_only_offers_the_tool_is_answered_as_usual() -> None:
    body = judge_request("citegate-local-1", ITEMS)
    body["messages"] = [{"role": "user", "content": "What grew?"}]
    assert isinstance(ask(body), Message)
