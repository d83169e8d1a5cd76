"""Seeing a citation: PDF pages as pictures, share links, and the page a share link opens.

The page and what it loads live under ``/share/{token}`` and need no key: the token is the
key, to one answer and the documents it cites. Everything a token cannot find is one plain
404 page.
"""

from __future__ import annotations

from datetime import datetime
from functools import cache
from importlib import resources
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response, status
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, ConfigDict, Field

from app.answers.store import answer_out
from app.api.deps import AnswerId, DocumentId, PdfPagesDep, SessionDep, TenantDep
from app.api.problems import AUTH_PROBLEMS, BODY_PROBLEMS, problems
from app.api.responses import OrjsonResponse
from app.documents.pictures import DEFAULT_WIDTH, MAX_WIDTH, MIN_WIDTH, owned_page_image
from app.documents.pictures import page_image as render_page
from app.errors import CitegateError
from app.sharing import service, viewer

PageNumber = Annotated[int, Path(ge=1, description="The 1-based page number.")]
Width = Annotated[
    int,
    Query(ge=MIN_WIDTH, le=MAX_WIDTH, description=f"Width in pixels, {MIN_WIDTH} to {MAX_WIDTH}."),
]

api = APIRouter(responses=problems(*AUTH_PROBLEMS))
public = APIRouter(include_in_schema=False)


def _png(data: bytes, etag: str, request: Request, cache_control: str) -> Response:
    headers = {"ETag": etag, "Cache-Control": cache_control, "X-Content-Type-Options": "nosniff"}
    if etag in request.headers.get("if-none-match", ""):
        return Response(status_code=status.HTTP_304_NOT_MODIFIED, headers=headers)
    return Response(data, media_type="image/png", headers=headers)


@api.get(
    "/v1/documents/{document_id}/pages/{page_number}/image",
    operation_id="getDocumentPageImage",
    summary="A PDF page as a PNG picture",
    tags=["documents"],
    response_class=Response,
    responses={
        200: {
            "description": "The page, rendered by PDFium, `width` pixels wide. Stored documents "
            "never change: the `ETag` answers `If-None-Match` with 304.",
            "content": {"image/png": {"schema": {"type": "string", "format": "binary"}}},
        },
        304: {"description": "Not modified since the `ETag` given in `If-None-Match`."},
        **problems(404, 422),
    },
)
async def get_document_page_image(
    document_id: DocumentId,
    page_number: PageNumber,
    request: Request,
    session: SessionDep,
    tenant_id: TenantDep,
    pages: PdfPagesDep,
    width: Width = DEFAULT_WIDTH,
) -> Response:
    document, data = await owned_page_image(
        session, pages, tenant_id, document_id, page_number, width
    )
    etag = f'"{document.sha256[:32]}-{page_number}-{width}"'
    return _png(data, etag, request, "private, max-age=86400")


class ShareLinkRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"expires_in": 3600}]}
    )

    expires_in: int = Field(
        default=service.DEFAULT_EXPIRES_IN,
        ge=service.MIN_EXPIRES_IN,
        le=service.MAX_EXPIRES_IN,
        description="Seconds until the link stops working; a week when absent.",
    )


class ShareLinkOut(BaseModel):
    url: str = Field(description="The page; whoever has it can read the answer until it expires.")
    expires_at: datetime


@api.post(
    "/v1/answers/{answer_id}/share-links",
    operation_id="createAnswerShareLink",
    summary="Make a link that shows the answer without a key until it expires",
    tags=["answers"],
    status_code=status.HTTP_201_CREATED,
    response_model=ShareLinkOut,
    responses=problems(*BODY_PROBLEMS, 404),
)
async def create_answer_share_link(
    answer_id: AnswerId,
    request: Request,
    session: SessionDep,
    tenant_id: TenantDep,
    body: ShareLinkRequest | None = None,
) -> ShareLinkOut:
    expires_in = (body or ShareLinkRequest()).expires_in
    link = await service.create_link(session, tenant_id, answer_id, expires_in)
    return ShareLinkOut(
        url=str(request.url_for("shared_answer", token=link.token)), expires_at=link.expires_at
    )


# The page a share link opens, and what it loads.


def _not_found() -> HTMLResponse:
    return HTMLResponse(viewer.NOT_FOUND_PAGE, status_code=404, headers=viewer.PAGE_HEADERS)


@public.get("/share/{token}", name="shared_answer")
async def shared_answer(
    token: str, request: Request, session: SessionDep, pages: PdfPagesDep
) -> HTMLResponse:
    answer = await service.shared_answer(session, token)
    if answer is None:
        return _not_found()
    answered = await answer_out(session, pages, answer)
    documents = await service.shared_documents(session, answer)
    html = viewer.render_answer(answered.shown(), documents, token)
    return HTMLResponse(html, headers=viewer.PAGE_HEADERS)


@public.get("/share/{token}/documents/{document_id}/pages/{page_number}/image")
async def shared_page_image(
    token: str,
    document_id: str,
    page_number: int,
    request: Request,
    session: SessionDep,
    pages: PdfPagesDep,
    width: int = DEFAULT_WIDTH,
) -> Response:
    answer = await service.shared_answer(session, token)
    document = (
        None if answer is None else await service.shared_document(session, answer, document_id)
    )
    if document is None or not MIN_WIDTH <= width <= MAX_WIDTH:
        return _not_found()
    try:
        data = await render_page(session, pages, document, page_number, width)
    except CitegateError:
        return _not_found()
    etag = f'"{document.sha256[:32]}-{page_number}-{width}"'
    return _png(data, etag, request, "private, max-age=3600")


@public.get("/share/{token}/documents/{document_id}/text")
async def shared_document_text(token: str, document_id: str, session: SessionDep) -> Response:
    answer = await service.shared_answer(session, token)
    document = (
        None if answer is None else await service.shared_document(session, answer, document_id)
    )
    if document is None:
        return _not_found()
    text = await service.document_text(session, document.id)
    return OrjsonResponse({"text": text}, headers={"Cache-Control": "private, no-store"})


_ASSETS = {"viewer.js": "text/javascript", "viewer.css": "text/css"}


@cache
def _asset(name: str) -> bytes:
    return resources.files("app.sharing").joinpath("assets", name).read_bytes()


@public.get("/assets/{name}")
async def viewer_asset(name: str) -> Response:
    if name not in _ASSETS:
        return _not_found()
    return Response(
        _asset(name),
        media_type=_ASSETS[name],
        headers={"Cache-Control": "public, max-age=3600", "X-Content-Type-Options": "nosniff"},
    )
