"""Dependency aliases shared by the routers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Query, Request
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import DEFAULT_TENANT_ID
from app.pagination import DEFAULT_LIMIT, MAX_LIMIT
from app.settings import Settings


async def _session(request: Request) -> AsyncIterator[AsyncSession]:
    async with request.app.state.sessions() as session:
        yield session


def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def _tenant_id() -> str:
    # One default tenant until API keys arrive; every query is already scoped by tenant.
    return DEFAULT_TENANT_ID


SessionDep = Annotated[AsyncSession, Depends(_session)]
SettingsDep = Annotated[Settings, Depends(_settings)]
TenantDep = Annotated[str, Depends(_tenant_id)]
LimitQuery = Annotated[int, Query(ge=1, le=MAX_LIMIT, description=f"Page size, 1 to {MAX_LIMIT}.")]
CursorQuery = Annotated[
    str | None, Query(description="`next_cursor` of the previous page.", max_length=200)
]
__all__ = ["DEFAULT_LIMIT", "CursorQuery", "LimitQuery", "SessionDep", "SettingsDep", "TenantDep"]
