"""The collections routes: validate, call the service, return a schema."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response, status

from app.api.deps import DEFAULT_LIMIT, DocumentId, LimitQuery, PageCursorDep, SessionDep, TenantDep
from app.api.documents import documents_out
from app.api.problems import AUTH_PROBLEMS, BODY_PROBLEMS, ProblemResponse, links, problems
from app.collections import service
from app.collections.schemas import (
    AddCollectionDocumentsRequest,
    CollectionOut,
    CollectionPage,
    CreateCollectionRequest,
)
from app.documents.schemas import DocumentPage
from app.ids import NO_NUL

CollectionId = Annotated[str, Path(pattern=NO_NUL, description="The collection's id, `col_…`.")]
router = APIRouter(
    prefix="/v1/collections", tags=["collections"], responses=problems(*AUTH_PROBLEMS)
)


def collection_out(counted: service.CountedCollection) -> CollectionOut:
    collection = counted.collection
    return CollectionOut(
        id=collection.id,
        name=collection.name,
        description=collection.description,
        metadata=collection.user_metadata,
        document_count=counted.document_count,
        created_at=collection.created_at,
    )


@router.post(
    "",
    operation_id="createCollection",
    summary="Create a collection",
    status_code=status.HTTP_201_CREATED,
    response_model=CollectionOut,
    responses={
        201: {
            # Not addCollectionDocuments: its body needs document ids that this response lacks.
            "links": links(
                "collection_id", "getCollection", "listCollectionDocuments", "deleteCollection"
            )
        },
        **problems(*BODY_PROBLEMS),
    },
)
async def create_collection(
    body: CreateCollectionRequest, session: SessionDep, tenant_id: TenantDep
) -> CollectionOut:
    counted = await service.create_collection(
        session, tenant_id, body.name, body.description, body.metadata
    )
    return collection_out(counted)


@router.get(
    "",
    operation_id="listCollections",
    summary="List collections, newest first",
    response_model=CollectionPage,
    responses=problems(422),
)
async def list_collections(
    session: SessionDep,
    tenant_id: TenantDep,
    cursor: PageCursorDep,
    limit: LimitQuery = DEFAULT_LIMIT,
) -> CollectionPage:
    page = await service.list_collections(session, tenant_id, limit, cursor.value)
    return CollectionPage(
        data=[collection_out(c) for c in page.items], next_cursor=cursor.next(page.next_cursor)
    )


@router.get(
    "/{collection_id}",
    operation_id="getCollection",
    summary="Get a collection",
    response_model=CollectionOut,
    responses=problems(404, 422),
)
async def get_collection(
    collection_id: CollectionId, session: SessionDep, tenant_id: TenantDep
) -> CollectionOut:
    return collection_out(await service.get_collection(session, tenant_id, collection_id))


@router.delete(
    "/{collection_id}",
    operation_id="deleteCollection",
    summary="Delete a collection (its documents stay)",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=ProblemResponse,  # every body it sends is a problem: see app.api.problems
    response_description="Deleted.",
    responses=problems(*AUTH_PROBLEMS, 404, 422, model=True),
)
async def delete_collection(
    collection_id: CollectionId, session: SessionDep, tenant_id: TenantDep
) -> Response:
    await service.delete_collection(session, tenant_id, collection_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/{collection_id}/documents",
    operation_id="addCollectionDocuments",
    summary="Add documents to a collection",
    response_model=CollectionOut,
    responses=problems(*BODY_PROBLEMS, 404),
)
async def add_collection_documents(
    collection_id: CollectionId,
    body: AddCollectionDocumentsRequest,
    session: SessionDep,
    tenant_id: TenantDep,
) -> CollectionOut:
    counted = await service.add_documents(session, tenant_id, collection_id, body.document_ids)
    return collection_out(counted)


@router.get(
    "/{collection_id}/documents",
    operation_id="listCollectionDocuments",
    summary="List a collection's documents, newest first",
    response_model=DocumentPage,
    responses=problems(404, 422),
)
async def list_collection_documents(
    collection_id: CollectionId,
    session: SessionDep,
    tenant_id: TenantDep,
    cursor: PageCursorDep,
    limit: LimitQuery = DEFAULT_LIMIT,
) -> DocumentPage:
    page = await service.list_documents(session, tenant_id, collection_id, limit, cursor.value)
    return DocumentPage(
        data=await documents_out(session, page.items), next_cursor=cursor.next(page.next_cursor)
    )


@router.delete(
    "/{collection_id}/documents/{document_id}",
    operation_id="removeCollectionDocument",
    summary="Take a document out of a collection (the document stays)",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=ProblemResponse,
    response_description="Removed.",
    responses=problems(*AUTH_PROBLEMS, 404, 422, model=True),
)
async def remove_collection_document(
    collection_id: CollectionId, document_id: DocumentId, session: SessionDep, tenant_id: TenantDep
) -> Response:
    await service.remove_document(session, tenant_id, collection_id, document_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
