"""The OpenAI-compatible routes under ``/openai/v1``: Chat Completions, Responses, files and
vector stores.

Thin as the others: parse OpenAI's shapes into the question ``/v1/answers`` takes
(``app.compat.openai``), ask it through the same pipeline, render the stored Answer back in
OpenAI's shapes (errors too: ``app.compat.openai.errors``). Not in /openapi.json: these routes
are OpenAI's own, described by its API reference and spoken by its SDKs.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, File, Form, Path, Query, Request, Response, UploadFile
from starlette.background import BackgroundTask

from app.answers import service as answers
from app.answers import store
from app.answers.answer import AnswerOut
from app.answers.context import AnswerContext
from app.answers.relay import RelayedAnswer, open_relay
from app.answers.request import prepare, release
from app.api.deps import (
    AnthropicPrincipalDep,
    OcrDep,
    PdfPagesDep,
    RequestSession,
    SessionDep,
    SettingsDep,
    SourceCacheDep,
)
from app.api.documents import content_response, store_uploaded_file
from app.api.event_stream import EventStream, server_sent
from app.collections import service as collections
from app.compat.openai import service as responses
from app.compat.openai.chat import (
    DONE,
    ChatChunks,
    chat_completion,
    chunk_lines,
    parse_chat_request,
    parse_json_object,
)
from app.compat.openai.errors import invalid, openai_error, unsupported
from app.compat.openai.files import (
    PURPOSES,
    VECTOR_STORE_FILE_STATUS,
    check_purpose,
    file_object,
    filenames,
    list_object,
    passage_result,
    search_request,
    vector_store_file_object,
    vector_store_file_request,
    vector_store_object,
    vector_store_request,
)
from app.compat.openai.responses import (
    INCLUDE_RESULTS,
    ResponseEvents,
    parse_responses_request,
    response_object,
)
from app.db.models import Collection, Document
from app.db.tenancy import list_around
from app.documents import service as documents
from app.ids import NO_NUL
from app.pagination import encode_cursor
from app.search.service import search_collection_passages

router = APIRouter(prefix="/openai/v1", tags=["openai"], include_in_schema=False)
ANSWER_HEADER = "citegate-answer-id"
# The compatible APIs' caller: a key as Authorization: Bearer (what the OpenAI SDKs send);
# while no key exists the service is open and an SDK, which cannot send no key, is let in.
PrincipalDep = AnthropicPrincipalDep
FileId = Annotated[str, Path(pattern=NO_NUL, max_length=100)]
StoreId = Annotated[str, Path(pattern=NO_NUL, max_length=100)]
ListId = Annotated[str | None, Query(pattern=NO_NUL, max_length=100)]
ResponseId = Annotated[str, Path(pattern=NO_NUL, max_length=100)]
Order = Annotated[Literal["asc", "desc"], Query()]


@router.post("/chat/completions", operation_id="openaiCreateChatCompletion")
async def create_chat_completion(request: Request, principal: PrincipalDep) -> Response:
    # The session and the context are not dependencies, as for /v1/answers (RequestSession).
    context: AnswerContext = request.app.state.answer_context
    chat = parse_chat_request(await request.body())
    async with RequestSession(request) as session:
        prepared = await prepare(
            session, principal.tenant_id, chat.body, context, earlier=chat.earlier
        )
    base_url = str(request.base_url)
    if chat.stream:
        relayed = await open_relay(context, principal, prepared)
        chunks = ChatChunks(prepared.id, prepared.request["model"], base_url, chat.include_usage)
        return EventStream(
            _chat_chunks(relayed, chunks),
            ping=context.settings.sse_keepalive_seconds,
            send_timeout=context.settings.stream_send_timeout_seconds or None,
            headers={ANSWER_HEADER: prepared.id},
            finish=BackgroundTask(relayed.close),
        )
    answer, _ = await answers.answer_prepared(context, principal, prepared)
    return Response(
        orjson.dumps(chat_completion(answer.shown(), base_url)),
        media_type="application/json",
        headers={ANSWER_HEADER: answer.id},
    )


async def _chat_chunks(relayed: RelayedAnswer, chunks: ChatChunks) -> AsyncGenerator[bytes, None]:
    """The relay's events as chunks, those of each upstream event as one write; ``[DONE]``
    after the last, or an ``error`` object when the answer failed."""
    async with aclosing(relayed.events()) as events:
        async for made in events:
            out: list[dict[str, Any]] = []
            for name, data in made:
                if isinstance(data, AnswerOut):
                    out.extend(chunks.end(data.shown()))
                elif name == "error":
                    failure = relayed.failure
                    assert failure is not None
                    out.append(openai_error(failure).body())
                else:
                    out.extend(chunks.of_event(name, data))
            if out:
                yield chunk_lines(out)
    if relayed.failure is None:
        yield DONE


# Files: Citegate documents.


@router.post("/files", operation_id="openaiUploadFile")
async def upload_file(
    session: SessionDep,
    principal: PrincipalDep,
    settings: SettingsDep,
    ocr: OcrDep,
    file: Annotated[UploadFile, File()],
    purpose: Annotated[str, Form(max_length=100)],
) -> dict[str, Any]:
    check_purpose(purpose)
    # A scanned PDF is stored at once and read by OCR in the background, as through /v1: its
    # status is "uploaded" until it is read (the SDK's files.wait_for_processing waits).
    stored = await store_uploaded_file(session, principal.tenant_id, settings, file, ocr=ocr)
    return file_object(stored.document)


@router.get("/files", operation_id="openaiListFiles")
async def list_files(
    session: SessionDep,
    principal: PrincipalDep,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    after: ListId = None,
    order: Order = "desc",
    purpose: Annotated[str | None, Query(max_length=100)] = None,
) -> dict[str, Any]:
    _newest_first(order)
    if purpose is not None and purpose not in PURPOSES:
        return list_object([], False)
    rows, more = await list_around(session, Document, principal.tenant_id, limit, after_id=after)
    return list_object([file_object(document) for document in rows], more)


@router.get("/files/{file_id}", operation_id="openaiGetFile")
async def get_file(file_id: FileId, session: SessionDep, principal: PrincipalDep) -> dict[str, Any]:
    return file_object(await documents.get_document(session, principal.tenant_id, file_id))


@router.get("/files/{file_id}/content", operation_id="openaiGetFileContent")
async def get_file_content(
    file_id: FileId, session: SessionDep, principal: PrincipalDep
) -> Response:
    document, data = await documents.get_content(session, principal.tenant_id, file_id)
    return content_response(document, data)


@router.delete("/files/{file_id}", operation_id="openaiDeleteFile")
async def delete_file(
    file_id: FileId, session: SessionDep, principal: PrincipalDep, sources: SourceCacheDep
) -> dict[str, Any]:
    await documents.delete_document(session, principal.tenant_id, file_id, sources)
    return {"id": file_id, "object": "file", "deleted": True}


def _newest_first(order: str) -> None:
    if order != "desc":
        raise unsupported("order", "Citegate lists newest first: order must be desc.")


# Vector stores: Citegate collections.


@router.post("/vector_stores", operation_id="openaiCreateVectorStore")
async def create_vector_store(
    request: Request, session: SessionDep, principal: PrincipalDep
) -> dict[str, Any]:
    name, description, metadata, file_ids = vector_store_request(
        parse_json_object(await request.body())
    )
    tenant_id = principal.tenant_id
    if file_ids:  # every file is the tenant's, or nothing is made
        await collections.owned_document_ids(session, tenant_id, file_ids)
    counted = await collections.create_collection(session, tenant_id, name, description, metadata)
    if file_ids:
        counted = await collections.add_documents(
            session, tenant_id, counted.collection.id, file_ids
        )
    return vector_store_object(counted)


@router.get("/vector_stores", operation_id="openaiListVectorStores")
async def list_vector_stores(
    session: SessionDep,
    principal: PrincipalDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    after: ListId = None,
    before: ListId = None,
    order: Order = "desc",
) -> dict[str, Any]:
    _newest_first(order)
    if before is not None and after is not None:
        raise invalid("before", "Give before or after, not both.")
    rows, more = await list_around(
        session, Collection, principal.tenant_id, limit, before_id=before, after_id=after
    )
    counted = await collections.counted(session, rows)
    return list_object([vector_store_object(c) for c in counted], more)


@router.get("/vector_stores/{vector_store_id}", operation_id="openaiGetVectorStore")
async def get_vector_store(
    vector_store_id: StoreId, session: SessionDep, principal: PrincipalDep
) -> dict[str, Any]:
    counted = await collections.get_collection(session, principal.tenant_id, vector_store_id)
    return vector_store_object(counted)


@router.delete("/vector_stores/{vector_store_id}", operation_id="openaiDeleteVectorStore")
async def delete_vector_store(
    vector_store_id: StoreId, session: SessionDep, principal: PrincipalDep
) -> dict[str, Any]:
    await collections.delete_collection(session, principal.tenant_id, vector_store_id)
    return {"id": vector_store_id, "object": "vector_store.deleted", "deleted": True}


@router.post("/vector_stores/{vector_store_id}/files", operation_id="openaiCreateVectorStoreFile")
async def create_vector_store_file(
    request: Request, vector_store_id: StoreId, session: SessionDep, principal: PrincipalDep
) -> dict[str, Any]:
    file_id = vector_store_file_request(parse_json_object(await request.body()))
    tenant_id = principal.tenant_id
    await collections.add_documents(session, tenant_id, vector_store_id, [file_id])
    document, added = await collections.get_membership(session, tenant_id, vector_store_id, file_id)
    return vector_store_file_object(document, vector_store_id, added)


@router.get("/vector_stores/{vector_store_id}/files", operation_id="openaiListVectorStoreFiles")
async def list_vector_store_files(
    vector_store_id: StoreId,
    session: SessionDep,
    principal: PrincipalDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    after: ListId = None,
    order: Order = "desc",
    filter: Annotated[str | None, Query(max_length=20)] = None,
) -> dict[str, Any]:
    _newest_first(order)
    cursor = None if after is None else encode_cursor(after)
    status = None
    if filter is not None:
        statuses = {shown: ours for ours, shown in VECTOR_STORE_FILE_STATUS.items()}
        if filter not in statuses:  # cancelled: Citegate cancels no file's processing
            return list_object([], False)
        status = statuses[filter]
    page = await collections.list_documents(
        session, principal.tenant_id, vector_store_id, limit, cursor, status=status
    )
    shown = [vector_store_file_object(document, vector_store_id) for document in page.items]
    return list_object(shown, page.next_cursor is not None)


@router.get(
    "/vector_stores/{vector_store_id}/files/{file_id}", operation_id="openaiGetVectorStoreFile"
)
async def get_vector_store_file(
    vector_store_id: StoreId, file_id: FileId, session: SessionDep, principal: PrincipalDep
) -> dict[str, Any]:
    document, added = await collections.get_membership(
        session, principal.tenant_id, vector_store_id, file_id
    )
    return vector_store_file_object(document, vector_store_id, added)


@router.delete(
    "/vector_stores/{vector_store_id}/files/{file_id}",
    operation_id="openaiDeleteVectorStoreFile",
)
async def delete_vector_store_file(
    vector_store_id: StoreId, file_id: FileId, session: SessionDep, principal: PrincipalDep
) -> dict[str, Any]:
    await collections.remove_document(session, principal.tenant_id, vector_store_id, file_id)
    return {"id": file_id, "object": "vector_store.file.deleted", "deleted": True}


@router.post("/vector_stores/{vector_store_id}/search", operation_id="openaiSearchVectorStore")
async def search_vector_store(
    request: Request,
    vector_store_id: StoreId,
    session: SessionDep,
    principal: PrincipalDep,
    settings: SettingsDep,
) -> dict[str, Any]:
    query, limit = search_request(parse_json_object(await request.body()))
    tenant_id = principal.tenant_id
    passages = await search_collection_passages(
        session,
        tenant_id,
        query,
        vector_store_id,
        limit,
        window=settings.search_window_chunks,
        per_document=settings.search_max_passages_per_document,
    )
    names = await filenames(session, tenant_id, [p.document_id for p in passages])
    return {
        "object": "vector_store.search_results.page",
        "search_query": [query],
        "data": [passage_result(p, names.get(p.document_id, p.document_id)) for p in passages],
        "has_more": False,
        "next_page": None,
    }


# Responses: each the first turn of a conversation, or a follow-up in one.


@router.post("/responses", operation_id="openaiCreateResponse")
async def create_response(request: Request, principal: PrincipalDep) -> Response:
    context: AnswerContext = request.app.state.answer_context
    asked = parse_responses_request(await request.body())
    async with RequestSession(request) as session:
        prepared, echo, made = await responses.prepare_response(
            session, principal.tenant_id, asked, context
        )
    if asked.stream:
        try:
            relayed = await open_relay(context, principal, prepared)
        except BaseException:
            await responses.discard(context, prepared, made)
            raise
        passages = None
        if prepared.retrieval["mode"] == "passages":
            first = prepared.retrieval["first_new_passage"]
            passages = prepared.retrieval["passages"][first:]
        events = ResponseEvents(
            prepared.id,
            prepared.request["model"],
            int(time.time()),
            prepared.question,
            passages,
            echo,
        )
        return EventStream(
            _response_events(relayed, events),
            ping=context.settings.sse_keepalive_seconds,
            send_timeout=context.settings.stream_send_timeout_seconds or None,
            headers={ANSWER_HEADER: prepared.id},
            finish=BackgroundTask(relayed.close),
        )
    try:
        answer, _ = await answers.answer_prepared(context, principal, prepared)
    except BaseException:
        await responses.discard(context, prepared, made)
        raise
    finally:
        await release(context, prepared)
    return Response(
        orjson.dumps(response_object(answer.shown(), echo)),
        media_type="application/json",
        headers={ANSWER_HEADER: answer.id},
    )


async def _response_events(
    relayed: RelayedAnswer, events: ResponseEvents
) -> AsyncGenerator[bytes, None]:
    yield _sent(events.start())
    async with aclosing(relayed.events()) as stream:
        async for made in stream:
            out: list[tuple[str, dict[str, Any]]] = []
            for name, data in made:
                if isinstance(data, AnswerOut):
                    out.extend(events.end(data.shown()))
                elif name == "error":
                    failure = relayed.failure
                    assert failure is not None
                    error = openai_error(failure)
                    out.extend(events.failed(error.openai_code or "server_error", error.message))
                else:
                    out.extend(events.of_event(name, data))
            if out:
                yield _sent(out)


def _sent(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    return server_sent([(name, orjson.dumps(data).decode()) for name, data in events])


@router.get("/responses/{response_id}", operation_id="openaiGetResponse")
async def get_response(
    request: Request,
    response_id: ResponseId,
    session: SessionDep,
    principal: PrincipalDep,
    pages: PdfPagesDep,
) -> dict[str, Any]:
    include = [*request.query_params.getlist("include"), *request.query_params.getlist("include[]")]
    for index, entry in enumerate(include):
        if entry != INCLUDE_RESULTS:
            raise unsupported(f"include[{index}]", f"Citegate can include {INCLUDE_RESULTS} only.")
    answer = await store.get_answer(session, principal.tenant_id, response_id)
    shown = (await store.answer_out(session, pages, answer)).shown()
    echo = await responses.response_echo(
        session, principal.tenant_id, answer, INCLUDE_RESULTS in include
    )
    return response_object(shown, echo)
