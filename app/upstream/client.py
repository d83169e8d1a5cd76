"""The Messages API client: one pooled transport per process, retries where safe.

Retries use tenacity: statuses 408, 409, 429, 500, 502, 503, 504 and 529 and failures to
connect, after ``retry-after-ms`` / ``retry-after`` when the upstream sends them, else after a
jittered exponential backoff; a bounded number of attempts, and no attempt starts after the
total retry budget. A read timeout is not retried: the upstream may already be generating (and
billing) that answer.
"""

from __future__ import annotations

import email.utils
import logging
import math
import sys
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import httpx
import orjson
from pydantic import ValidationError
from tenacity import (
    AsyncRetrying,
    DoAttempt,
    DoSleep,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
    wait_random_exponential,
)

from app.errors import ErrorCode
from app.observability import Metrics, note_upstream_request_id
from app.settings import Settings
from app.upstream.errors import UpstreamError, error_for_status
from app.upstream.sse import EventReader
from app.upstream.transport import UpstreamTransport
from app.upstream.wire import BatchResult, Message, MessageBatch, TokenCount

log = logging.getLogger(__name__)

_JSON = {"content-type": "application/json"}
LOCAL_BASE_URL = "http://local-engine"  # the local engine's ASGI app answers any host
RETRYABLE_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
_backoff = wait_random_exponential(multiplier=0.5, max=8)


class _RetryableStatus(Exception):
    def __init__(self, response: httpx.Response) -> None:
        super().__init__(response.status_code)
        self.response = response


@dataclass(frozen=True, slots=True)
class UpstreamAnswer:
    message: Message
    request_id: str | None
    body: bytes = b""  # the response as the upstream sent it


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs three times as much
class Frame:
    """One server-sent event as the upstream sent it: its name, its data, the data parsed."""

    name: str
    data: str
    event: dict[str, Any]

    @property
    def type(self) -> str:
        return str(self.event.get("type") or self.name)


def request_id_of(response: httpx.Response) -> str | None:
    request_id: str | None = response.headers.get("request-id")
    return request_id


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


def _wait(state: RetryCallState) -> float:
    error = state.outcome.exception() if state.outcome else None
    if isinstance(error, _RetryableStatus):
        asked = retry_after_seconds(error.response)
        if asked is not None:
            return asked
    return float(_backoff(state))


def _is_retryable(error: BaseException) -> bool:
    return isinstance(error, _RetryableStatus | httpx.ConnectError | httpx.ConnectTimeout)


def create_transport(
    settings: Settings, local: httpx.AsyncBaseTransport | None = None
) -> httpx.AsyncBaseTransport:
    """The process's one transport to the upstream: ``local`` (the local engine's ASGI app)
    when given, else ``UpstreamTransport`` (aiohttp's connection pool). A streamed answer holds
    its connection for its whole length."""
    return local if local is not None else UpstreamTransport(settings)


class UpstreamClient:
    """Posts Messages API requests; returns parsed answers or raises ``UpstreamError``."""

    def __init__(
        self, transport: httpx.AsyncBaseTransport, settings: Settings, metrics: Metrics
    ) -> None:
        # Requests go to the transport itself (httpx's transport API), not through an
        # ``httpx.AsyncClient``: Citegate uses none of its auth, redirect, cookie and hook
        # layers, which cost a tenth of an upstream call (``create_message``, 0.88-0.91 ms a
        # call through the client, 0.77-0.82 ms to the transport) and kept each request in
        # reference cycles.
        self._transport = transport
        self._metrics = metrics
        base = LOCAL_BASE_URL if settings.upstream_name == "local" else settings.anthropic_base_url
        self._base = base.rstrip("/")
        # The URLs every answer asks, parsed once.
        self._urls = {
            path: httpx.URL(self._base + path)
            for path in ("/v1/messages", "/v1/messages/count_tokens")
        }
        # Named, not left to aiohttp's defaults: it offers zstd where Python has it, which
        # httpx (decoding the body) does not read without the zstandard package.
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

        self._retrying = AsyncRetrying(
            retry=retry_if_exception(_is_retryable),
            wait=_wait,
            stop=stop_after_attempt(settings.upstream_max_attempts)
            | stop_before_delay(settings.upstream_max_retry_seconds),
            before_sleep=before_retry,
            reraise=True,
        )

    async def create_message(
        self, body: dict[str, Any], headers: Mapping[str, str] | None = None
    ) -> UpstreamAnswer:
        """``headers``: the caller's ``anthropic-version`` and ``anthropic-beta``, if any."""
        response = await self._post("/v1/messages", body, headers=headers)
        request_id = request_id_of(response)
        try:
            message = Message.model_validate_json(response.content)
            return UpstreamAnswer(message, request_id, response.content)
        except ValidationError as exc:
            log.warning("upstream answered a body that is not a message: %s", exc.errors()[:3])
            raise UpstreamError(
                "The upstream API answered with something that is not a Messages response.",
                code=ErrorCode.UPSTREAM_BAD_RESPONSE,
                request_id=request_id,
            ) from exc

    async def count_tokens(
        self, body: dict[str, Any], headers: Mapping[str, str] | None = None
    ) -> int:
        response = await self._post("/v1/messages/count_tokens", body, headers=headers)
        try:
            return TokenCount.model_validate_json(response.content).input_tokens
        except ValidationError as exc:
            raise UpstreamError(
                "The upstream API answered with something that is not a token count.",
                code=ErrorCode.UPSTREAM_BAD_RESPONSE,
                request_id=request_id_of(response),
            ) from exc

    async def create_batch(self, content: bytes) -> MessageBatch:
        """Create a Message Batch from its body, ``{"requests": [{"custom_id", "params"}]}``,
        already JSON (the caller measured it against the upstream's limit)."""
        response = await self._call("POST", "/v1/messages/batches", content)
        return self._batch(response)

    async def get_batch(self, batch_id: str) -> MessageBatch:
        response = await self._call("GET", f"/v1/messages/batches/{batch_id}")
        return self._batch(response)

    async def cancel_batch(self, batch_id: str) -> MessageBatch:
        response = await self._call("POST", f"/v1/messages/batches/{batch_id}/cancel", b"{}")
        return self._batch(response)

    @asynccontextmanager
    async def batch_results(self, batch_id: str) -> AsyncIterator[AsyncIterator[BatchResult]]:
        """The results of an ended batch, read line by line as they arrive (never whole).

        Always from this client's base URL, never from the ``results_url`` a response names:
        the API key goes only where it was configured to go.
        """
        path = f"/v1/messages/batches/{batch_id}/results"
        response = await self._call("GET", path, stream=True)
        try:
            yield self._results(response)
        finally:
            await response.aclose()

    async def _results(self, response: httpx.Response) -> AsyncIterator[BatchResult]:
        request_id = request_id_of(response)
        try:
            async for line in response.aiter_lines():
                if not line.strip():
                    continue
                try:
                    yield BatchResult.model_validate_json(line)
                except ValidationError as exc:
                    raise UpstreamError(
                        "The upstream API sent a batch result that is not one.",
                        code=ErrorCode.UPSTREAM_BAD_RESPONSE,
                        request_id=request_id,
                    ) from exc
        except httpx.TimeoutException as exc:
            raise UpstreamError(
                "The upstream API stopped sending the batch's results.",
                code=ErrorCode.UPSTREAM_TIMEOUT,
                request_id=request_id,
            ) from exc
        except httpx.TransportError as exc:
            raise UpstreamError(
                "The connection to the upstream API dropped while reading the batch's results.",
                code=ErrorCode.UPSTREAM_STREAM_INTERRUPTED,
                request_id=request_id,
            ) from exc

    def _batch(self, response: httpx.Response) -> MessageBatch:
        try:
            return MessageBatch.model_validate_json(response.content)
        except ValidationError as exc:
            raise UpstreamError(
                "The upstream API answered with something that is not a message batch.",
                code=ErrorCode.UPSTREAM_BAD_RESPONSE,
                request_id=request_id_of(response),
            ) from exc

    @asynccontextmanager
    async def stream_message(
        self, body: dict[str, Any], headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[UpstreamStream]:
        """A streamed answer. Retries happen only while opening, before any event is read."""
        response = await self._post(
            "/v1/messages", {**body, "stream": True}, stream=True, headers=headers
        )
        try:
            yield UpstreamStream(response)
        finally:
            await response.aclose()

    async def _post(
        self,
        path: str,
        body: dict[str, Any],
        stream: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        # orjson: documents make request bodies of megabytes; the json module is the bottleneck.
        return await self._call("POST", path, orjson.dumps(body), stream, headers)

    async def _call(
        self,
        method: str,
        path: str,
        content: bytes | None = None,
        stream: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """``headers``: besides the client's own (the caller's ``anthropic-version`` and
        ``anthropic-beta``, if any)."""
        endpoint = _endpoint(path)
        try:
            response = await self._send(method, path, content, stream, headers)
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
        extra: Mapping[str, str] | None,
    ) -> httpx.Response:
        headers = {**self._headers, **(_JSON if content is not None else {}), **(extra or {})}
        if content is not None:  # sent as pieces (see _pieces), still not chunked
            headers["content-length"] = str(len(content))
        url = self._urls.get(path) or httpx.URL(self._base + path)
        try:
            response = await self._attempts(
                partial(self._attempt, method, url, headers, content, stream)
            )
        except _RetryableStatus as exc:
            response = exc.response
        except httpx.TimeoutException as exc:
            if isinstance(exc, httpx.ConnectTimeout):
                raise UpstreamError("The upstream API could not be reached.") from exc
            raise UpstreamError(
                "The upstream API did not answer in time.", code=ErrorCode.UPSTREAM_TIMEOUT
            ) from exc
        except httpx.TransportError as exc:
            raise UpstreamError("The upstream API could not be reached.") from exc
        if response.is_success:
            return response
        await _read_and_close(response)
        raise _error_from(response)

    async def _attempts(self, attempt: Callable[[], Awaitable[httpx.Response]]) -> httpx.Response:
        """The first ``attempt`` and, when it fails in a way worth retrying, tenacity's retries.

        The loop is tenacity's own (``AsyncRetrying.__call__``'s), entered with the first
        attempt's outcome already in its state: an attempt that succeeds, as nearly all do,
        costs none of tenacity's bookkeeping, done twice per attempt (a copy, state, each
        callback inspected for being a coroutine function): 5.6 % of a streamed answer's
        instructions (bench/instructions.py --stream --against f14810e).
        """
        started = time.monotonic()
        try:
            return await attempt()
        except BaseException as error:
            if not _is_retryable(error):
                raise
            retrying = self._retrying.copy()
            retrying.begin()
            state = RetryCallState(retrying, fn=None, args=(), kwargs={})
            state.start_time = started  # the retry budget counts from the first attempt
            state.set_exception(sys.exc_info())  # type: ignore[arg-type]
        while True:
            do = await retrying.iter(retry_state=state)
            if isinstance(do, DoAttempt):
                try:
                    response = await attempt()
                except BaseException:
                    state.set_exception(sys.exc_info())  # type: ignore[arg-type]
                else:
                    state.set_result(response)
            elif isinstance(do, DoSleep):
                state.prepare_for_next_attempt()
                await retrying.sleep(do)  # type: ignore[misc]
            else:
                return do  # type: ignore[no-any-return]

    async def _attempt(
        self,
        method: str,
        url: httpx.URL,
        headers: dict[str, str],
        content: bytes | None,
        stream: bool,
    ) -> httpx.Response:
        """One attempt: the response, read whole unless ``stream``; a status worth retrying
        raised as ``_RetryableStatus``."""
        request = httpx.Request(
            method,
            url,
            headers=headers,
            content=None if content is None else _pieces(content),
            extensions={"timeout": self._timeout},
        )
        response = await self._transport.handle_async_request(request)
        response.request = request
        if not stream:
            try:
                await response.aread()  # and closed, once read
            except BaseException:
                await response.aclose()
                raise
        if response.status_code in RETRYABLE_STATUSES:
            await _read_and_close(response)
            raise _RetryableStatus(response)
        return response


def _endpoint(path: str) -> str:
    """The metric label of a path: its last part, a batch's id left out."""
    parts = path.split("/")
    if len(parts) > 4 and parts[3] == "batches":  # /v1/messages/batches/{id}[/...]
        return "batch/" + "/".join(parts[5:]) if len(parts) > 5 else "batch"
    return parts[-1]


# A body larger than this is handed to the transport in pieces of this size: written whole
# (PDF windows make bodies of many megabytes) it would hold the loop (aiohttp warns of it).
_PIECE = 1024 * 1024


async def _pieces(content: bytes) -> AsyncIterator[bytes]:
    """The body as an iterator, a megabyte at a time, so that nothing keeps it once sent.

    httpx's request keeps a body given as bytes, and the response keeps its request, for as
    long as the response lives: a streamed answer's whole length, 300 KB for each of a
    thousand open streams (and for thousands more, were either ever caught in a reference
    cycle). A finished iterator holds nothing. Bodies past a megabyte also go in pieces for
    aiohttp, which copies each whole piece it is given.

    An empty piece goes first: aiohttp then writes the request's headers alone, where it would
    copy them and the first piece into one new buffer (on Python before 3.12.9, which has no
    safe ``writelines``): the 300 KB of an answer's documents copied once more per call, 2.5 %
    of ``create_message``'s CPU for one more small write.
    """
    yield b""
    if len(content) <= _PIECE:
        yield content
        return
    view = memoryview(content)
    for start in range(0, len(view), _PIECE):
        yield bytes(view[start : start + _PIECE])


async def _read_and_close(response: httpx.Response) -> None:
    """Read an error body for its message, and give the connection back whatever happens."""
    try:
        await response.aread()
    finally:
        await response.aclose()


# The statuses behind the error types that can arrive inside a stream.
_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "not_found_error": 404,
    "permission_error": 403,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


class UpstreamStream:
    """The events of a streamed answer, each parsed as JSON, pings and errors included, a list
    at a time: ``batches`` yields the frames each read of the response completed."""

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.request_id = request_id_of(response)

    async def batches(self) -> AsyncIterator[list[Frame]]:
        """The upstream sends events in bursts (a block's start with its first delta, a run of
        citations), and an instant upstream sends them all in one read: relayed a read at a
        time, they make one write downstream where they came in one, not one write each.
        The framing is ``EventReader``'s, fed each read."""
        content_type = self._response.headers.get("content-type", "").partition(";")[0]
        if "text/event-stream" not in content_type:
            raise self._bad("something that is not an event stream")
        reader = EventReader()
        # A stream sent as it is (as the Messages API sends its events) is read from the
        # transport's own stream, as it came: aiter_raw adds a generator and a chunker to every
        # read, aiter_bytes an identity decode and a second chunker too.
        # The response is closed by ``stream_message`` whichever way the stream ends.
        encoding = self._response.headers.get("content-encoding", "").strip().lower()
        stream = self._response.stream
        chunks: AsyncIterable[bytes] = (
            stream
            if encoding in ("", "identity") and isinstance(stream, httpx.AsyncByteStream)
            else self._response.aiter_bytes()
        )
        try:
            async for chunk in chunks:
                batch, broken = self._frames(reader.feed(chunk))
                if batch:
                    yield batch
                if broken is not None:  # after the frames before it
                    raise broken
            batch, broken = self._frames(reader.end())
            if batch:
                yield batch
            if broken is not None:
                raise broken
        except httpx.TimeoutException as exc:
            raise UpstreamError(
                "The upstream API stopped sending in the middle of the answer.",
                code=ErrorCode.UPSTREAM_TIMEOUT,
                request_id=self.request_id,
            ) from exc
        except httpx.TransportError as exc:
            raise UpstreamError(
                "The connection to the upstream API dropped in the middle of the answer.",
                code=ErrorCode.UPSTREAM_STREAM_INTERRUPTED,
                request_id=self.request_id,
            ) from exc

    def _frames(self, events: list[tuple[str, str]]) -> tuple[list[Frame], UpstreamError | None]:
        """The frames of these events (name and data), up to the first whose data is not a
        JSON object, and the error that one is."""
        frames: list[Frame] = []
        for name, data in events:
            try:
                # Real streams pad their JSON with spaces: a JSON parser, never matching.
                event = orjson.loads(data)
            except orjson.JSONDecodeError:
                return frames, self._bad("an event that is not JSON")
            if not isinstance(event, dict):
                return frames, self._bad("an event that is not an object")
            frames.append(Frame(name, data, event))
        return frames, None

    def _bad(self, what: str) -> UpstreamError:
        return UpstreamError(
            f"The upstream API streamed {what}.",
            code=ErrorCode.UPSTREAM_BAD_RESPONSE,
            request_id=self.request_id,
        )

    def error_of(self, frame: Frame) -> UpstreamError:
        """Our error for an ``error`` event of the stream."""
        log.warning("upstream error event mid-stream: %s", _error_type(frame.event))
        return error_of_body(frame.event, self.request_id)


def _error_type(body: Any) -> object:
    error = body.get("error") if isinstance(body, dict) else None
    return error.get("type") if isinstance(error, dict) else None


def error_of_body(body: Any, request_id: str | None) -> UpstreamError:
    """The error an error body names (``{"type": "error", "error": {"type", "message"}}``, as
    in a stream's ``error`` event or a batch's errored result), with the status of its type."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        error = {}
    kind = str(error.get("type"))
    status = _ERROR_STATUS.get(kind, 500)
    if request_id is None and isinstance(body, dict) and isinstance(body.get("request_id"), str):
        request_id = body["request_id"]
    return error_for_status(
        status, str(error.get("message", "")), request_id, None, upstream_type=kind
    )


def _error_from(response: httpx.Response) -> UpstreamError:
    message = ""
    kind = None
    try:
        payload = response.json()
        message = str(payload["error"]["message"])
        kind = str(payload["error"]["type"])
        request_id = request_id_of(response) or payload.get("request_id")
    except (ValueError, KeyError, TypeError):
        request_id = request_id_of(response)
    retry_after = retry_after_seconds(response)
    error = error_for_status(
        response.status_code,
        message or response.reason_phrase,
        request_id,
        math.ceil(retry_after) if retry_after is not None else None,
        upstream_type=kind,
    )
    log.warning(
        "upstream error %d (%s), request id %s", response.status_code, error.code, request_id
    )
    return error
