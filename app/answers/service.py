"""Asking a question: prepare it, ask the upstream, store the answer.

The way of an answer, top to bottom: ``request.prepare`` checks the question and builds the
Messages request (documents, or the passages search finds; a conversation's history); the
upstream client sends it; ``store.store_answer`` resolves every citation and stores the
answer. A streamed answer goes through ``relay.open_relay`` instead, which stores what arrived
when the stream ends.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy.ext.asyncio import AsyncSession

from app.answers import spending
from app.answers.answer import AnswerOut
from app.answers.context import AnswerContext
from app.answers.relay import RelayedAnswer, open_relay
from app.answers.request import Prepared, prepare, release
from app.answers.schemas import AnswerRequest
from app.answers.store import Reply, store_answer
from app.auth.keys import Principal
from app.upstream.client import UpstreamAnswer


async def create_answer(
    session: AsyncSession, principal: Principal, body: AnswerRequest, context: AnswerContext
) -> AnswerOut:
    """Ask the upstream, resolve every citation to a stored span, store the answer."""
    prepared = await prepare(session, principal.tenant_id, body, context, claim=True)
    try:
        answer, _ = await answer_prepared(context, principal, prepared)
        return answer
    finally:
        await release(context, prepared)


async def answer_prepared(
    context: AnswerContext,
    principal: Principal,
    prepared: Prepared,
    headers: Mapping[str, str] | None = None,
) -> tuple[AnswerOut, UpstreamAnswer]:
    """Send a prepared request (with these extra upstream headers) and store the answer: the
    stored Answer and the upstream's reply. The caller's budgets are reserved before the call
    and settled after it (``spending``): this is the one place every answer asked whole, of
    every API, is sent from."""
    await context.limits.check_tokens(principal)
    reservation = await spending.reserve(context, principal, prepared.request, prepared.sources)
    try:
        reply = await context.upstream.create_message(prepared.request, headers)
    except BaseException:
        await spending.release(context, reservation)
        raise
    stored = Reply.of_message(reply.message, reply.request_id)
    await spending.settle(context, reservation, stored.model, stored.usage)
    return await store_answer(context, principal, prepared, stored), reply


async def open_stream(
    session: AsyncSession, principal: Principal, body: AnswerRequest, context: AnswerContext
) -> RelayedAnswer:
    """Start a streamed answer. Everything that can fail before the first event (the checks,
    the upstream's HTTP status, retries) fails here, as an ordinary error response."""
    prepared = await prepare(session, principal.tenant_id, body, context, claim=True)
    return await open_relay(context, principal, prepared)


async def count_tokens(
    session: AsyncSession, principal: Principal, body: AnswerRequest, context: AnswerContext
) -> int:
    """What the question would cost in input tokens, as the upstream counts them."""
    prepared = await prepare(session, principal.tenant_id, body, context)
    request = {k: v for k, v in prepared.request.items() if k != "max_tokens"}
    return await context.upstream.count_tokens(request)
