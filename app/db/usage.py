"""Recording the usage of an upstream call that stores no answer: ``record_usage``.

An answer's usage is recorded by storing the answer (every way of answering stores one, and the
usage and cost reports read the answers). A call that stores none (the support judge, a count
of tokens that is billed) records its usage here, in one row, so that the reports count it
too. Here, in the database layer, so that any package that makes upstream calls can call it.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.models import UsageRecord, utcnow
from app.ids import new_id

USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


async def record_usage(
    engine: AsyncEngine,
    *,
    tenant_id: str,
    key_id: str | None,
    source: str,
    model: str,
    usage: Mapping[str, object],
    batch: bool = False,
) -> None:
    """Record one upstream call's usage (the upstream's ``usage`` object, as it came)."""
    counts = {
        name: int(value) if isinstance(value := usage.get(name), int) else 0
        for name in USAGE_FIELDS
    }
    async with engine.begin() as connection:
        await connection.execute(
            insert(UsageRecord).values(
                id=new_id("use"),
                tenant_id=tenant_id,
                api_key_id=key_id,
                source=source,
                model=model,
                usage=counts,
                batch=batch,
                created_at=utcnow(),
            )
        )
