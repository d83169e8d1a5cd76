"""Reading a tenant's rows: another tenant's id is not found, exactly like a missing one."""

from __future__ import annotations

from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import Answer, Conversation, Document
from app.errors import NotFound

Owned = TypeVar("Owned", Document, Answer, Conversation)


async def get_owned(
    session: AsyncSession, model: type[Owned], tenant_id: str, row_id: str, what: str
) -> Owned:
    """The tenant's row with that id, else 404 ``{what}_not_found``."""
    row = await session.get(model, row_id)
    if row is None or row.tenant_id != tenant_id:
        raise NotFound(f"No {what} with id {row_id!r}.", code=f"{what}_not_found")
    return row
