"""Dependency aliases shared by the routers."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Annotated

import anyio
from fastapi import Depends, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncSession

from app.answers.context import AnswerContext
from app.auth.keys import KeyCache, Principal, Sessions, authenticate
from app.auth.limits import KeyLimits
from app.auth.scopes import allows, required_scope
from app.db.models import DEFAULT_TENANT_ID
from app.db.unavailable import unreachable
from app.documents.ocr_jobs import OcrJobs
from app.documents.pages import PdfPages
from app.documents.reading import OcrOptions
from app.documents.sources import SourceCache
from app.errors import Forbidden, Unauthorized
from app.ids import NO_NUL
from app.pagination import DEFAULT_LIMIT, MAX_LIMIT, PageCursor
from app.settings import Settings

log = logging.getLogger(__name__)

_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description="An API key from `citegate keys create`, as `Authorization: Bearer <key>`.",
)


class RequestSession:
    """``async with RequestSession(request) as session``: a session of the app's database, closed
    at the end when it began a transaction. A session holds a connection only inside one: a
    session that never began one (an answer whose key and documents were cached) has nothing
    to give back, and closing it anyway costs a task and a greenlet of SQLAlchemy's async
    layer, every request. The answer routes open theirs so, not through ``SessionDep``:
    FastAPI's dependency with ``yield`` costs more than the session (an exit stack, a
    shielded exit and a cancel scope a request)."""

    __slots__ = ("session",)

    def __init__(self, request: Request) -> None:
        self.session: AsyncSession = request.app.state.sessions()

    async def __aenter__(self) -> AsyncSession:
        return self.session

    async def __aexit__(self, *_: object) -> None:
        if self.session.in_transaction():
            with anyio.CancelScope(shield=True):  # as FastAPI shields a dependency's exit
                try:
                    await self.session.close()
                except Exception as error:
                    # The database dropped the connection, and took the transaction with it:
                    # nothing is left to close (SQLAlchemy has discarded the connection). A
                    # dependency's session closes after its response is sent, too late for
                    # an error, which would only cut the client's connection.
                    if not unreachable(error):
                        raise
                    log.warning("the database dropped a connection as its session closed")


async def _session(request: Request) -> AsyncIterator[AsyncSession]:
    async with RequestSession(request) as session:
        yield session


# Dependencies are coroutines even when they do not await: FastAPI runs a plain function in a
# worker thread, a thread hand-off per request for reading an attribute.
async def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def _source_cache(request: Request) -> SourceCache:
    cache: SourceCache = request.app.state.source_cache
    return cache


async def _pdf_pages(request: Request) -> PdfPages:
    pages: PdfPages = request.app.state.pdf_pages
    return pages


async def _ocr_options(request: Request) -> OcrOptions:
    settings: Settings = request.app.state.settings
    jobs: OcrJobs = request.app.state.ocr_jobs
    return OcrOptions(settings.ocr, settings.ocr_languages, settings.ocr_max_pages, jobs)


async def _answer_context(request: Request) -> AnswerContext:
    context: AnswerContext = request.app.state.answer_context
    return context


SessionDep = Annotated[AsyncSession, Depends(_session)]
ContextDep = Annotated[AnswerContext, Depends(_answer_context)]
PdfPagesDep = Annotated[PdfPages, Depends(_pdf_pages)]
OcrDep = Annotated[OcrOptions, Depends(_ocr_options)]
SettingsDep = Annotated[Settings, Depends(_settings)]
SourceCacheDep = Annotated[SourceCache, Depends(_source_cache)]


async def require_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The caller, from its API key; counts the request against the key's limit. The key is
    looked up in a session of its own, only when the key cache does not hold it."""
    if credentials is None and "authorization" in request.headers:
        raise Unauthorized  # a header that is not "Bearer <key>"
    presented = credentials.credentials if credentials else None
    cache: KeyCache = request.app.state.key_cache
    principal = await authenticate(request.app.state.sessions, presented, cache)
    return await _admit(request, principal)


async def _admit(request: Request, principal: Principal | None) -> Principal:
    """The authenticated caller, if its key has the route's scope, counted against its key's
    limit; 401 for None, and for the open service's caller at an admin route (never open)."""
    if principal is None:
        raise Unauthorized
    route = request.scope.get("route")
    needed = required_scope(request.method, getattr(route, "path", request.url.path))
    if not allows(principal.scopes, needed):
        if principal.key_id is None:
            raise Unauthorized
        raise Forbidden(f"This API key lacks the `{needed}` scope that this route needs.")
    request.state.tenant_id = principal.tenant_id  # for the request log; never the key
    limits: KeyLimits = request.app.state.key_limits
    await limits.count_request(principal)
    return principal


async def require_anthropic_principal(request: Request) -> Principal:
    """The caller of the Anthropic-compatible API: the key of ``x-api-key`` (what the SDKs
    send) or of ``Authorization: Bearer``. While no key exists the service is open, and an
    SDK, which cannot send no key, is let in with whatever it sends."""
    presented = request.headers.get("x-api-key")
    if presented is None and (authorization := request.headers.get("authorization")):
        scheme, _, credentials = authorization.partition(" ")
        if scheme.lower() != "bearer" or not credentials.strip():
            raise Unauthorized
        presented = credentials.strip()
    cache: KeyCache = request.app.state.key_cache
    sessions: Sessions = request.app.state.sessions
    principal = await authenticate(sessions, presented, cache)
    if principal is None and presented is not None:
        version = await cache.current_version()
        if not await cache.any_key_exists(sessions, version):
            principal = Principal(DEFAULT_TENANT_ID, None)
    return await _admit(request, principal)


PrincipalDep = Annotated[Principal, Depends(require_principal)]
AnthropicPrincipalDep = Annotated[Principal, Depends(require_anthropic_principal)]


async def _tenant_id(principal: PrincipalDep) -> str:
    return principal.tenant_id


TenantDep = Annotated[str, Depends(_tenant_id)]
AnswerId = Annotated[str, Path(pattern=NO_NUL, description="The answer's id, `ans_…`.")]
DocumentId = Annotated[str, Path(pattern=NO_NUL, description="The document's id, `doc_…`.")]
LimitQuery = Annotated[int, Query(ge=1, le=MAX_LIMIT, description=f"Page size, 1 to {MAX_LIMIT}.")]
CursorQuery = Annotated[
    str | None, Query(description="`next_cursor` of the previous page.", max_length=200)
]


async def _page_cursor(
    request: Request, tenant_id: TenantDep, cursor: CursorQuery = None
) -> PageCursor:
    """The request's ``cursor``, checked against the server's secret for this list: the
    tenant's, at this route, with these path parameters (a document's chunks, not another's)."""
    settings: Settings = request.app.state.settings
    route = getattr(request.scope.get("route"), "path", request.url.path)
    parameters = (f"{name}={value}" for name, value in sorted(request.path_params.items()))
    scope = "\x00".join((tenant_id, route, *parameters))
    return PageCursor(settings.cursor_secret.get_secret_value().encode(), scope, cursor)


PageCursorDep = Annotated[PageCursor, Depends(_page_cursor)]
__all__ = [
    "DEFAULT_LIMIT",
    "AnswerId",
    "AnthropicPrincipalDep",
    "CursorQuery",
    "DocumentId",
    "LimitQuery",
    "PageCursorDep",
    "PdfPagesDep",
    "PrincipalDep",
    "RequestSession",
    "SessionDep",
    "SettingsDep",
    "SourceCacheDep",
    "TenantDep",
    "require_anthropic_principal",
    "require_principal",
]
