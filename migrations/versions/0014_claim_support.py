"""claim support: how a batch request's citations are checked

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04

Every citation of an answer now carries its ``support`` (inside the answer's ``segments``, which
are JSON: no column). A batch request keeps the ``support`` its question asked for, so that its
answer, stored when the batch ends, is checked as asked.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "answer_batch_requests", sa.Column("support", sa.String(length=16), nullable=True)
    )


def downgrade() -> None:
    with op.batch_alter_table("answer_batch_requests") as batch:
        batch.drop_column("support")
