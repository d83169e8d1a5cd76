"""answers: a stream's row from its start, owned by the process relaying it

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03

A streamed answer is inserted `in_progress` when it begins, naming the process that relays it
(`stream_owner`), and finished when it ends. `service_processes` holds each running process and
when it was last seen, so that the streams of one that died can be told from those of one that
lives, and marked `interrupted`. They are found through an index of only the rows in progress:
a handful, whatever the table's size.

On PostgreSQL the index is built CONCURRENTLY, so that answers go on being stored while a large
table is read for it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

IN_PROGRESS = sa.text("status = 'in_progress'")


def upgrade() -> None:
    op.add_column("answers", sa.Column("stream_owner", sa.String(length=40), nullable=True))
    op.create_table(
        "service_processes",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_service_processes")),
    )
    with op.get_context().autocommit_block():  # CONCURRENTLY runs outside a transaction
        op.create_index(
            "ix_answers_in_progress",
            "answers",
            ["stream_owner"],
            sqlite_where=IN_PROGRESS,
            postgresql_where=IN_PROGRESS,
            postgresql_concurrently=True,
        )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.drop_index("ix_answers_in_progress", table_name="answers", postgresql_concurrently=True)
    op.drop_table("service_processes")
    op.drop_column("answers", "stream_owner")
