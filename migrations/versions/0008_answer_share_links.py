"""answer share links

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

Links that show an answer without a key until they expire, stored as their tokens' hashes.
Highlight boxes need no schema: answers stored before them get theirs when read.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "answer_share_links",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant_id", sa.String(length=40), nullable=False),
        sa.Column("answer_id", sa.String(length=40), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["answer_id"],
            ["answers.id"],
            name=op.f("fk_answer_share_links_answer_id_answers"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_answer_share_links_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_answer_share_links")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_answer_share_links_token_hash")),
    )
    op.create_index(
        op.f("ix_answer_share_links_answer_id"), "answer_share_links", ["answer_id"], unique=False
    )
    op.create_index(
        op.f("ix_answer_share_links_tenant_id"), "answer_share_links", ["tenant_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_answer_share_links_tenant_id"), table_name="answer_share_links")
    op.drop_index(op.f("ix_answer_share_links_answer_id"), table_name="answer_share_links")
    op.drop_table("answer_share_links")
