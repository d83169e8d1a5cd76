"""the chunks' search index leads with the tenant (PostgreSQL)

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04

A search counts how many of the tenant's own chunks match each word of its query (which words
are ranked by, app.search.terms.affordable_terms), and ranks only the tenant's chunks. With the
GIN index on the ``tsvector`` alone, both read the rows of every tenant holding the word and
drop the others' afterwards: a small tenant paid for a large tenant's words, in time that told
it about them. A GIN index on ``(tenant_id, search_vector)`` (``btree_gin`` gives the tenant a
GIN operator class; a trusted extension, which a database owner may create) finds only the
tenant's rows. It replaces the old index under the same name: one index to write, as before.
SQLite is unchanged (FTS5 cannot lead with a column of another table).
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
    op.execute("DROP INDEX ix_document_chunks_search_vector")
    op.execute(
        "CREATE INDEX ix_document_chunks_search_vector ON document_chunks "
        "USING gin (tenant_id, search_vector)"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP INDEX ix_document_chunks_search_vector")
    op.execute(
        "CREATE INDEX ix_document_chunks_search_vector ON document_chunks USING gin (search_vector)"
    )
