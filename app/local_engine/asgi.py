"""The local engine as an ASGI app: ``POST /v1/messages`` (JSON or SSE),
``POST /v1/messages/count_tokens`` and the Message Batches API (``/v1/messages/batches``:
create, list, get, results, cancel), with the upstream's headers and error bodies.

Every response carries ``request-id: req_…``; error bodies carry the same id. No API key is
needed: ``x-api-key`` and ``Authorization: Bearer`` are accepted and ignored. The
``anthropic-version`` header is required, as the upstream requires it.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio.to_thread
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.local_engine.api_error import ApiError, InvalidRequestError
from app.local_engine.batches import LocalBatches, parse_batch_requests
from app.local_engine.engine import LocalEngine, new_upstream_id
from app.local_engine.request_validation import (
    ParsedRequest,
    check_version,
    parse_count_tokens_request,
    parse_create_request,
)
from app.local_engine.streaming import StreamEvent, message_events
from app.local_engine.wire import TokenCount, ToolUseMessage
from app.upstream.wire import MAX_BATCH_BYTES

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 32 * 1024 * 1024  # the upstream's limit for a Messages request
_SSE_LINE_END = "\n"  # as the upstream writes its streams
# Characters that str.splitlines() (and so httpx's aiter_lines) takes for line ends: written as
# JSON escapes so that a quote containing one cannot split a `data:` line for such clients.
_LINE_BREAKING = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


class RequestIdMiddleware:
    """Give each request an upstream-style id: ``request.state.request_id`` and the
    ``request-id`` header of its response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = new_upstream_id("req")
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).append("request-id", request_id)
            await send(message)

        await self.app(scope, receive, send_with_id)


def create_local_engine_app(
    engine: LocalEngine | None = None, batches: LocalBatches | None = None
) -> Starlette:
    """The ASGI app serving ``engine`` (a new ``LocalEngine`` when none is given) and its
    ``batches`` (``app.state.batches``, in a database of their own when none are given; close
    them with ``aclose`` when done)."""
    served = engine if engine is not None else LocalEngine()
    queued = batches if batches is not None else LocalBatches(served)

    async def create_message(request: Request) -> Response:
        request_id: str = request.state.request_id
        try:
            parsed = await _parse(request, parse_create_request)
            message = await served.create_message(parsed)
        except ApiError as error:
            return _error_response(error, request_id)
        except Exception:
            log.exception("local engine failed (request %s)", request_id)
            return _error_response(_internal_error(), request_id)
        if not parsed.stream or isinstance(message, ToolUseMessage):  # a judge's: never streamed
            return JSONResponse(message.model_dump(mode="json"))
        events = message_events(
            message, request_id=request_id, fail_after_blocks=served.fail_streams_after_blocks
        )
        return EventSourceResponse(
            _sse(events, request_id),
            sep=_SSE_LINE_END,
            ping=served.ping_interval,
            ping_message_factory=_ping,
        )

    async def count_tokens(request: Request) -> Response:
        request_id: str = request.state.request_id
        try:
            parsed = await _parse(request, parse_count_tokens_request)
            count = await served.count_tokens(parsed)
        except ApiError as error:
            return _error_response(error, request_id)
        except Exception:
            log.exception("local engine failed (request %s)", request_id)
            return _error_response(_internal_error(), request_id)
        return JSONResponse(TokenCount(input_tokens=count).model_dump(mode="json"))

    async def create_batch(request: Request) -> Response:
        version = check_version(request.headers.get("anthropic-version"))
        body = await _read_body(request, MAX_BATCH_BYTES)
        requests = await anyio.to_thread.run_sync(parse_batch_requests, body)
        return JSONResponse(await queued.create(requests, body, version))

    async def list_batches(request: Request) -> Response:
        query = request.query_params
        try:
            limit = int(query.get("limit", "20"))
        except ValueError:
            raise InvalidRequestError("limit: Input should be a valid integer") from None
        if not 1 <= limit <= 1000:
            raise InvalidRequestError("limit: Input should be between 1 and 1000")
        return JSONResponse(
            await queued.page(
                limit, query.get("before_id"), query.get("after_id"), str(request.base_url)
            )
        )

    async def get_batch(request: Request) -> Response:
        batch_id = request.path_params["batch_id"]
        return JSONResponse(await queued.describe(batch_id, str(request.base_url)))

    async def cancel_batch(request: Request) -> Response:
        batch_id = request.path_params["batch_id"]
        return JSONResponse(await queued.cancel(batch_id, str(request.base_url)))

    async def batch_results(request: Request) -> Response:
        # An unknown or unended batch is an error before the status line is sent.
        lines = await queued.results(request.path_params["batch_id"])
        return StreamingResponse(lines, media_type="application/binary")

    batch_routes = [
        ("/v1/messages/batches", create_batch, "POST"),
        ("/v1/messages/batches", list_batches, "GET"),
        ("/v1/messages/batches/{batch_id}", get_batch, "GET"),
        ("/v1/messages/batches/{batch_id}/cancel", cancel_batch, "POST"),
        ("/v1/messages/batches/{batch_id}/results", batch_results, "GET"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        # Served alone (uvicorn runs the lifespan): its batches stop with it. Embedded in
        # Citegate, which runs no lifespan of this app, Citegate closes them.
        try:
            yield
        finally:
            await queued.aclose()

    app = Starlette(
        lifespan=lifespan,
        routes=[
            Route("/v1/messages", create_message, methods=["POST"]),
            Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
            *(
                Route(path, _api_errors(endpoint), methods=[method])
                for path, endpoint, method in batch_routes
            ),
        ],
        middleware=[Middleware(RequestIdMiddleware)],
        exception_handlers={HTTPException: _http_error},
    )
    app.state.engine = served
    app.state.batches = queued
    return app


def _api_errors(
    endpoint: Callable[[Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint, its ``ApiError``s (and failures) answered as the upstream answers them."""

    async def answer(request: Request) -> Response:
        request_id: str = request.state.request_id
        try:
            return await endpoint(request)
        except ApiError as error:
            return _error_response(error, request_id)
        except Exception:
            log.exception("local engine failed (request %s)", request_id)
            return _error_response(_internal_error(), request_id)

    return answer


async def _parse(request: Request, parse: Callable[[bytes, str], ParsedRequest]) -> ParsedRequest:
    version = check_version(request.headers.get("anthropic-version"))
    body = await _read_body(request)
    # Parsing and validating up to 32 MB of JSON is CPU work: off the event loop.
    return await anyio.to_thread.run_sync(parse, body, version)


async def _read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    parts: list[bytes] = []
    size = 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise ApiError(
                413, "request_too_large", "Request exceeds the maximum allowed number of bytes."
            )
        parts.append(part)
    return b"".join(parts)


async def _sse(events: list[StreamEvent], request_id: str) -> AsyncIterator[ServerSentEvent]:
    try:
        for name, data in events:
            yield _event(name, data)
    except Exception:
        # The status line is sent: the upstream reports a failure now as an `error` event.
        log.exception("local engine stream failed (request %s)", request_id)
        yield _event("error", _internal_error().body(request_id))


def _event(name: str, data: dict[str, Any]) -> ServerSentEvent:
    if name == "ping":
        return _ping()
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":")).translate(_LINE_BREAKING)
    return ServerSentEvent(data=payload, event=name, sep=_SSE_LINE_END)


def _ping() -> ServerSentEvent:
    # Byte for byte the upstream's ping, space included.
    return ServerSentEvent(data='{"type": "ping"}', event="ping", sep=_SSE_LINE_END)


def _internal_error() -> ApiError:
    return ApiError(500, "api_error", "Internal server error")


def _error_response(error: ApiError, request_id: str) -> JSONResponse:
    if error.status >= 500:
        log.error("local engine error %s (request %s)", error.message, request_id)
    return JSONResponse(error.body(request_id), status_code=error.status)


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    error_type = {404: "not_found_error", 405: "invalid_request_error"}.get(status, "api_error")
    message = exc.detail if isinstance(exc, HTTPException) else "Internal server error"
    return _error_response(ApiError(status, error_type, message), request.state.request_id)
