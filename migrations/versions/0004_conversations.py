"""conversations

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29

Conversations, and the answers that are their turns.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "conversations",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant_id", sa.String(length=40), nullable=False),
        sa.Column("title", sa.String(length=500), nullable=True),
        sa.Column("system", sa.Text(), nullable=True),
        sa.Column("model", sa.String(length=200), nullable=True),
        sa.Column("document_ids", sa.JSON(), nullable=False),
        sa.Column("busy_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_conversations_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conversations")),
    )
    with op.batch_alter_table("conversations", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_conversations_tenant_id"), ["tenant_id"], unique=False)

    with op.batch_alter_table("answers", schema=None) as batch_op:
        batch_op.add_column(sa.Column("conversation_id", sa.String(length=40), nullable=True))
        batch_op.create_index(
            batch_op.f("ix_answers_conversation_id"), ["conversation_id"], unique=False
        )
        batch_op.create_foreign_key(
            batch_op.f("fk_answers_conversation_id_conversations"),
            "conversations",
            ["conversation_id"],
            ["id"],
            ondelete="CASCADE",
        )


def downgrade() -> None:
    with op.batch_alter_table("answers", schema=None) as batch_op:
        batch_op.drop_constraint(
            batch_op.f("fk_answers_conversation_id_conversations"), type_="foreignkey"
        )
        batch_op.drop_index(batch_op.f("ix_answers_conversation_id"))
        batch_op.drop_column("conversation_id")

    with op.batch_alter_table("conversations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_conversations_tenant_id"))

    op.drop_table("conversations")
