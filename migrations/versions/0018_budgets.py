"""budgets: a spending limit on tenants and keys, reserved before each upstream call

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-07

A tenant or key may have a budget: ``budget_nano_usd`` (US dollars times 10^9, an integer, so
that sums are exact) per ``budget_period`` (``day`` or ``month``, in UTC, or ``total``); both
null when it has none. ``budget_spend`` holds one row per owner (a tenant's or key's id, of
``tenant_id``), period and period start: what was spent (``spent_nano_usd``) and what calls under way have
reserved (``reserved_nano_usd``). A call reserves its maximum cost by one conditional UPDATE
of that row (``app.auth.budgets``), so that concurrent calls, in any process, never reserve
past the budget; it settles its actual cost when it ends, or releases the reservation.

A batch reserves for every request when it is made: ``answer_batches.budget_owners`` (the
ledger rows reserved, as JSON) and each request's ``reserved_nano_usd``, set back to 0 when the
request's result settles it or its cancel or expiry releases it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    for table in ("tenants", "api_keys"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("budget_nano_usd", sa.BigInteger(), nullable=True))
            batch.add_column(sa.Column("budget_period", sa.String(length=8), nullable=True))
    op.create_table(
        "budget_spend",
        sa.Column("owner_id", sa.String(length=40), nullable=False),
        sa.Column("period", sa.String(length=8), nullable=False),
        sa.Column("period_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("tenant_id", sa.String(length=40), nullable=False),
        sa.Column("spent_nano_usd", sa.BigInteger(), nullable=False),
        sa.Column("reserved_nano_usd", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("owner_id", "period", "period_start", name=op.f("pk_budget_spend")),
    )
    with op.batch_alter_table("answer_batches") as batch:
        batch.add_column(sa.Column("budget_owners", sa.JSON(), nullable=True))
    with op.batch_alter_table("answer_batch_requests") as batch:
        batch.add_column(
            sa.Column(
                "reserved_nano_usd", sa.BigInteger(), nullable=False, server_default=sa.text("0")
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("answer_batch_requests") as batch:
        batch.drop_column("reserved_nano_usd")
    with op.batch_alter_table("answer_batches") as batch:
        batch.drop_column("budget_owners")
    op.drop_table("budget_spend")
    for table in ("api_keys", "tenants"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("budget_period")
            batch.drop_column("budget_nano_usd")
