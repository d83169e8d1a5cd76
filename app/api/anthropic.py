"""The Anthropic-compatible routes: the Messages API and the Files API under ``/anthropic``.

Thin as the others: parse the Messages API's shapes, call the services of ``/v1``, answer in
the Messages API's shapes (errors too: ``app.compat.errors``). Not in /openapi.json: these
routes are the Messages API's own, described by its documentation and spoken by its SDKs.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, File, Path, Query, Request, Response, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from pydantic import ValidationError
from starlette.background import BackgroundTask

from app.answers import service as answers
from app.answers.context import AnswerContext
from app.answers.relay import RelayedAnswer, open_relay
from app.api.batches import PollerDep
from app.api.deps import (
    AnthropicPrincipalDep,
    ContextDep,
    OcrDep,
    RequestSession,
    SessionDep,
    SettingsDep,
    SourceCacheDep,
)
from app.api.documents import content_response, store_uploaded_file
from app.api.event_stream import EventStream, server_sent
from app.batches import service as batches
from app.compat import service
from app.compat.batches import MessageBatchBody, message_batch, open_results, prepare_question
from app.compat.errors import error_event_data
from app.compat.messages import (
    CitationRelay,
    InvalidBody,
    MessagesRequest,
    enrich_message,
    parse_messages_request,
)
from app.db.models import AnswerBatch, Document
from app.db.tenancy import list_around
from app.documents import service as documents
from app.errors import CitegateError, ErrorCode
from app.ids import NO_NUL

router = APIRouter(prefix="/anthropic/v1", tags=["anthropic"], include_in_schema=False)
FileId = Annotated[str, Path(pattern=NO_NUL, max_length=100)]
BatchId = Annotated[str, Path(pattern=NO_NUL, max_length=100)]
ListId = Annotated[str | None, Query(pattern=NO_NUL, max_length=100)]
ANSWER_HEADER = "citegate-answer-id"
_PAGE = "page_"  # the SDKs' cursor: ``page=page_<last id>`` reads on after that file


async def _parsed(request: Request, *, create: bool) -> MessagesRequest:
    try:
        return parse_messages_request(await request.body(), create=create)
    except InvalidBody as exc:
        raise CitegateError(str(exc), code=ErrorCode.MALFORMED_BODY) from exc
    except ValidationError as exc:
        raise RequestValidationError(
            [{**error, "loc": ("body", *error["loc"])} for error in exc.errors(include_url=False)]
        ) from exc


@router.post("/messages", operation_id="anthropicCreateMessage")
async def create_message(request: Request, principal: AnthropicPrincipalDep) -> Response:
    # The session and the context are not dependencies, as for /v1/answers (RequestSession).
    context: AnswerContext = request.app.state.answer_context
    parsed = await _parsed(request, create=True)
    async with RequestSession(request) as session:
        prepared = await service.prepare(session, principal.tenant_id, parsed, context)
    headers = service.upstream_headers(request.headers)
    if parsed.stream:
        relayed = await open_relay(context, principal, prepared, headers)
        return EventStream(
            _relayed(relayed),
            ping=context.settings.sse_keepalive_seconds,
            send_timeout=context.settings.stream_send_timeout_seconds or None,
            headers={
                ANSWER_HEADER: prepared.id,
                "request-id": relayed.request_id or "",
            },
            finish=BackgroundTask(relayed.close),
        )
    answer, reply = await answers.answer_prepared(context, principal, prepared, headers)
    message = orjson.loads(reply.body)
    enrich_message(message, answer.shown()["segments"])
    return Response(
        orjson.dumps(message),
        media_type="application/json",
        headers={ANSWER_HEADER: answer.id, "request-id": reply.request_id or ""},
    )


async def _relayed(relayed: RelayedAnswer) -> AsyncGenerator[bytes, None]:
    """The upstream's events as it sent them, citations enriched, one write each."""
    last = None
    citations = CitationRelay()
    async with aclosing(relayed.frames()) as frames:
        async for frame, made in frames:
            if sending := citations.relayed(frame, made):
                yield server_sent(sending)
            last = frame
    if relayed.failure is not None and (last is None or last.type != "error"):
        # Not an error event of the upstream's, relayed above: the stream broke.
        yield server_sent([("error", error_event_data(relayed.failure))])


@router.post("/messages/count_tokens", operation_id="anthropicCountMessageTokens")
async def count_message_tokens(request: Request, principal: AnthropicPrincipalDep) -> Response:
    context: AnswerContext = request.app.state.answer_context
    parsed = await _parsed(request, create=False)
    async with RequestSession(request) as session:
        prepared = await service.prepare(session, principal.tenant_id, parsed, context)
    headers = service.upstream_headers(request.headers)
    tokens = await context.upstream.count_tokens(prepared.request, headers)
    return Response(orjson.dumps({"input_tokens": tokens}), media_type="application/json")


def file_object(document: Document) -> dict[str, Any]:
    """A document as the Files API shows a file (a file id is a document id)."""
    return {
        "id": document.id,
        "type": "file",
        "filename": document.filename or document.title or document.id,
        "mime_type": document.media_type,
        "size_bytes": document.size_bytes,
        "created_at": document.created_at.isoformat().replace("+00:00", "Z"),
        "downloadable": True,  # Citegate keeps the bytes of every document
    }


@router.post("/files", operation_id="anthropicUploadFile")
async def upload_file(
    session: SessionDep,
    principal: AnthropicPrincipalDep,
    settings: SettingsDep,
    ocr: OcrDep,
    file: Annotated[UploadFile, File()],
) -> dict[str, Any]:
    # A scanned PDF is stored at once and read by OCR in the background, as through /v1;
    # a message about it meanwhile is refused (409 document_processing, in this API's shape).
    stored = await store_uploaded_file(session, principal.tenant_id, settings, file, ocr=ocr)
    return file_object(stored.document)


@router.get("/files", operation_id="anthropicListFiles")
async def list_files(
    session: SessionDep,
    principal: AnthropicPrincipalDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 20,
    before_id: ListId = None,
    after_id: ListId = None,
    page: Annotated[str | None, Query(pattern=NO_NUL, max_length=105)] = None,
) -> dict[str, Any]:
    if page is not None:
        if not page.startswith(_PAGE) or after_id is not None:
            raise CitegateError("The page cursor is not valid.", code=ErrorCode.INVALID_CURSOR)
        after_id = page.removeprefix(_PAGE)
    if before_id is not None and after_id is not None:
        raise CitegateError(
            "Give before_id or after_id, not both.", code=ErrorCode.VALIDATION_ERROR
        )
    rows, more = await list_around(
        session, Document, principal.tenant_id, limit, before_id=before_id, after_id=after_id
    )
    first_id = rows[0].id if rows else None
    last_id = rows[-1].id if rows else None
    return {
        "data": [file_object(document) for document in rows],
        "first_id": first_id,
        "last_id": last_id,
        "has_more": more,
        # The SDKs' newer cursor: on to older files (None once there are none).
        "next_page": f"{_PAGE}{last_id}" if more and before_id is None else None,
    }


@router.get("/files/{file_id}", operation_id="anthropicGetFile")
async def get_file(
    file_id: FileId, session: SessionDep, principal: AnthropicPrincipalDep
) -> dict[str, Any]:
    return file_object(await documents.get_document(session, principal.tenant_id, file_id))


@router.get("/files/{file_id}/content", operation_id="anthropicGetFileContent")
async def get_file_content(
    file_id: FileId, session: SessionDep, principal: AnthropicPrincipalDep
) -> Response:
    document, data = await documents.get_content(session, principal.tenant_id, file_id)
    return content_response(document, data)


@router.delete("/files/{file_id}", operation_id="anthropicDeleteFile")
async def delete_file(
    file_id: FileId, session: SessionDep, principal: AnthropicPrincipalDep, sources: SourceCacheDep
) -> dict[str, Any]:
    await documents.delete_document(session, principal.tenant_id, file_id, sources)
    return {"id": file_id, "type": "file_deleted"}


async def _message_batches(
    request: Request, session: SessionDep, rows: list[AnswerBatch]
) -> list[dict[str, Any]]:
    counts = await batches.request_counts(session, [batch.id for batch in rows])
    return [
        message_batch(
            batch,
            counts[batch.id],
            str(request.url_for("get_message_batch_results", batch_id=batch.id)),
        )
        for batch in rows
    ]


@router.post("/messages/batches", operation_id="anthropicCreateMessageBatch")
async def create_message_batch(
    request: Request,
    body: MessageBatchBody,
    session: SessionDep,
    principal: AnthropicPrincipalDep,
    context: ContextDep,
    poller: PollerDep,
) -> dict[str, Any]:
    questions = await batches.prepare_questions(
        session, principal.tenant_id, body.requests, context, prepare_question
    )
    batch = await batches.store_batch(principal, questions, context)
    poller.wake()
    [out] = await _message_batches(request, session, [batch])
    return out


@router.get("/messages/batches", operation_id="anthropicListMessageBatches")
async def list_message_batches(
    request: Request,
    session: SessionDep,
    principal: AnthropicPrincipalDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 20,
    before_id: ListId = None,
    after_id: ListId = None,
) -> dict[str, Any]:
    if before_id is not None and after_id is not None:
        raise CitegateError(
            "Give before_id or after_id, not both.", code=ErrorCode.VALIDATION_ERROR
        )
    rows, more = await list_around(
        session, AnswerBatch, principal.tenant_id, limit, before_id=before_id, after_id=after_id
    )
    return {
        "data": await _message_batches(request, session, rows),
        "first_id": rows[0].id if rows else None,
        "last_id": rows[-1].id if rows else None,
        "has_more": more,
    }


@router.get("/messages/batches/{batch_id}", operation_id="anthropicGetMessageBatch")
async def get_message_batch(
    request: Request, batch_id: BatchId, session: SessionDep, principal: AnthropicPrincipalDep
) -> dict[str, Any]:
    batch = await batches.get_batch(session, principal.tenant_id, batch_id)
    [out] = await _message_batches(request, session, [batch])
    return out


@router.get("/messages/batches/{batch_id}/results", operation_id="anthropicGetMessageBatchResults")
async def get_message_batch_results(
    batch_id: BatchId, session: SessionDep, principal: AnthropicPrincipalDep, context: ContextDep
) -> StreamingResponse:
    batch = await batches.get_batch(session, principal.tenant_id, batch_id)
    await session.commit()  # no connection is held while the results are read
    if batch.status != "ended":
        raise CitegateError(
            f"Message Batch {batch_id} has not ended; its results are ready once it has.",
            code=ErrorCode.BATCH_NOT_ENDED,
        )
    lines, closing = await open_results(context, batch)
    return StreamingResponse(
        lines, media_type="application/x-jsonl", background=BackgroundTask(closing.aclose)
    )


@router.post("/messages/batches/{batch_id}/cancel", operation_id="anthropicCancelMessageBatch")
async def cancel_message_batch(
    request: Request,
    batch_id: BatchId,
    session: SessionDep,
    principal: AnthropicPrincipalDep,
    context: ContextDep,
    poller: PollerDep,
) -> dict[str, Any]:
    batch = await batches.cancel_batch(session, principal.tenant_id, batch_id, context)
    poller.wake()
    [out] = await _message_batches(request, session, [batch])
    return out
