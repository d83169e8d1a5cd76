"""An engine that caches any prompt size, and its ASGI app behind an httpx client in process."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from app.local_engine import LocalEngine, create_local_engine_app


@pytest.fixture
def engine() -> LocalEngine:
    return LocalEngine(min_cacheable_tokens=0)


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    app = create_local_engine_app(LocalEngine(min_cacheable_tokens=0))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://engine") as client:
        yield client
