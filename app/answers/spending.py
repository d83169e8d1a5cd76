"""Spending budgets around an upstream call: its maximum cost reserved before it is made, its
actual cost settled after, the reservation released when it fails (``app.auth.budgets``).

A caller with no budget (``Principal.budgets`` empty) costs nothing here: no estimate, no query.

The maximum cost is the request's input at the dearer of the input and cache-write prices, plus
``max_tokens`` of output, at the model's price (``app.usage.prices``). The input is counted as
the bytes of the request's JSON: each token the upstream counts stands for at least one byte of
text (a PDF's pages are counted from its base64, which is larger than their tokens), so the
estimate is never short, and it costs one serialization, only for a caller with a budget.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import anyio
import orjson

from app.answers.context import AnswerContext
from app.auth import budgets
from app.auth.budgets import NO_RESERVATION, Reservation
from app.auth.scopes import Principal

log = logging.getLogger(__name__)


def input_estimate(request: Mapping[str, Any]) -> int:
    """At least as many tokens as the request's input: the bytes of its JSON."""
    return len(orjson.dumps({k: v for k, v in request.items() if k != "max_tokens"}))


def max_cost(context: AnswerContext, request: Mapping[str, Any], *, batch: bool = False) -> int:
    """The most the request can cost, in nano-USD."""
    return budgets.max_cost(
        context.prices,
        str(request["model"]),
        input_estimate(request),
        int(request["max_tokens"]),
        batch=batch,
    )


async def reserve(
    context: AnswerContext, principal: Principal, request: Mapping[str, Any]
) -> Reservation:
    """Reserve the request's maximum cost in the caller's budgets; ``budget_exceeded`` when
    one has not that much left."""
    if not principal.budgets:
        return NO_RESERVATION
    amount = max_cost(context, request)
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
