"""The application factory and its lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from app.answers.context import AnswerContext
from app.answers.live import LiveAnswers
from app.answers.store import ENDING_COLUMNS
from app.api import (
    admin,
    answers,
    anthropic,
    batches,
    collections,
    conversations,
    health,
    openai,
    search,
    seeing,
)
from app.api.body_checks import BodyChecks
from app.api.deps import require_principal
from app.api.docs import add_docs
from app.api.documents import documents_router
from app.auth import keys
from app.auth.limits import KeyLimits
from app.batches.poller import BatchPoller
from app.compat import errors as compat_errors
from app.compat.openai import errors as openai_errors
from app.db.engine import RowInserter, RowUpdater, create_engine, create_session_factory
from app.db.models import Answer
from app.db.unavailable import FAILURES, database_unavailable
from app.documents.ocr import OcrPool, ocr_workers
from app.documents.ocr_jobs import OcrJobs
from app.documents.pages import PdfPages
from app.documents.sources import SourceCache
from app.errors import ErrorRendering, install_error_handlers
from app.http_protocol import HEADER_TIMEOUT_STATE
from app.local_engine import LocalEngine, create_local_engine_app
from app.local_engine.batches import LocalBatches
from app.observability import Metrics, RequestObserver, metrics_endpoint
from app.settings import Settings
from app.upstream.client import UpstreamClient, create_transport
from app.usage.prices import load_prices

log = logging.getLogger(__name__)

# Python's default (700, 10, 10) makes a full collection every 70,000 net allocations, which many
# open streams reach often, and each full pass stops the event loop while it walks all their
# objects. Young garbage is still collected young; full passes come ten times less often.
GC_THRESHOLDS = (700, 10, 100)


def create_app(settings: Settings | None = None, *, own_process: bool = False) -> FastAPI:
    """Build the service. Nothing is read from the environment except through ``Settings``.

    ``own_process``: the app is all its process runs (``citegate serve``), so once started it
    tunes the process's garbage collector (``tune_collector``); an app embedded in another
    program leaves its host's collector alone.
    """
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[Mapping[str, object]]:
        engine = create_engine(
            settings.database_url,
            pool_size=settings.database_pool_size,
            max_overflow=settings.database_max_overflow,
            ping_after_idle=settings.database_ping_after_idle_seconds,
            connect_timeout=settings.database_connect_timeout_seconds,
        )
        app.state.engine = engine
        app.state.sessions = create_session_factory(engine)
        app.state.key_cache.bind(engine)
        await _check_auth(app, settings)
        # Before serving: the streams that dead processes left in progress are interrupted.
        live = LiveAnswers(app.state.sessions, settings)
        await live.start()
        local = local_batches = None
        if settings.upstream_name == "local":
            log.warning("no ANTHROPIC_API_KEY: questions are answered by the local engine")
            answerer = LocalEngine()
            # Its batches are rows of this database: every worker and replica serves them, and
            # one started again answers those a stopped one left.
            local_batches = LocalBatches(
                answerer,
                engine,
                lifetime=settings.local_batch_lifetime_seconds,
                lease_seconds=settings.batch_lease_seconds,
                tick=settings.batch_poll_seconds,  # the batches another process left
            )
            local_batches.start()
            local = create_local_engine_app(answerer, local_batches)
        transport = create_transport(settings, local)
        app.state.answer_context = AnswerContext(
            upstream=UpstreamClient(transport, settings, metrics),
            sources=app.state.source_cache,
            limits=app.state.key_limits,
            settings=settings,
            engine=engine,
            answers=RowInserter(engine, Answer),
            answer_ends=RowUpdater(engine, Answer, ENDING_COLUMNS),
            live=live,
            sessions=app.state.sessions,
            metrics=metrics,
            pages=app.state.pdf_pages,
            prices=app.state.prices,
        )
        app.state.ocr_jobs = OcrJobs(
            app.state.sessions,
            app.state.ocr_pool,
            lease_seconds=settings.ocr_lease_seconds,
            poll_seconds=settings.ocr_poll_seconds,
            max_jobs=app.state.ocr_pool.workers,
        )
        ocr_reader = None
        if settings.ocr != "off":  # a process with OCR off reads no page, not even another's
            ocr_reader = asyncio.create_task(app.state.ocr_jobs.run())
        watcher = asyncio.create_task(metrics.watch_event_loop())
        keeper = asyncio.create_task(live.run())
        app.state.batch_poller = BatchPoller(app.state.answer_context)
        poller = None
        if settings.batch_poller:
            poller = asyncio.create_task(app.state.batch_poller.run())
        if own_process:
            tune_collector()
        try:
            # The lifespan's state reaches uvicorn's protocol of each connection, which bounds
            # the time a request's headers take (app.http_protocol).
            yield {HEADER_TIMEOUT_STATE: settings.header_timeout_seconds}
        finally:
            if ocr_reader is not None:
                ocr_reader.cancel()
            await app.state.ocr_jobs.stop()  # their leases run out: another process goes on
            watcher.cancel()
            keeper.cancel()
            if poller is not None:
                poller.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await poller  # a chunk of results being stored is rolled back, whole
            if local_batches is not None:
                await local_batches.aclose()
            await transport.aclose()
            app.state.key_limits.close()
            await asyncio.to_thread(app.state.pdf_pages.close)  # PDFium's lock, off the loop
            await asyncio.to_thread(app.state.ocr_pool.close)  # waits for its workers
            with contextlib.suppress(Exception):  # else its streams are marked a lease later
                await live.stop()
            await app.state.key_cache.aclose()
            await engine.dispose()

    app = FastAPI(
        title="Citegate",
        version="1.0.0",
        summary="Cited answers over your documents, through Claude's Messages API.",
        lifespan=lifespan,
        docs_url=None,  # add_docs serves /docs and /redoc with no CDN
        redoc_url=None,
    )
    metrics = Metrics()
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.key_limits = KeyLimits(settings, metrics)
    app.state.key_cache = keys.KeyCache()
    app.state.prices = load_prices(settings.prices_file)  # a bad table stops the start
    app.state.pdf_pages = PdfPages()
    app.state.ocr_pool = OcrPool(ocr_workers(settings.ocr_workers))
    app.state.source_cache = SourceCache(settings.source_cache_chars, settings.recheck_seconds)
    rendering = ErrorRendering(
        {
            compat_errors.PREFIX: compat_errors.render_messages_error,
            openai_errors.PREFIX: openai_errors.render_openai_error,
        }
    )
    install_error_handlers(app, rendering, dict.fromkeys(FAILURES, database_unavailable))
    app.add_middleware(BodyChecks, settings=settings, rendering=rendering)
    app.add_middleware(RequestObserver, metrics=metrics)
    authenticated = [Depends(require_principal)]
    # The answer routes first: a request is matched against each router in turn, so the busiest
    # routes are met soonest. No two routers share a path, so the order decides nothing else.
    app.include_router(answers.router, dependencies=authenticated)
    app.include_router(anthropic.router)  # its routes authenticate as the Messages API does
    app.include_router(openai.router)  # as the OpenAI SDKs do
    app.include_router(health.router)
    app.get("/metrics", include_in_schema=False)(metrics_endpoint)
    app.include_router(documents_router(settings), dependencies=authenticated)
    app.include_router(conversations.router, dependencies=authenticated)
    app.include_router(collections.router, dependencies=authenticated)
    app.include_router(search.router, dependencies=authenticated)
    app.include_router(seeing.api, dependencies=authenticated)
    app.include_router(seeing.public)
    app.include_router(batches.router, dependencies=authenticated)
    app.include_router(admin.router, dependencies=authenticated)
    add_docs(app)
    return app


def create_worker_app() -> FastAPI:
    """The app of one worker process of ``citegate serve --workers N``, set up as the one
    process of ``citegate serve`` is: settings from the environment, JSON logs, streams that
    finish within the graceful timeout on SIGTERM."""
    from sse_starlette.sse import AppStatus

    from app.observability import configure_logging

    AppStatus.disable_automatic_graceful_drain()  # type: ignore[no-untyped-call]
    settings = Settings()
    configure_logging(settings.log_level)
    return create_app(settings, own_process=True)


def tune_collector() -> None:
    """The garbage collector of a process ``citegate serve`` starts, once the app has started:
    what start-up made lives as long as the process and is kept out of every collection, and
    full collections come less often (``GC_THRESHOLDS``)."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


async def _check_auth(app: FastAPI, settings: Settings) -> None:
    """Ensure the bootstrap key; refuse to start open when auth is required."""
    async with app.state.sessions() as session:
        if settings.bootstrap_api_key is not None:
            key = await keys.ensure_key(
                session, settings.bootstrap_tenant, settings.bootstrap_api_key.get_secret_value()
            )
            log.info("bootstrap API key %s… ensured", key.prefix)
        if not await keys.any_key_exists(session):
            if settings.auth == "required":
                raise RuntimeError(
                    "CITEGATE_AUTH=required but no API key exists: create one with "
                    "`citegate keys create --tenant NAME` or set CITEGATE_BOOTSTRAP_API_KEY"
                )
            log.warning("no API key exists: the service is open, with one default tenant")
