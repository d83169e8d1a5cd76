"""chunk locators

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

Where each chunk of a converted document (Word, HTML, spreadsheets, slides) stands in the
original: a paragraph, a sheet's rows, a slide. Null for text and PDF chunks.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("document_chunks") as batch:
        batch.add_column(sa.Column("locator", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("document_chunks") as batch:
        batch.drop_column("locator")
