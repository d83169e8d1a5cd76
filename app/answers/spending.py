"""Spending budgets around an upstream call: its maximum cost reserved before it is made, its
actual cost settled after, the reservation released when it fails (``app.auth.budgets``).

A caller with no budget (``Principal.budgets`` empty) costs nothing here: no estimate, no query.

The maximum cost is the request's input at the dearer of the input and cache-write prices, plus
``max_tokens`` of output, at the model's price (``app.usage.prices``). The input is counted as
the bytes of the request's JSON: each token the upstream counts stands for at least one byte of
text, so the estimate is never short, and it costs one serialization, only for a caller with a
budget. A document sent as its original bytes (a PDF, in base64) is counted instead by what the
upstream reads of it, its text and one image a page (``RequestCost.tokens``), times
``BASE64_MARGIN``, when that is less than its base64: a PDF of large pictures would otherwise
reserve many times what it can cost (2 MB of photographs on one page: 2.7 million "tokens"
against the few thousand the upstream counts).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import orjson

from app.answers.context import AnswerContext
from app.auth import budgets
from app.auth.budgets import NO_RESERVATION, Reservation
from app.auth.scopes import Principal
from app.documents.sources import SourceDocument

log = logging.getLogger(__name__)


# A PDF's tokens as estimated (a quarter of its characters, 1,500 a page image) can fall short
# of what the upstream counts (a page of CJK text is a token a character or more); four times
# the estimate is its characters and 6,000 a page.
BASE64_MARGIN = 4


def input_estimate(
    request: Mapping[str, Any], sources: Sequence[SourceDocument | None] = ()
) -> int:
    """At least as many tokens as the request's input: the bytes of its JSON, a document sent
    in base64 counted at the lesser of its base64 and ``BASE64_MARGIN`` times its tokens."""
    size = len(orjson.dumps({k: v for k, v in request.items() if k != "max_tokens"}))
    saved, counted = 0, 0
    for source in sources:
        if source is None:
            continue
        sent = sum(_base64_size(prompt.source) for prompt in source.prompts)
        counted += sent
        saved += sent - min(sent, BASE64_MARGIN * source.cost.tokens)
    # Only when the sources' blocks are the request's (not some page windows of them).
    return size - saved if counted == _request_base64_size(request) else size


def _base64_size(source: Mapping[str, Any]) -> int:
    data = source.get("data")
    return len(data) if source.get("type") == "base64" and isinstance(data, str) else 0


def _request_base64_size(request: Mapping[str, Any]) -> int:
    return sum(
        _base64_size(block.get("source") or {})
        for message in request.get("messages", ())
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "document"
    )


def max_cost(
    context: AnswerContext,
    request: Mapping[str, Any],
    sources: Sequence[SourceDocument | None] = (),
    *,
    batch: bool = False,
) -> int:
    """The most the request can cost, in nano-USD."""
    return budgets.max_cost(
        context.prices,
        str(request["model"]),
        input_estimate(request, sources),
        int(request["max_tokens"]),
        batch=batch,
    )


async def reserve(
    context: AnswerContext,
    principal: Principal,
    request: Mapping[str, Any],
    sources: Sequence[SourceDocument | None] = (),
) -> Reservation:
    """Reserve the request's maximum cost in the caller's budgets; ``budget_exceeded`` when
    one has not that much left."""
    if not principal.budgets:
        return NO_RESERVATION
    amount = max_cost(context, request, sources)
    return await budgets.reserve(context.engine, principal.budgets, amount)


async def settle(
    context: AnswerContext,
    reservation: Reservation,
    model: str,
    usage: Mapping[str, Any],
    *,
    batch: bool = False,
) -> None:
    """Count the call's actual cost (its usage at ``model``'s price); give back the rest.
    Shielded: a call that ended is counted also when its caller is cancelled. A failure to
    count is logged, not raised: the call's answer is the caller's all the same, and its
    reservation stays counted until its period ends (the safe side)."""
    if not reservation.owners:
        return
    tokens = {name: value for name, value in usage.items() if isinstance(value, int)}
    spent = budgets.cost(context.prices, model, tokens, batch=batch)
    with anyio.CancelScope(shield=True):
        try:
            await budgets.settle(context.engine, reservation, spent)
        except Exception:
            log.exception("settling a budget reservation failed; it stays reserved")


async def release(context: AnswerContext, reservation: Reservation) -> None:
    """Give a failed call's reservation back (shielded; a failure is logged)."""
    if not reservation.owners:
        return
    with anyio.CancelScope(shield=True):
        try:
            await budgets.release(context.engine, reservation)
        except Exception:
            log.exception("releasing a budget reservation failed; it stays reserved")
