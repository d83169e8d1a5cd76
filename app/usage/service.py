"""Usage and cost reports, read from the stored answers and the usage records.

Every upstream call that answers is stored as an answer (asked alone, streamed, in a batch,
through the compatible API), with its usage, model, tenant, key and batch. The reports add
those up, so that their totals are the stored answers' usage exactly and nothing more is
written on the answer path; and the calls that store no answer (``app.db.usage``), which
record their usage as a row of its own. Buckets are ``1h`` or ``1d`` wide, aligned to UTC
hours or days, from the one holding ``starting_at`` to the one holding the moment before
``ending_at``; the calls counted are those made in ``[starting_at, ending_at)``. The answers
are read by time without an index of it (each index costs every answer's insert): a report
reads the answers table through.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.answers.answer import USAGE_FIELDS
from app.db.models import Answer, UsageRecord
from app.errors import ErrorCode, InvalidRequest
from app.usage.prices import Prices

BucketWidth = Literal["1h", "1d"]
GroupBy = Literal["tenant_id", "api_key_id", "model"]
WIDTHS: dict[str, timedelta] = {"1h": timedelta(hours=1), "1d": timedelta(days=1)}
MAX_BUCKETS = 31 * 24

_answers = Answer.__table__.c
_records = UsageRecord.__table__.c
_READ_ANSWERS = select(
    _answers.tenant_id,
    _answers.api_key_id,
    _answers.model,
    _answers.usage,
    _answers.batch_id.is_not(None).label("batch"),
    _answers.created_at,
)
_READ_RECORDS = select(
    _records.tenant_id,
    _records.api_key_id,
    _records.model,
    _records.usage,
    _records.batch,
    _records.created_at,
)


@dataclass
class Group:
    """One group's sums within a bucket."""

    key: dict[str, str | None]
    requests: int = 0
    batch_requests: int = 0
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(USAGE_FIELDS, 0))
    cost: Decimal = Decimal(0)


@dataclass
class Bucket:
    starting_at: datetime
    ending_at: datetime
    groups: list[Group]


def _floor(moment: datetime, width: BucketWidth) -> datetime:
    moment = moment.astimezone(UTC)
    if width == "1d":
        return moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return moment.replace(minute=0, second=0, microsecond=0)


def buckets_of(starting_at: datetime, ending_at: datetime, width: BucketWidth) -> list[datetime]:
    """The buckets' starts; 422 for an empty range or one of more than ``MAX_BUCKETS``."""
    if ending_at <= starting_at:
        raise InvalidRequest(
            "`ending_at` must be after `starting_at`.", code=ErrorCode.VALIDATION_ERROR
        )
    step = WIDTHS[width]
    first = _floor(starting_at, width)
    count = -(-(ending_at - first) // step)  # ceiling
    if count > MAX_BUCKETS:
        raise InvalidRequest(
            f"The range holds {count} buckets of {width}; at most {MAX_BUCKETS}.",
            code=ErrorCode.VALIDATION_ERROR,
        )
    return [first + step * n for n in range(count)]


async def report(
    session: AsyncSession,
    prices: Prices,
    tenant_id: str | None,
    starting_at: datetime,
    ending_at: datetime,
    width: BucketWidth,
    group_by: Iterable[GroupBy],
) -> list[Bucket]:
    """Usage and cost per bucket and group, of one tenant or (``None``) of all. A bucket with
    no answers has no groups."""
    starts = buckets_of(starting_at, ending_at, width)
    keys = [name for name in ("tenant_id", "api_key_id", "model") if name in set(group_by)]
    queries = []
    for query, columns in ((_READ_ANSWERS, _answers), (_READ_RECORDS, _records)):
        query = query.where(columns.created_at >= starting_at, columns.created_at < ending_at)
        if tenant_id is not None:
            query = query.where(columns.tenant_id == tenant_id)
        queries.append(query)
    step = WIDTHS[width]
    first = starts[0]
    sums: list[dict[tuple[Any, ...], Group]] = [defaultdict() for _ in starts]
    rows = [row for query in queries for row in (await session.execute(query)).all()]
    for row in rows:
        index = int((row.created_at.astimezone(UTC) - first) // step)
        key = tuple(getattr(row, name) for name in keys)
        group = sums[index].get(key)
        if group is None:
            group = sums[index][key] = Group(dict(zip(keys, key, strict=True)))
        batch = bool(row.batch)
        group.requests += 1
        group.batch_requests += batch
        usage: dict[str, int] = row.usage or {}
        for name in USAGE_FIELDS:
            group.tokens[name] += int(usage.get(name) or 0)
        group.cost += prices.cost(row.model, usage, batch=batch)
    return [
        Bucket(start, start + step, sorted(groups.values(), key=_order))
        for start, groups in zip(starts, sums, strict=True)
    ]


def _order(group: Group) -> tuple[str, ...]:
    return tuple(value or "" for value in group.key.values())
