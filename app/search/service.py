"""STUB (replaced by the search helper's module at merge)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession


@dataclass(frozen=True, slots=True)
class Passage:
    document_id: str
    title: str | None
    text: str
    start_char: int
    end_char: int
    start_page: int | None
    end_page: int | None
    chunk_indices: list[int]
    score: float
    chunk_texts: list[str]


async def search_passages(
    session: AsyncSession,
    tenant_id: str,
    query: str,
    document_ids: Sequence[str],
    limit: int,
    *,
    window: int,
    per_document: int,
) -> list[Passage]:
    raise NotImplementedError


async def search_collection_passages(
    session: AsyncSession,
    tenant_id: str,
    query: str,
    collection_id: str,
    limit: int,
    *,
    window: int,
    per_document: int,
) -> list[Passage]:
    raise NotImplementedError
