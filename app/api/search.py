"""searchPassages: validate, find the documents in scope, search them."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import SessionDep, SettingsDep, TenantDep
from app.api.problems import AUTH_PROBLEMS, BODY_PROBLEMS, problems
from app.collections.service import owned_document_ids
from app.search.schemas import PassageOut, SearchRequest, SearchResponse
from app.search.service import search_collection_passages, search_passages

router = APIRouter(prefix="/v1/search", tags=["search"], responses=problems(*AUTH_PROBLEMS))


@router.post(
    "",
    operation_id="searchPassages",
    summary="Find the passages of a collection or of documents that best match a query",
    response_model=SearchResponse,
    responses=problems(*BODY_PROBLEMS, 404),
)
async def search(
    body: SearchRequest, session: SessionDep, tenant_id: TenantDep, settings: SettingsDep
) -> SearchResponse:
    window = settings.search_window_chunks
    per_document = settings.search_max_passages_per_document
    if body.collection_id is not None:
        passages = await search_collection_passages(
            session,
            tenant_id,
            body.query,
            body.collection_id,
            body.limit,
            window=window,
            per_document=per_document,
        )
    else:
        document_ids = await owned_document_ids(session, tenant_id, body.document_ids or [])
        passages = await search_passages(
            session,
            tenant_id,
            body.query,
            document_ids,
            body.limit,
            window=window,
            per_document=per_document,
        )
    return SearchResponse(
        data=[
            PassageOut(
                document_id=p.document_id,
                title=p.title,
                text=p.text,
                start_char=p.start_char,
                end_char=p.end_char,
                start_page=p.start_page,
                end_page=p.end_page,
                chunk_indices=p.chunk_indices,
                score=p.score,
            )
            for p in passages
        ]
    )
