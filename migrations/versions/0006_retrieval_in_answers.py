"""retrieval in answers

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

What each answer was sent (whole documents or retrieved passages), and conversations over a
collection.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("answers") as batch:
        batch.add_column(sa.Column("retrieval", sa.JSON(), nullable=True))
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("collection_id", sa.String(length=40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        batch.drop_column("collection_id")
    with op.batch_alter_table("answers") as batch:
        batch.drop_column("retrieval")
