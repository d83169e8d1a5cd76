"""durable batches: the local engine's batches as rows, an answer batch's intent before upstream

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03

The local engine kept its Message Batches in memory, so a batch died with its process and the
poller asked for it forever. Its batches are now rows (``local_engine_batches``: the body as it
arrived, until the batch ends; ``local_engine_results``: one JSON line per answered request), so
any process sharing the database serves them and a restarted one finishes them.

An answer batch's row is written before the upstream is asked (status ``validating``, its
upstream body kept in ``upstream_body`` until the upstream batch is known), so that a crash or a
failure of unknown outcome leaves a row the poller reconciles; ``key_id`` names the key whose
daily tokens the batch's answers spend.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "local_engine_batches",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("cancel_initiated_at", sa.Float(), nullable=True),
        sa.Column("version", sa.String(length=32), nullable=False),
        sa.Column("request_count", sa.Integer(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=True),
        sa.Column("lease_owner", sa.String(length=64), nullable=True),
        sa.Column("lease_until", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_local_engine_batches")),
    )
    op.create_index(
        op.f("ix_local_engine_batches_created_at"),
        "local_engine_batches",
        ["created_at"],
        unique=False,
    )
    op.create_table(
        "local_engine_results",
        sa.Column("batch_id", sa.String(length=64), nullable=False),
        sa.Column("position", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("line", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["batch_id"],
            ["local_engine_batches.id"],
            name=op.f("fk_local_engine_results_batch_id_local_engine_batches"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("batch_id", "position", name=op.f("pk_local_engine_results")),
    )
    with op.batch_alter_table("answer_batches", schema=None) as batch_op:
        batch_op.add_column(sa.Column("key_id", sa.String(length=40), nullable=True))
        batch_op.add_column(sa.Column("upstream_body", sa.LargeBinary(), nullable=True))
        batch_op.add_column(
            sa.Column("upstream_sent_at", sa.DateTime(timezone=True), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("answer_batches", schema=None) as batch_op:
        batch_op.drop_column("upstream_sent_at")
        batch_op.drop_column("upstream_body")
        batch_op.drop_column("key_id")
    op.drop_table("local_engine_results")
    op.drop_index(op.f("ix_local_engine_batches_created_at"), table_name="local_engine_batches")
    op.drop_table("local_engine_batches")
