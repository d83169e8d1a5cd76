"""The Messages API client: one transport per process, retries where safe.

Requests go through httpx's transport API to httpx-aiohttp's transport (aiohttp's connection
pool, as the official SDK offers it), or to the local engine's ASGI app: not through an
``httpx.AsyncClient``, whose cookie, auth, redirect and hook layers Citegate uses none of and
whose cost docs/PERFORMANCE.md gives. Retries are tenacity's: statuses 408, 409, 429, 500, 502,
503, 504 and 529 and failures to connect, after ``retry-after-ms`` / ``retry-after`` when the
upstream sends them, else after a jittered exponential backoff; a bounded number of attempts,
and no attempt starts after the total retry budget. httpx-aiohttp reports a connection the
server closed before answering (a pooled one it had dropped) as ``httpx.ConnectTimeout``: that
is retried too, as the official SDK retries its connection errors. A read timeout is not
retried: the upstream may already be generating (and billing) that answer. Each attempt sends
the body afresh, in pieces that make no copy of it.
"""

from __future__ import annotations

import email.utils
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import aiohttp
import httpx
import orjson
from httpx_aiohttp import AiohttpTransport
from pydantic import ValidationError
from starlette.types import ASGIApp
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
    wait_random_exponential,
)

from app.errors import ErrorCode
from app.observability import Metrics, note_upstream_request_id
from app.settings import Settings
from app.upstream.errors import UpstreamError, error_of_body, reading, request_id_of
from app.upstream.stream import UpstreamStream
from app.upstream.wire import BatchPage, BatchResult, Message, MessageBatch, TokenCount

log = logging.getLogger(__name__)

LOCAL_BASE_URL = "http://local-engine"  # the local engine's ASGI app answers any host
RETRYABLE_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
_backoff = wait_random_exponential(multiplier=0.5, max=8)


def create_transport(settings: Settings, local: ASGIApp | None = None) -> httpx.AsyncBaseTransport:
    """The process's one transport to the upstream: to ``local`` (the local engine's ASGI app)
    when given, else to the Messages API over aiohttp's pool, made at the first request
    (inside the running loop, as aiohttp wants). A streamed answer holds its connection for its
    whole length."""
    if local is not None:
        return httpx.ASGITransport(app=local)
    return AiohttpTransport(client=partial(_aiohttp_session, settings.upstream_max_connections))


def _aiohttp_session(connections: int) -> aiohttp.ClientSession:
    """aiohttp's session as httpx-aiohttp makes its own, but that it keeps no cookie (one
    session serves every tenant: a cookie set on one answer must never go out with another
    tenant's request), with ``connections`` open at most."""
    connector = aiohttp.TCPConnector(
        limit=connections,
        keepalive_timeout=httpx.Limits().keepalive_expiry,
        ssl=httpx.create_ssl_context(),
    )
    return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar())


@dataclass(frozen=True, slots=True)
class UpstreamAnswer:
    message: Message
    request_id: str | None
    body: bytes = b""  # the response as the upstream sent it


def retry_after_seconds(response: httpx.Response) -> float | None:
    """The wait the upstream asks for, from retry-after-ms or retry-after (seconds or date)."""
    headers = response.headers
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            return max(0.0, float(ms) / 1000)
        if (value := headers.get("retry-after")) is not None:
            if value.strip().isdigit():
                return float(value)
            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError):
        return None
    return None


class _RetryableStatus(Exception):
    def __init__(self, response: httpx.Response) -> None:
        super().__init__(response.status_code)
        self.response = response


def _is_retryable(error: BaseException) -> bool:
    return isinstance(error, _RetryableStatus | httpx.ConnectError | httpx.ConnectTimeout)


# Statuses that say the upstream did nothing with the request: it is refused before any work.
REFUSED_UNDONE = frozenset({429, 529})


def _is_retryable_creation(error: BaseException) -> bool:
    """A batch creation is retried only when the upstream certainly made no batch: a refusal
    it gives before any work (429, 529) or no connection at all. After a 5xx or a timeout the
    batch may exist; a retry could make a second, so the caller reconciles instead."""
    if isinstance(error, _RetryableStatus):
        return error.response.status_code in REFUSED_UNDONE
    return isinstance(error, httpx.ConnectError | httpx.ConnectTimeout)


def _wait(state: RetryCallState) -> float:
    error = state.outcome.exception() if state.outcome else None
    if isinstance(error, _RetryableStatus):
        asked = retry_after_seconds(error.response)
        if asked is not None:
            return asked
    return float(_backoff(state))


class UpstreamClient:
    """Sends Messages API requests; returns parsed answers or raises ``UpstreamError``."""

    def __init__(
        self, transport: httpx.AsyncBaseTransport, settings: Settings, metrics: Metrics
    ) -> None:
        self._transport = transport
        self._metrics = metrics
        base = LOCAL_BASE_URL if settings.upstream_name == "local" else settings.anthropic_base_url
        self._base = base.rstrip("/")
        # Only what httpx decodes: aiohttp would offer more (zstd, where Python has it).
        self._headers = {
            "accept-encoding": "gzip, deflate",
            "anthropic-version": settings.anthropic_version,
        }
        if settings.anthropic_api_key is not None:
            self._headers["x-api-key"] = settings.anthropic_api_key.get_secret_value()
        self._timeout = httpx.Timeout(
            settings.upstream_read_timeout, connect=settings.upstream_connect_timeout
        ).as_dict()

        def before_retry(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            reason = (
                str(error.response.status_code)
                if isinstance(error, _RetryableStatus)
                else type(error).__name__
            )
            log.warning("upstream attempt %d failed (%s); retrying", state.attempt_number, reason)
            metrics.upstream_retries.labels(reason).inc()

        def retrying(retryable: Callable[[BaseException], bool]) -> AsyncRetrying:
            return AsyncRetrying(
                retry=retry_if_exception(retryable),
                wait=_wait,
                stop=stop_after_attempt(settings.upstream_max_attempts)
                | stop_before_delay(settings.upstream_max_retry_seconds),
                before_sleep=before_retry,
                reraise=True,
            )

        # Each call retried on its own.
        self._attempts = retrying(_is_retryable).wraps(self._attempt)
        self._creation_attempts = retrying(_is_retryable_creation).wraps(self._attempt)

    async def create_message(
        self, body: dict[str, Any], headers: Mapping[str, str] | None = None
    ) -> UpstreamAnswer:
        """``headers``: the caller's ``anthropic-version`` and ``anthropic-beta``, if any."""
        response = await self._call("POST", "/v1/messages", body, headers=headers)
        request_id = request_id_of(response)
        try:
            message = Message.model_validate_json(response.content)
        except ValidationError as exc:
            log.warning("upstream answered a body that is not a message: %s", exc.errors()[:3])
            raise _bad(response, "something that is not a Messages response") from exc
        return UpstreamAnswer(message, request_id, response.content)

    async def count_tokens(
        self, body: dict[str, Any], headers: Mapping[str, str] | None = None
    ) -> int:
        response = await self._call("POST", "/v1/messages/count_tokens", body, headers=headers)
        try:
            return TokenCount.model_validate_json(response.content).input_tokens
        except ValidationError as exc:
            raise _bad(response, "something that is not a token count") from exc

    async def create_batch(self, content: bytes) -> MessageBatch:
        """Create a Message Batch from its body, ``{"requests": [{"custom_id", "params"}]}``,
        already JSON (the caller measured it against the upstream's limit). Retried only
        where the upstream certainly made none (``_is_retryable_creation``); any other
        failure may have made one, which ``list_batches`` finds."""
        response = await self._call("POST", "/v1/messages/batches", content, creating=True)
        return _batch(response)

    async def list_batches(self, after_id: str | None = None, limit: int = 100) -> BatchPage:
        """A page of Message Batches, newest first; ``after_id``: the page older than it."""
        query = f"?limit={limit}" + (f"&after_id={after_id}" if after_id else "")
        response = await self._call("GET", "/v1/messages/batches" + query)
        try:
            return BatchPage.model_validate_json(response.content)
        except ValidationError as exc:
            raise _bad(response, "something that is not a page of batches") from exc

    async def get_batch(self, batch_id: str) -> MessageBatch:
        return _batch(await self._call("GET", f"/v1/messages/batches/{batch_id}"))

    async def cancel_batch(self, batch_id: str) -> MessageBatch:
        return _batch(await self._call("POST", f"/v1/messages/batches/{batch_id}/cancel", b"{}"))

    @asynccontextmanager
    async def batch_results(self, batch_id: str) -> AsyncIterator[AsyncIterator[BatchResult]]:
        """The results of an ended batch, read line by line as they arrive (never whole).

        Always from this client's base URL, never from the ``results_url`` a response names:
        the API key goes only where it was configured to go.
        """
        path = f"/v1/messages/batches/{batch_id}/results"
        response = await self._call("GET", path, stream=True)
        try:
            yield _results(response)
        finally:
            await response.aclose()

    @asynccontextmanager
    async def stream_message(
        self, body: dict[str, Any], headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[UpstreamStream]:
        """A streamed answer. Retries happen only while opening, before any event is read."""
        body = {**body, "stream": True}
        response = await self._call("POST", "/v1/messages", body, stream=True, headers=headers)
        try:
            yield UpstreamStream(response)
        finally:
            await response.aclose()

    async def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | bytes | None = None,
        *,
        stream: bool = False,
        headers: Mapping[str, str] | None = None,
        creating: bool = False,
    ) -> httpx.Response:
        """A successful response (its body read, unless ``stream``), after any retries; or
        ``UpstreamError``. ``headers``: the caller's ``anthropic-version`` and
        ``anthropic-beta``, if any. ``creating``: retried as a creation is."""
        endpoint = _endpoint(path)
        # orjson: documents make request bodies of megabytes; the json module is slow there.
        content = orjson.dumps(body) if isinstance(body, dict) else body
        try:
            response = await self._send(method, path, content, stream, headers, creating)
        except UpstreamError as exc:
            self._metrics.upstream_calls.labels(endpoint, exc.code).inc()
            note_upstream_request_id(exc.request_id)
            raise
        self._metrics.upstream_calls.labels(endpoint, "ok").inc()
        note_upstream_request_id(request_id_of(response))
        return response

    async def _send(
        self,
        method: str,
        path: str,
        content: bytes | None,
        stream: bool,
        headers: Mapping[str, str] | None,
        creating: bool = False,
    ) -> httpx.Response:
        attempts = self._creation_attempts if creating else self._attempts
        try:
            response = await attempts(method, path, content, stream, headers)
        except _RetryableStatus as exc:  # the last attempt's
            response = exc.response
        except httpx.ConnectTimeout as exc:
            raise UpstreamError("The upstream API could not be reached.") from exc
        except httpx.TimeoutException as exc:
            raise UpstreamError(
                "The upstream API did not answer in time.", code=ErrorCode.UPSTREAM_TIMEOUT
            ) from exc
        except httpx.TransportError as exc:
            raise UpstreamError("The upstream API could not be reached.") from exc
        except httpx.DecodingError as exc:  # a body its content-encoding does not decode
            raise UpstreamError(
                "The upstream API sent a body that does not decode.",
                code=ErrorCode.UPSTREAM_BAD_RESPONSE,
            ) from exc
        if response.is_success:
            return response
        raise _error_from(response)

    async def _attempt(
        self,
        method: str,
        path: str,
        content: bytes | None,
        stream: bool,
        headers: Mapping[str, str] | None,
    ) -> httpx.Response:
        """One attempt: the response; a status worth retrying raised as ``_RetryableStatus``,
        its body read and its connection given back."""
        sent = {**self._headers, **(headers or {})}
        if content is not None:
            sent |= {"content-type": "application/json", "content-length": str(len(content))}
        request = httpx.Request(
            method,
            self._base + path,
            headers=sent,
            content=None if content is None else _pieces(content),
            extensions={"timeout": self._timeout},
        )
        response = await self._transport.handle_async_request(request)
        if not stream or not response.is_success:
            try:
                await response.aread()  # whole, or for its error message; then closed
            finally:
                await response.aclose()
        if response.status_code in RETRYABLE_STATUSES:
            raise _RetryableStatus(response)
        return response


def _endpoint(path: str) -> str:
    """The metric label of a path: its last part, a batch's id left out."""
    parts = path.split("/")
    parts[-1] = parts[-1].partition("?")[0]
    if len(parts) > 4 and parts[3] == "batches":  # /v1/messages/batches/{id}[/...]
        return "batch/" + "/".join(parts[5:]) if len(parts) > 5 else "batch"
    return parts[-1]


# aiohttp writes a body given as bytes in one piece (and warns past a megabyte, as that holds
# the loop); PDF windows make bodies of many megabytes.
_PIECE = 1024 * 1024


async def _pieces(content: bytes) -> AsyncIterator[bytes]:
    """The body a megabyte at a time. An iterator also keeps no copy once it is sent, where
    httpx's request keeps a body given as bytes for as long as its response lives: a
    streamed answer's whole length."""
    if len(content) <= _PIECE:
        yield content
        return
    view = memoryview(content)
    for start in range(0, len(view), _PIECE):
        yield bytes(view[start : start + _PIECE])


async def _results(response: httpx.Response) -> AsyncIterator[BatchResult]:
    with reading(response, "the batch's results"):
        async for line in response.aiter_lines():
            if not line.strip():
                continue
            try:
                yield BatchResult.model_validate_json(line)
            except ValidationError as exc:
                raise _bad(response, "a batch result that is not one") from exc


def _batch(response: httpx.Response) -> MessageBatch:
    try:
        return MessageBatch.model_validate_json(response.content)
    except ValidationError as exc:
        raise _bad(response, "something that is not a message batch") from exc


def _bad(response: httpx.Response, what: str) -> UpstreamError:
    return UpstreamError(
        f"The upstream API answered with {what}.",
        code=ErrorCode.UPSTREAM_BAD_RESPONSE,
        request_id=request_id_of(response),
    )


def _error_from(response: httpx.Response) -> UpstreamError:
    try:
        body = response.json()
    except ValueError:
        body = None
    retry_after = retry_after_seconds(response)
    error = error_of_body(
        body,
        request_id_of(response),
        status=response.status_code,
        retry_after=retry_after,
        fallback=response.reason_phrase,
    )
    log.warning(
        "upstream error %d (%s), request id %s",
        response.status_code,
        error.code,
        error.request_id,
    )
    return error
