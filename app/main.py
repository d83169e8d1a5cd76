"""The application factory and its lifespan."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from app.api import health
from app.api.documents import documents_router
from app.api.request_id import RequestIdMiddleware
from app.db.engine import create_engine, create_session_factory
from app.errors import install_error_handlers
from app.settings import Settings

log = logging.getLogger(__name__)


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the service. Nothing is read from the environment except through ``Settings``."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = create_engine(settings.database_url)
        app.state.engine = engine
        app.state.sessions = create_session_factory(engine)
        if settings.upstream_name == "local":
            log.warning("no ANTHROPIC_API_KEY: questions are answered by the local engine")
        try:
            yield
        finally:
            await engine.dispose()

    app = FastAPI(
        title="Citegate",
        version="1.0.0",
        summary="Cited answers over your documents, through Claude's Messages API.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    install_error_handlers(app)
    app.add_middleware(RequestIdMiddleware)
    app.include_router(health.router)
    app.include_router(documents_router(settings))
    return app
