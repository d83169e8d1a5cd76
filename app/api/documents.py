"""The documents routes: validate, call the service, return a schema."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePosixPath, PureWindowsPath
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, File, Request, Response, UploadFile, status
from fastapi.exceptions import RequestValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from app.api.body_checks import body_limits
from app.api.deps import (
    DEFAULT_LIMIT,
    DocumentId,
    LimitQuery,
    OcrDep,
    PageCursorDep,
    SessionDep,
    SettingsDep,
    SourceCacheDep,
    TenantDep,
)
from app.api.problems import AUTH_PROBLEMS, BODY_PROBLEMS, ProblemResponse, links, problems
from app.api.responses import OrjsonResponse
from app.db.models import Document, DocumentChunk, DocumentPageRow
from app.documents import service
from app.documents.kinds import ParseOptions, all_kinds
from app.documents.reading import OcrOptions
from app.documents.schemas import (
    ChunkOut,
    ChunkPage,
    CreateDocumentRequest,
    DocumentError,
    DocumentOut,
    DocumentPage,
    DocumentUpload,
    PageOut,
    PagePage,
    PagesRead,
    Progress,
)
from app.errors import PayloadTooLarge
from app.settings import Settings

_DOCUMENT_LINKS = links(
    "document_id", "getDocument", "getDocumentContent", "listDocumentChunks", "deleteDocument"
)
_STORED: dict[int | str, dict[str, Any]] = {
    201: {
        "headers": {
            "Location": {
                "description": "The new document's URL path.",
                "schema": {"type": "string"},
            }
        },
        "links": _DOCUMENT_LINKS,
    },
    200: {
        "model": DocumentOut,
        "description": "The same bytes were stored before: that document.",
        "links": _DOCUMENT_LINKS,
    },
    202: {
        "model": DocumentOut,
        "description": "Stored, with pages to read by OCR in the background: `status` is "
        "`processing` and `progress` counts the pages read; `getDocument` shows it change.",
        "headers": {
            "Location": {
                "description": "The new document's URL path.",
                "schema": {"type": "string"},
            }
        },
        "links": _DOCUMENT_LINKS,
    },
}


async def documents_out(session: AsyncSession, documents: Sequence[Document]) -> list[DocumentOut]:
    """The documents as the API shows them, with how their pages were read (one query, none
    when no document has pages)."""
    paged = [document.id for document in documents if document.page_count is not None]
    read = await service.pages_read(session, paged)
    return [document_out(document, read.get(document.id)) for document in documents]


def document_out(document: Document, pages_read: PagesRead | None = None) -> DocumentOut:
    return DocumentOut(
        id=document.id,
        kind=document.kind,
        media_type=document.media_type,
        title=document.title,
        context=document.context,
        metadata=document.user_metadata,
        filename=document.filename,
        sha256=document.sha256,
        size_bytes=document.size_bytes,
        page_count=document.page_count,
        char_count=document.char_count,
        chunk_count=document.chunk_count,
        citable=document.citable,
        warnings=document.warnings,
        created_at=document.created_at,
        status=document.status,
        progress=(
            Progress(pages_done=document.pages_done or 0, pages_total=document.page_count or 0)
            if document.status == "processing"
            else None
        ),
        error=(
            DocumentError(code=document.error_code, detail=document.error_detail or "")
            if document.status == "failed" and document.error_code
            else None
        ),
        pages_read=pages_read,
    )


def chunk_out(chunk: DocumentChunk) -> ChunkOut:
    return ChunkOut(
        index=chunk.chunk_index,
        text=chunk.text,
        start_char=chunk.start_char,
        end_char=chunk.end_char,
        page_number=chunk.page_number,
        block_index=chunk.block_index,
        locator=chunk.locator,
    )


async def _stored_response(session: AsyncSession, stored: service.StoredDocument) -> OrjsonResponse:
    """201 with a Location for a new document (202 while its pages are read by OCR), 200 for
    identical bytes stored before."""
    [shown] = await documents_out(session, [stored.document])
    body = shown.model_dump(mode="json")
    if stored.created:
        location = f"/v1/documents/{stored.document.id}"
        code = status.HTTP_202_ACCEPTED if stored.processing else status.HTTP_201_CREATED
        return OrjsonResponse(body, code, headers={"Location": location})
    return OrjsonResponse(body, status.HTTP_200_OK)


def _basename(filename: str | None) -> str | None:
    if not filename:
        return None
    return PurePosixPath(PureWindowsPath(filename).name).name[:255] or None


async def _refuse_empty_form_fields(request: Request) -> None:
    """FastAPI reads an empty form field as absent; an empty title or context is a mistake."""
    form = await request.form()  # already parsed for the route: Starlette caches it
    errors = [
        {
            "type": "string_too_short",
            "loc": ("body", name),
            "msg": "String should have at least 1 character",
        }
        for name in ("title", "context")
        if form.get(name) == ""
    ]
    if errors:
        raise RequestValidationError(errors)


router = APIRouter(prefix="/v1/documents", tags=["documents"], responses=problems(*AUTH_PROBLEMS))


async def upload_document(
    session: SessionDep,
    tenant_id: TenantDep,
    settings: SettingsDep,
    ocr: OcrDep,
    form: Annotated[DocumentUpload, File()],
) -> OrjsonResponse:
    stored = await store_uploaded_file(
        session, tenant_id, settings, form.file, title=form.title, context=form.context, ocr=ocr
    )
    return await _stored_response(session, stored)


async def store_uploaded_file(
    session: AsyncSession,
    tenant_id: str,
    settings: Settings,
    file: UploadFile,
    *,
    title: str | None = None,
    context: str | None = None,
    ocr: OcrOptions | None = None,
) -> service.StoredDocument:
    """Store an uploaded file as a document (413 over the configured size); its pages are
    read by OCR as ``ocr`` says (none when it is None)."""
    max_bytes = settings.max_document_bytes
    limits = ParseOptions(
        max_rows=settings.max_sheet_rows, max_unpacked_bytes=settings.max_unpacked_bytes
    )
    if file.size is not None and file.size > max_bytes:
        await file.close()
        raise PayloadTooLarge(f"The document exceeds the limit of {max_bytes} bytes.")
    data = await file.read()
    await file.close()
    fields = service.DocumentFields(title=title, context=context, filename=_basename(file.filename))
    return await service.store_upload(
        session,
        tenant_id,
        data,
        fields,
        max_bytes=max_bytes,
        declared_media_type=file.content_type,
        limits=limits,
        ocr=ocr,
    )


async def create_document(
    body: CreateDocumentRequest,
    session: SessionDep,
    tenant_id: TenantDep,
    settings: SettingsDep,
    ocr: OcrDep,
) -> OrjsonResponse:
    fields = service.DocumentFields(title=body.title, context=body.context, metadata=body.metadata)
    stored = await service.store_source(
        session,
        tenant_id,
        body.source,
        fields,
        max_bytes=settings.max_json_document_bytes,
        ocr=ocr,
    )
    return await _stored_response(session, stored)


@router.get(
    "",
    operation_id="listDocuments",
    summary="List documents, newest first",
    response_model=DocumentPage,
    responses=problems(422),
)
async def list_documents(
    session: SessionDep,
    tenant_id: TenantDep,
    cursor: PageCursorDep,
    limit: LimitQuery = DEFAULT_LIMIT,
) -> DocumentPage:
    page = await service.list_documents(session, tenant_id, limit, cursor.value)
    return DocumentPage(
        data=await documents_out(session, page.items), next_cursor=cursor.next(page.next_cursor)
    )


@router.get(
    "/{document_id}",
    operation_id="getDocument",
    summary="Get a document",
    response_model=DocumentOut,
    responses=problems(404, 422),
)
async def get_document(
    document_id: DocumentId, session: SessionDep, tenant_id: TenantDep
) -> DocumentOut:
    document = await service.get_document(session, tenant_id, document_id)
    [shown] = await documents_out(session, [document])
    return shown


@router.get(
    "/{document_id}/content",
    operation_id="getDocumentContent",
    summary="Download the original bytes",
    response_class=Response,
    responses={
        200: {
            "description": "The original bytes, with their media type: the PDF, the Word, "
            "Excel or PowerPoint file, the text (with its `charset`), or for a content "
            "document its blocks as JSON. Served under `Content-Security-Policy: sandbox`: "
            "an uploaded HTML page never runs as a page of this service.",
            "content": {kind.media_type: {"schema": kind.content_schema} for kind in all_kinds()},
        },
        **problems(404, 422),
    },
)
async def get_document_content(
    document_id: DocumentId, session: SessionDep, tenant_id: TenantDep
) -> Response:
    document, data = await service.get_content(session, tenant_id, document_id)
    return content_response(document, data)


def content_response(document: Document, data: bytes) -> Response:
    """A document's original bytes, with their media type, never run as a page of ours."""
    media_type = document.media_type
    if media_type.startswith("text/") and "charset=" not in media_type:
        media_type += "; charset=utf-8"
    # Uploaded HTML (or SVG-like text) must never run as a page of this origin.
    headers = {
        "ETag": f'"{document.sha256}"',
        "Content-Security-Policy": "sandbox",
        "X-Content-Type-Options": "nosniff",
    }
    if document.filename:
        headers["Content-Disposition"] = _content_disposition(document.filename)
    return Response(data, media_type=media_type, headers=headers)


@router.get(
    "/{document_id}/chunks",
    operation_id="listDocumentChunks",
    summary="List a document's chunks in order",
    response_model=ChunkPage,
    responses=problems(404, 422),
)
async def list_document_chunks(
    document_id: DocumentId,
    session: SessionDep,
    tenant_id: TenantDep,
    cursor: PageCursorDep,
    limit: LimitQuery = DEFAULT_LIMIT,
) -> ChunkPage:
    page = await service.list_chunks(session, tenant_id, document_id, limit, cursor.value)
    return ChunkPage(
        data=[chunk_out(c) for c in page.items], next_cursor=cursor.next(page.next_cursor)
    )


def page_out(page: DocumentPageRow) -> PageOut:
    return PageOut(
        page_number=page.page_number,
        text_source=page.text_source,
        ocr_confidence=page.ocr_confidence,
        char_count=page.char_count,
        warnings=page.warnings,
    )


@router.get(
    "/{document_id}/pages",
    operation_id="listDocumentPages",
    summary="List how each page of a PDF was read",
    response_model=PagePage,
    responses=problems(404, 422),
)
async def list_document_pages(
    document_id: DocumentId,
    session: SessionDep,
    tenant_id: TenantDep,
    cursor: PageCursorDep,
    limit: LimitQuery = DEFAULT_LIMIT,
) -> PagePage:
    """Each page's text source (text layer, OCR or none), OCR confidence, characters and
    warnings. Empty for documents that are not PDFs, and for PDFs stored before pages were
    recorded."""
    page = await service.list_pages(session, tenant_id, document_id, limit, cursor.value)
    return PagePage(
        data=[page_out(p) for p in page.items], next_cursor=cursor.next(page.next_cursor)
    )


@router.delete(
    "/{document_id}",
    operation_id="deleteDocument",
    summary="Delete a document, its bytes and its index",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=ProblemResponse,  # every body it sends is a problem: see app.api.problems
    response_description="Deleted.",
    responses=problems(*AUTH_PROBLEMS, 404, 422, model=True),
)
async def delete_document(
    document_id: DocumentId, session: SessionDep, tenant_id: TenantDep, sources: SourceCacheDep
) -> Response:
    await service.delete_document(session, tenant_id, document_id, sources)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


def documents_router(settings: Settings) -> APIRouter:
    """The documents routes, with the two that take a document's bytes limited to the
    configured document size (the only part of the routes that depends on settings)."""
    upload_limit, json_limit = body_limits(settings)
    documents = APIRouter()
    documents.add_api_route(
        "/v1/documents/upload",
        upload_document,
        methods=["POST"],
        tags=["documents"],
        operation_id="uploadDocument",
        summary="Upload a document: PDF, Word, Excel, PowerPoint, HTML, Markdown, CSV, text",
        status_code=status.HTTP_201_CREATED,
        response_model=DocumentOut,
        response_description="The document, stored.",
        responses={**problems(*AUTH_PROBLEMS), **_STORED, **problems(*BODY_PROBLEMS, 413, 415)},
        max_body_size=upload_limit,
        dependencies=[Depends(_refuse_empty_form_fields)],
    )
    documents.add_api_route(
        "/v1/documents",
        create_document,
        methods=["POST"],
        tags=["documents"],
        operation_id="createDocument",
        summary="Create a document from a Messages API document block",
        status_code=status.HTTP_201_CREATED,
        response_model=DocumentOut,
        response_description="The document, stored.",
        responses={**problems(*AUTH_PROBLEMS), **_STORED, **problems(*BODY_PROBLEMS, 413, 415)},
        max_body_size=json_limit,
    )
    documents.include_router(router)
    return documents


def _content_disposition(filename: str) -> str:
    ascii_name = filename.encode("ascii", "replace").decode().replace('"', "'")
    return f"inline; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(filename)}"
