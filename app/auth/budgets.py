"""Budgets: what a tenant or key may spend upstream per day, month or in total, and the ledger.

A budget is US dollars as an integer of nano-USD (10^-9 USD: exact sums, no float) per period:
``day`` and ``month`` are UTC days and calendar months, ``total`` never rolls over. The ledger
(``budget_spend``) keeps one row per owner (a tenant's or key's id), period and period start:
what was spent and what calls under way have reserved.

Before an upstream call, ``reserve`` adds the call's maximum cost to ``reserved`` of each budget
that applies (the key's and its tenant's), by one conditional UPDATE per row that only matches
while ``spent + reserved + cost`` stays within the budget: concurrent calls, in this process or
any other on the same database, never reserve past it (PostgreSQL re-checks the condition on
the row it waited for; SQLite has one writer at a time). One budget whose row for the period
exists: that one statement, committed by itself. Two budgets (both rows or neither), or a
period's first call (its row made first): one transaction. A refused reservation is
``budget_exceeded``. After the call, ``settle`` moves the reservation to
``spent`` as the actual cost (``release``: as nothing, when the call failed). A reservation
is settled in the period it was made in, also when the call ends in the next one.

A process that dies between the two leaves its reservation reserved until its period ends (for
``total``, for good): refusing too early is the safe side of a limit on money.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Literal, Protocol
from weakref import WeakKeyDictionary

from sqlalchemy import ColumnElement, Engine, and_, bindparam, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.db.engine import Statement
from app.db.models import BudgetSpend, utcnow
from app.errors import CitegateError, ErrorCode

Period = Literal["day", "month", "total"]
PERIODS: tuple[Period, ...] = ("day", "month", "total")
NANO_PER_USD = 10**9
# Where ``total`` periods start: they never roll over.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_spend = BudgetSpend.__table__.c


class BudgetExceeded(CitegateError):
    """A call whose maximum cost does not fit in what is left of a budget: 429, not retried."""

    default_code = ErrorCode.BUDGET_EXCEEDED

    def __init__(self, detail: str) -> None:
        # Retrying does not help before the period rolls over: the official SDKs honour this.
        super().__init__(detail, headers={"x-should-retry": "false"})


@dataclass(frozen=True, slots=True)
class Budget:
    """A tenant's or key's budget: at most ``nano_usd`` per ``period``. ``tenant_id``: the
    tenant's, or the key's tenant."""

    owner_id: str
    nano_usd: int
    period: str  # Period
    tenant_id: str

    @classmethod
    def of(
        cls, owner_id: str, nano_usd: int | None, period: str | None, tenant_id: str
    ) -> Budget | None:
        """The budget of a row's two columns; None when it has none."""
        if nano_usd is None or period is None:
            return None
        return cls(owner_id, nano_usd, period, tenant_id)


class Pricing(Protocol):
    """What prices a call (``app.usage.prices.Prices``): its cost in USD."""

    def cost(self, model: str, usage: dict[str, int], *, batch: bool) -> Decimal: ...


def nano_usd(amount: Decimal) -> int:
    """USD as whole nano-USD, rounded up (a cost is never counted short)."""
    return math.ceil(amount * NANO_PER_USD)


def usd_text(nano: int) -> str:
    """nano-USD as the API shows dollars: a decimal string with at least two decimals."""
    amount = (Decimal(nano) / NANO_PER_USD).normalize()
    if amount.as_tuple().exponent >= -2:  # type: ignore[operator]  # finite: an int
        amount = amount.quantize(Decimal("0.01"))
    return f"{amount:f}"


def max_cost(
    pricing: Pricing, model: str, input_tokens: int, max_tokens: int, *, batch: bool = False
) -> int:
    """The most a call can cost, in nano-USD: its input (at the dearer of the input and the
    cache-write price, as it may be written to the cache) and ``max_tokens`` of output."""
    return max(
        nano_usd(
            pricing.cost(model, {field: input_tokens, "output_tokens": max_tokens}, batch=batch)
        )
        for field in ("input_tokens", "cache_creation_input_tokens")
    )


def cost(pricing: Pricing, model: str, usage: Mapping[str, int], *, batch: bool = False) -> int:
    """What a call with this usage cost, in nano-USD."""
    return nano_usd(pricing.cost(model, dict(usage), batch=batch))


def period_start(period: str, now: datetime) -> datetime:
    """The start of the period holding ``now`` (UTC): its day, its calendar month, or the
    epoch for ``total``."""
    now = now.astimezone(UTC)
    if period == "day":
        return now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "month":
        return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return EPOCH


# A ledger row: owner id, period, period start (ISO 8601, so that a batch can store it as JSON).
Row = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class Reservation:
    """What ``reserve`` reserved: ``nano_usd`` in each of the ledger rows ``owners``."""

    owners: tuple[Row, ...]
    nano_usd: int


NO_RESERVATION = Reservation((), 0)


async def reserve(
    engine: AsyncEngine,
    budgets: Sequence[Budget],
    amount: int,
    now: datetime | None = None,
) -> Reservation:
    """Reserve ``amount`` nano-USD in every budget, or in none: ``budget_exceeded`` when one
    has not that much left in its period. No budget: nothing reserved, no query."""
    if not budgets:
        return NO_RESERVATION
    now = now or utcnow()
    rows = [
        (budget, (budget.owner_id, budget.period, period_start(budget.period, now).isoformat()))
        for budget in budgets
    ]
    if len(rows) == 1:  # one budget, its row made already: one statement, one round trip
        [(budget, row)] = rows
        values = {**_keys_of(row), "b_amount": amount, "b_limit": budget.nano_usd}
        if await _statements(engine).reserve.run(values) == 1:
            return Reservation((row,), amount)
    owners: list[Row] = []
    async with engine.begin() as connection:
        # Always in the same order (keys' ids before tenants'): two calls never wait on each
        # other's rows crosswise.
        for budget, row in sorted(rows, key=lambda pair: pair[1]):
            if not await _add(connection, row, budget.tenant_id, amount, budget.nano_usd):
                raise BudgetExceeded(_refusal(budget))
            owners.append(row)
    return Reservation(tuple(owners), amount)


async def settle(engine: AsyncEngine, reservation: Reservation, spent: int) -> None:
    """End a call: its reservation given back, ``spent`` nano-USD counted as spent."""
    await settle_rows(engine, reservation.owners, reservation.nano_usd, spent)


async def release(engine: AsyncEngine, reservation: Reservation) -> None:
    """End a call that spent nothing (it failed): its reservation given back."""
    await settle(engine, reservation, 0)


async def settle_rows(
    engine: AsyncEngine, owners: Iterable[Row] | None, reserved: int, spent: int
) -> None:
    """Give back ``reserved`` in these ledger rows and count ``spent`` there: a statement a
    row, each committed by itself (each only adds to its row, in any order)."""
    if reserved == 0 and spent == 0:
        return
    settling = _statements(engine).settle
    for row in owners or ():
        await settling.run({**_keys_of(row), "b_reserved": reserved, "b_spent": spent})


class _Statements:
    """The ledger's statements of every call, compiled once for an engine and run as
    ``app.db.engine.Statement`` runs them (one round trip, committed by itself): building
    and running them through a ``Connection`` cost about a millisecond of CPU each."""

    def __init__(self, engine: AsyncEngine) -> None:
        key = (
            _spend.owner_id == bindparam("b_owner"),
            _spend.period == bindparam("b_period"),
            _spend.period_start == bindparam("b_start"),
        )
        used = _spend.spent_nano_usd + _spend.reserved_nano_usd + bindparam("b_amount")
        self.reserve = Statement(
            engine,
            update(BudgetSpend)
            .where(*key, used <= bindparam("b_limit"))
            .values(reserved_nano_usd=_spend.reserved_nano_usd + bindparam("b_amount")),
        )
        self.settle = Statement(
            engine,
            update(BudgetSpend)
            .where(*key)
            .values(
                reserved_nano_usd=_spend.reserved_nano_usd - bindparam("b_reserved"),
                spent_nano_usd=_spend.spent_nano_usd + bindparam("b_spent"),
            ),
        )


_BUILT: WeakKeyDictionary[Engine, _Statements] = WeakKeyDictionary()


def _statements(engine: AsyncEngine) -> _Statements:
    built = _BUILT.get(engine.sync_engine)
    if built is None:
        built = _BUILT[engine.sync_engine] = _Statements(engine)
    return built


def _keys_of(row: Sequence[str]) -> dict[str, object]:
    owner_id, period, start = row
    return {"b_owner": owner_id, "b_period": period, "b_start": datetime.fromisoformat(start)}


async def settle_in(
    connection: AsyncConnection,
    owners: Iterable[Sequence[str]] | None,
    reserved: int,
    spent: int,
) -> None:
    """``settle_rows`` in the caller's transaction (a batch's results, stored with it)."""
    if reserved == 0 and spent == 0:
        return
    for row in sorted(tuple(owner) for owner in owners or ()):
        await connection.execute(
            update(BudgetSpend)
            .where(_row(row))
            .values(
                reserved_nano_usd=_spend.reserved_nano_usd - reserved,
                spent_nano_usd=_spend.spent_nano_usd + spent,
            )
        )


async def spent(engine: AsyncEngine, budget: Budget, now: datetime | None = None) -> int:
    """What the budget's owner spent (settled) in the period holding ``now``."""
    start = period_start(budget.period, now or utcnow()).isoformat()
    async with engine.connect() as connection:
        value = await connection.scalar(
            select(_spend.spent_nano_usd).where(_row((budget.owner_id, budget.period, start)))
        )
    return int(value or 0)


async def _add(
    connection: AsyncConnection, row: Row, tenant_id: str, amount: int, limit: int
) -> bool:
    """Reserve ``amount`` in the row if it stays within ``limit``: one conditional UPDATE (and
    the row made first, the first time its period is spent in)."""
    reserving = (
        update(BudgetSpend)
        .where(
            _row(row),
            _spend.spent_nano_usd + _spend.reserved_nano_usd + amount <= limit,
        )
        .values(reserved_nano_usd=_spend.reserved_nano_usd + amount)
    )
    if (await connection.execute(reserving)).rowcount == 1:
        return True
    owner_id, period, start = row
    values = {
        "owner_id": owner_id,
        "period": period,
        "period_start": datetime.fromisoformat(start),
        "tenant_id": tenant_id,
        "spent_nano_usd": 0,
        "reserved_nano_usd": 0,
    }
    insert = postgresql.insert if connection.dialect.name == "postgresql" else sqlite.insert
    # Made by this call or, at the same moment, by another (PostgreSQL waits for that one to
    # commit): either way the row is there now, and the condition decides.
    await connection.execute(insert(BudgetSpend).values(values).on_conflict_do_nothing())
    return (await connection.execute(reserving)).rowcount == 1


def _row(row: Sequence[str]) -> ColumnElement[bool]:
    owner_id, period, start = row
    return and_(
        _spend.owner_id == owner_id,
        _spend.period == period,
        _spend.period_start == datetime.fromisoformat(start),
    )


def _refusal(budget: Budget) -> str:
    whose = "tenant" if budget.owner_id.startswith("ten_") else "API key"
    per = {"day": " for the day", "month": " for the month"}.get(budget.period, "")
    return (
        f"The {whose}'s budget of {usd_text(budget.nano_usd)} USD{per} has not enough left "
        "for this request's maximum cost."
    )


# A budget as set through the API: (nano-USD, period), or None for none.
Setting = tuple[int, str] | None


def setting_of(usd: str, period: str) -> tuple[int, str]:
    """A budget given as a decimal string of USD (checked by the schema) and its period."""
    return int(Decimal(usd) * NANO_PER_USD), period


def shown(nano: int | None, period: str | None) -> dict[str, str] | None:
    """A row's budget as the API shows it (and an audit event records it)."""
    if nano is None or period is None:
        return None
    return {"usd": usd_text(nano), "period": period}
