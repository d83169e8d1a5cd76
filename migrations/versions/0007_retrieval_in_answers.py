"""retrieval in answers

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01

What each answer was sent (whole documents or retrieved passages), and conversations over a
collection.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("answers", sa.Column("retrieval", sa.JSON(), nullable=True))
    op.add_column("conversations", sa.Column("collection_id", sa.String(length=40), nullable=True))


def downgrade() -> None:
    op.drop_column("conversations", "collection_id")
    op.drop_column("answers", "retrieval")
