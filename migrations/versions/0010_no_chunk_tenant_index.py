"""no index on the chunks' tenant

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01

Every search that reads chunks finds them by the search index and the documents in scope (the
primary key), and filters by tenant on the rows found; the index on the chunks' tenant was never
read, and cost a tenth of storing a 100,000-chunk document on PostgreSQL.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_index("ix_document_chunks_tenant_id", table_name="document_chunks")


def downgrade() -> None:
    op.create_index("ix_document_chunks_tenant_id", "document_chunks", ["tenant_id"])
