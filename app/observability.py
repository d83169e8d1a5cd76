"""Metrics (Prometheus) and the request log: one JSON line per request.

Each app has its own registry (no import-time state); services get the ``Metrics`` object they
need. The request log carries the request id, the tenant (never the key), the route template,
the status, the latency and the upstream request id when there was an upstream call.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
import uuid
from contextvars import ContextVar
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from pythonjsonlogger.json import JsonFormatter
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

request_log = logging.getLogger("citegate.request")

# prometheus_client's own variable: set (by `citegate serve --workers N`) before it is imported,
# every process writes its figures to files there, and /metrics adds them up.
MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


@dataclass
class RequestFacts:
    """What the code handling a request learns that its log line and metrics should carry."""

    upstream_request_id: str | None = None
    ingested: list[tuple[str, float]] = field(default_factory=list)  # (kind, seconds)


_facts: ContextVar[RequestFacts | None] = ContextVar("citegate_request_facts", default=None)


def note_ingested(kind: str, seconds: float) -> None:
    """Count a stored document of this kind and the time its ingestion took."""
    facts = _facts.get()
    if facts is not None:
        facts.ingested.append((kind, seconds))


def note_upstream_request_id(request_id: str | None) -> None:
    """Remember the upstream request id for the current request's log line."""
    facts = _facts.get()
    if facts is not None and request_id:
        facts.upstream_request_id = request_id


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "citegate_http_requests", "HTTP requests.", ["method", "route", "status"], registry=r
        )
        self.latency = Histogram(
            "citegate_http_request_duration_seconds",
            "HTTP request latency, to the last byte.",
            ["method", "route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.upstream_calls = Counter(
            "citegate_upstream_calls",
            "Calls to the Messages API by outcome (ok or our error code).",
            ["endpoint", "outcome"],
            registry=r,
        )
        self.upstream_retries = Counter(
            "citegate_upstream_retries", "Retried upstream attempts.", ["reason"], registry=r
        )
        self.tokens = Counter(
            "citegate_upstream_tokens",
            "Tokens reported by the upstream: input, output, cache_read, cache_creation.",
            ["kind"],
            registry=r,
        )
        self.documents = Counter(
            "citegate_documents_ingested", "Documents stored, by kind.", ["kind"], registry=r
        )
        self.ingestion = Histogram(
            "citegate_document_ingestion_seconds",
            "Time to parse, index and store a document.",
            ["kind"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.answers = Counter(
            "citegate_answers", "Answers stored, by status.", ["status"], registry=r
        )
        self.loop_lag = Histogram(
            "citegate_event_loop_lag_seconds",
            "How late the event loop wakes a task that asked to sleep: blocking work shows here.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=r,
        )
        self.rate_limit_store_errors = Counter(
            "citegate_rate_limit_store_errors",
            "Calls to the rate-limit store (Redis) that failed or timed out, by operation.",
            ["operation"],
            registry=r,
        )
        self.rate_limit_fail_open = Counter(
            "citegate_rate_limit_fail_open",
            "Limit checks and token spends let through uncounted because the rate-limit "
            "store could not answer, by limit (requests or tokens).",
            ["limit"],
            registry=r,
        )
        self.batches = Gauge(
            "citegate_answer_batches",
            "Answer batches in the database by status, as this process last counted them.",
            ["status"],
            registry=r,
        )
        self.batch_results = Counter(
            "citegate_answer_batch_results",
            "Results of answer batches stored, by outcome (succeeded, errored, canceled, expired).",
            ["outcome"],
            registry=r,
        )
        self.batch_poll_errors = Counter(
            "citegate_answer_batch_poll_errors",
            "Polls of an answer batch that failed (the upstream or the database); retried "
            "with backoff.",
            registry=r,
        )
        self.unverified = Counter(
            "citegate_answers_with_unverified_citations",
            "Answers with at least one citation that did not verify against the stored text.",
            registry=r,
        )

    async def watch_event_loop(self, interval: float = 0.25) -> None:
        """Sample the event loop's lag until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time()
            await asyncio.sleep(interval)
            self.loop_lag.observe(max(0.0, loop.time() - asked - interval))

    def count_usage(self, usage: dict[str, int]) -> None:
        for usage_field, kind in (
            ("input_tokens", "input"),
            ("output_tokens", "output"),
            ("cache_read_input_tokens", "cache_read"),
            ("cache_creation_input_tokens", "cache_creation"),
        ):
            self.tokens.labels(kind).inc(usage.get(usage_field, 0))

    def response(self) -> Response:
        registry = self.registry
        if os.environ.get(MULTIPROCESS_DIR):  # `citegate serve --workers N`: all workers' figures
            registry = CollectorRegistry()
            MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return Response(generate_latest(registry), media_type="text/plain; version=0.0.4")


# ``X-Request-ID``: the caller's when sensible, else a new one; on every response the app sends
# (not on the bare 500 that Starlette's outermost middleware sends for an unhandled error).
REQUEST_ID_HEADER = "x-request-id"
_ACCEPTABLE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class RequestObserver:
    """Pure ASGI middleware: gives every HTTP request its id (``X-Request-ID``, in the scope's
    state and on the response), and counts, times and logs it. One middleware, not two: each
    wraps ``send``, which every streamed event goes through."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        given = dict(scope["headers"]).get(REQUEST_ID_HEADER.encode(), b"").decode("latin-1")
        request_id = given if _ACCEPTABLE_REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        facts = RequestFacts()
        token = _facts.set(facts)
        status = 500
        observed = False

        def observe() -> None:
            nonlocal observed
            observed = True
            self._observe(scope, status, time.perf_counter() - started, facts)

        async def send_observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                MutableHeaders(scope=message)[REQUEST_ID_HEADER] = request_id
            elif not message.get("more_body", False) and not observed:
                observe()  # before the last byte leaves: a client never sees it uncounted
            await send(message)

        try:
            await self.app(scope, receive, send_observed)
        finally:
            _facts.reset(token)
            if not observed:
                observe()

    def _observe(self, scope: Scope, status: int, elapsed: float, facts: RequestFacts) -> None:
        route = scope.get("route")
        template = getattr(route, "path", None) or "unmatched"
        method = scope["method"]
        self.metrics.requests.labels(method, template, str(status)).inc()
        self.metrics.latency.labels(method, template).observe(elapsed)
        for kind, seconds in facts.ingested:
            self.metrics.documents.labels(kind).inc()
            self.metrics.ingestion.labels(kind).observe(seconds)
        state = scope.get("state", {})
        client = scope.get("client")
        request_log.info(
            "%s %s %d",
            method,
            template,
            status,
            extra={
                "request_id": state.get("request_id"),
                "tenant": state.get("tenant_id"),
                "client": client[0] if client else None,  # after trusted proxy headers
                "method": method,
                "route": template,
                "status": status,
                "latency_ms": round(elapsed * 1000, 2),
                "upstream_request_id": facts.upstream_request_id,
            },
        )


async def metrics_endpoint(request: Request) -> Response:
    metrics: Metrics = request.app.state.metrics
    return metrics.response()


def configure_logging(level: str) -> None:
    """JSON lines on stderr for every logger (uvicorn's too)."""
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter(
            "%(asctime)s %(levelname)s %(name)s %(message)s",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiosqlite logs every statement it runs, parameters included (a key's hash among them), at
    # DEBUG: a service's DEBUG log says what the service did, not what the driver's thread did.
    logging.getLogger("aiosqlite").setLevel(max(root.level, logging.INFO))
