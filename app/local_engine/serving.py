"""Serve the local engine on its own (``citegate local-engine --host … --port …``)."""

from __future__ import annotations

import uvicorn

from app.local_engine.asgi import create_local_engine_app


def serve(host: str, port: int) -> None:
    """Serve a new ``LocalEngine`` with uvicorn on ``host:port`` until interrupted."""
    uvicorn.run(create_local_engine_app(), host=host, port=port, log_level="info")
