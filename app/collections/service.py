"""STUB (replaced at merge)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession


async def collection_document_ids(
    session: AsyncSession, tenant_id: str, collection_id: str
) -> list[str]:
    raise NotImplementedError
