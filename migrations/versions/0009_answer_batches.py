"""answer batches

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01

Answer batches, their requests and results, the poller's lease; answers linked to their batch.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "answer_batches",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant_id", sa.String(length=40), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("upstream_batch_id", sa.String(length=200), nullable=True),
        sa.Column("request_count", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cancel_requested_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("next_poll_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("polls_unchanged", sa.Integer(), nullable=False),
        sa.Column("lease_owner", sa.String(length=64), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_answer_batches_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_answer_batches")),
    )
    op.create_index(
        op.f("ix_answer_batches_tenant_id"), "answer_batches", ["tenant_id"], unique=False
    )
    op.create_index(
        op.f("ix_answer_batches_next_poll_at"), "answer_batches", ["next_poll_at"], unique=False
    )
    op.create_table(
        "answer_batch_requests",
        sa.Column("batch_id", sa.String(length=40), nullable=False),
        sa.Column("position", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("tenant_id", sa.String(length=40), nullable=False),
        sa.Column("custom_id", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("answer_id", sa.String(length=40), nullable=False),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("system", sa.Text(), nullable=True),
        sa.Column("model", sa.String(length=200), nullable=True),
        sa.Column("max_tokens", sa.Integer(), nullable=True),
        sa.Column("document_ids", sa.JSON(), nullable=False),
        sa.Column("documents", sa.JSON(), nullable=False),
        sa.Column("retrieval", sa.JSON(), nullable=True),
        sa.Column("error", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(
            ["batch_id"],
            ["answer_batches.id"],
            name=op.f("fk_answer_batch_requests_batch_id_answer_batches"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_answer_batch_requests_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("batch_id", "position", name=op.f("pk_answer_batch_requests")),
        sa.UniqueConstraint(
            "batch_id", "custom_id", name=op.f("uq_answer_batch_requests_batch_id_custom_id")
        ),
    )
    op.create_index(
        op.f("ix_answer_batch_requests_tenant_id"),
        "answer_batch_requests",
        ["tenant_id"],
        unique=False,
    )
    with op.batch_alter_table("answers", schema=None) as batch_op:
        batch_op.add_column(sa.Column("batch_id", sa.String(length=40), nullable=True))
        batch_op.create_index(batch_op.f("ix_answers_batch_id"), ["batch_id"], unique=False)
        batch_op.create_foreign_key(
            batch_op.f("fk_answers_batch_id_answer_batches"),
            "answer_batches",
            ["batch_id"],
            ["id"],
            ondelete="CASCADE",
        )


def downgrade() -> None:
    with op.batch_alter_table("answers", schema=None) as batch_op:
        batch_op.drop_constraint(
            batch_op.f("fk_answers_batch_id_answer_batches"), type_="foreignkey"
        )
        batch_op.drop_index(batch_op.f("ix_answers_batch_id"))
        batch_op.drop_column("batch_id")
    op.drop_index(op.f("ix_answer_batch_requests_tenant_id"), table_name="answer_batch_requests")
    op.drop_table("answer_batch_requests")
    op.drop_index(op.f("ix_answer_batches_next_poll_at"), table_name="answer_batches")
    op.drop_index(op.f("ix_answer_batches_tenant_id"), table_name="answer_batches")
    op.drop_table("answer_batches")
