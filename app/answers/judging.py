"""The support judge's one upstream call per answer: about the citations the lexical check did
not find supported, citations off, verdicts as a tool's JSON (``app.support.judge``). Its
verdicts replace theirs; a failed or unusable call leaves them, with a ``judge_failed``
reason. Never retried past the client's own retries, never in the way of the answer.

The call spends the asker's budgets like any other (reserved before, settled after; a budget
without room for it fails the judging, not the answer), and its usage is recorded as a
``support_check`` usage record (``app.db.usage``), which the usage and cost reports count."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import anyio

from app.answers import spending
from app.answers.context import AnswerContext
from app.auth.scopes import Principal
from app.db.usage import record_usage
from app.errors import CitegateError
from app.support.judge import Item, failed, judge_request, read_verdicts

log = logging.getLogger(__name__)

_JUDGED = ("partial", "unsupported")
# Judge calls in flight at once for the answers of one batch chunk.
BATCH_JUDGE_CONCURRENCY = 4


async def judge_segments(
    context: AnswerContext,
    segments: list[dict[str, Any]],
    model: str,
    principal: Principal,
) -> dict[str, int] | None:
    """Judge the segments' citations that the lexical check did not find supported, in place;
    the judge call's tokens, or None when there was nothing to judge or the call failed.
    ``principal``: whose budgets it spends and whose usage it is (the judge's call is an
    ordinary one, also for an answer of a batch: no batch discount)."""
    judged = [
        (segment, citation)
        for segment in segments
        for citation in segment["citations"]
        if (citation.get("support") or {}).get("verdict") in _JUDGED
    ]
    if not judged:
        return None
    items = [
        Item(segment["text"], str(citation.get("cited_text") or "")) for segment, citation in judged
    ]
    request = judge_request(context.settings.support_judge_model or model, items)
    try:
        reservation = await spending.reserve(context, principal, request)
        try:
            answered = await context.upstream.create_message(request)
        except BaseException:
            await spending.release(context, reservation)
            raise
    except CitegateError as exc:
        log.warning("the support judge failed: %s", exc.code)
        for _, citation in judged:
            citation["support"] = failed(
                citation["support"], f"The judge call failed ({exc.code})."
            )
        return None
    usage = answered.message.usage
    spent = usage.model_dump()
    await spending.settle(context, reservation, answered.message.model, spent)
    await record_usage(
        context.engine,
        tenant_id=principal.tenant_id,
        key_id=principal.key_id,
        source="support_check",
        model=answered.message.model,
        usage=spent,
    )
    tokens = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}
    content = [block.model_dump() for block in answered.message.content]
    verdicts = read_verdicts(content, len(items))
    if verdicts is None:
        log.warning("the support judge gave no usable verdicts")
        for _, citation in judged:
            citation["support"] = failed(citation["support"], "The judge gave no usable verdicts.")
        return tokens
    for (_, citation), verdict in zip(judged, verdicts, strict=True):
        citation["support"] = verdict.as_dict()
    return tokens


async def judge_rows(
    context: AnswerContext,
    rows: Sequence[dict[str, Any]],
    principal: Principal,
    concurrency: int = BATCH_JUDGE_CONCURRENCY,
) -> int:
    """Judge answer rows not yet stored (a batch's), at most ``concurrency`` calls at once, as
    one answer asked alone is judged (``judge_segments``: the asker's budgets, its usage
    record): each completed row's citations in place, the call's tokens in its
    ``usage.support_check``. The tokens of all the calls, to spend from the daily tokens."""
    limiter = anyio.CapacityLimiter(concurrency)
    spent = 0

    async def judge_one(row: dict[str, Any]) -> None:
        nonlocal spent
        async with limiter:
            judged = await judge_segments(context, row["segments"], row["model"], principal)
        if judged is not None:
            row["usage"] = {**row["usage"], "support_check": judged}
            spent += sum(judged.values())

    async with anyio.create_task_group() as group:
        for row in rows:
            if row["status"] == "completed":
                group.start_soon(judge_one, row)
    return spent
