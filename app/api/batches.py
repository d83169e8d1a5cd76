"""The answer batches routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request, status
from sqlalchemy.ext.asyncio import AsyncSession

from app.answers.store import answer_out
from app.api.deps import (
    DEFAULT_LIMIT,
    ContextDep,
    LimitQuery,
    PageCursorDep,
    PdfPagesDep,
    PrincipalDep,
    SessionDep,
    TenantDep,
)
from app.api.problems import AUTH_PROBLEMS, BODY_PROBLEMS, UPSTREAM_PROBLEMS, links, problems
from app.api.responses import OrjsonResponse
from app.batches import service
from app.batches.poller import BatchPoller
from app.batches.schemas import (
    AnswerBatchOut,
    AnswerBatchPage,
    AnswerBatchRequest,
    AnswerBatchResult,
    AnswerBatchResultPage,
)
from app.db.models import AnswerBatch
from app.ids import NO_NUL


async def _poller(request: Request) -> BatchPoller:  # async: no worker thread
    poller: BatchPoller = request.app.state.batch_poller
    return poller


PollerDep = Annotated[BatchPoller, Depends(_poller)]
BatchId = Annotated[str, Path(pattern=NO_NUL, description="The batch's id, `batch_…`.")]
router = APIRouter(
    prefix="/v1/answer-batches", tags=["answer batches"], responses=problems(*AUTH_PROBLEMS)
)
_BATCH_LINKS = links("batch_id", "getAnswerBatch", "listAnswerBatchResults", "cancelAnswerBatch")


async def _out(session: AsyncSession, batches: list[AnswerBatch]) -> list[dict[str, object]]:
    counts = await service.request_counts(session, [batch.id for batch in batches])
    return [service.batch_payload(batch, counts[batch.id]) for batch in batches]


@router.post(
    "",
    operation_id="createAnswerBatch",
    summary="Ask many questions at once, answered within a day at half the price",
    status_code=status.HTTP_201_CREATED,
    response_model=AnswerBatchOut,
    responses={201: {"links": _BATCH_LINKS}, **problems(*BODY_PROBLEMS, *UPSTREAM_PROBLEMS)},
)
async def create_answer_batch(
    body: AnswerBatchRequest,
    session: SessionDep,
    principal: PrincipalDep,
    context: ContextDep,
    poller: PollerDep,
) -> OrjsonResponse:
    batch = await service.create_batch(session, principal, body.requests, context)
    poller.wake()
    [out] = await _out(session, [batch])
    return OrjsonResponse(out, status_code=status.HTTP_201_CREATED)


@router.get(
    "",
    operation_id="listAnswerBatches",
    summary="List answer batches, newest first",
    response_model=AnswerBatchPage,
    responses=problems(422),
)
async def list_answer_batches(
    session: SessionDep,
    tenant_id: TenantDep,
    cursor: PageCursorDep,
    limit: LimitQuery = DEFAULT_LIMIT,
) -> OrjsonResponse:
    page = await service.list_batches(session, tenant_id, limit, cursor.value)
    return OrjsonResponse(
        {"data": await _out(session, page.items), "next_cursor": cursor.next(page.next_cursor)}
    )


@router.get(
    "/{batch_id}",
    operation_id="getAnswerBatch",
    summary="Get an answer batch and its request counts",
    response_model=AnswerBatchOut,
    responses=problems(404, 422),
)
async def get_answer_batch(
    batch_id: BatchId, session: SessionDep, tenant_id: TenantDep
) -> OrjsonResponse:
    [out] = await _out(session, [await service.get_batch(session, tenant_id, batch_id)])
    return OrjsonResponse(out)


@router.get(
    "/{batch_id}/results",
    operation_id="listAnswerBatchResults",
    summary="List a batch's results in request order: those known so far",
    response_model=AnswerBatchResultPage,
    response_model_exclude_unset=True,  # as AnswerOut.shown
    responses=problems(404, 422),
)
async def list_answer_batch_results(
    batch_id: BatchId,
    session: SessionDep,
    tenant_id: TenantDep,
    pages: PdfPagesDep,
    cursor: PageCursorDep,
    limit: LimitQuery = DEFAULT_LIMIT,
) -> AnswerBatchResultPage:
    page = await service.list_results(session, tenant_id, batch_id, limit, cursor.value)
    data = [
        AnswerBatchResult(
            custom_id=result.custom_id,
            status=result.status,
            # As getAnswer shows it: boxes on the spans of PDFs, measured on read.
            answer=None
            if result.answer is None
            else await answer_out(session, pages, result.answer),
            error=result.error,
        )
        for result in page.items
    ]
    return AnswerBatchResultPage(data=data, next_cursor=cursor.next(page.next_cursor))


@router.post(
    "/{batch_id}/cancel",
    operation_id="cancelAnswerBatch",
    summary="Cancel a batch: requests not yet answered end canceled",
    response_model=AnswerBatchOut,
    responses=problems(404, 422, *UPSTREAM_PROBLEMS),
)
async def cancel_answer_batch(
    batch_id: BatchId,
    session: SessionDep,
    tenant_id: TenantDep,
    context: ContextDep,
    poller: PollerDep,
) -> OrjsonResponse:
    batch = await service.cancel_batch(session, tenant_id, batch_id, context)
    poller.wake()
    [out] = await _out(session, [batch])
    return OrjsonResponse(out)
