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


# Plain ALTER TABLE, never a batch: on SQLite a batch rebuilds the table, which renumbers the
# rowids that the search index (0005) is keyed by and drops its triggers.


def upgrade() -> None:
    op.add_column("document_chunks", sa.Column("locator", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("document_chunks", "locator")
