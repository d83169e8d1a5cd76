"""An embedded, extractive question-answering engine that speaks the Messages API exactly (the
same request validation, JSON, SSE events and error bodies), so that Citegate runs with no API
key and no network, and tests drive the real upstream client over a real socket.

``create_local_engine_app(engine)`` is the ASGI app (``POST /v1/messages``, with and without
``"stream": true``, and ``POST /v1/messages/count_tokens``); ``LocalEngine`` holds the logic and
the caches; ``serve(host, port)`` runs it under uvicorn. Every answer's ``model`` is
``citegate-local-1``.
"""

from app.local_engine.asgi import create_local_engine_app
from app.local_engine.engine import LocalEngine
from app.local_engine.serving import serve
from app.local_engine.wire import MODEL_NAME

__all__ = ["MODEL_NAME", "LocalEngine", "create_local_engine_app", "serve"]
