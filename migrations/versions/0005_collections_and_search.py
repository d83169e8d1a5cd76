"""collections and search

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

Collections of documents, and the full-text index of the chunks (see app.search.index): on
SQLite an FTS5 table kept by triggers, on PostgreSQL a generated tsvector column with a GIN
index. Chunks stored before this revision are indexed here.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from app.search.terms import indexed_text

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BATCH = 5000

# SQLite: FTS5 keeps only the index (content=''), keyed by the chunk's rowid. A contentless table
# forgets a row when told the row's indexed text, which the delete trigger gives it. New chunks
# are indexed by the statement that app.search.index.index_document runs after storing them,
# not by an insert trigger: FTS5 writes what it holds at the end of each statement, and chunks
# are inserted one statement a row.
_SQLITE_UP = [
    """CREATE VIRTUAL TABLE chunk_search USING fts5(
        terms, content='', tokenize='porter unicode61 remove_diacritics 2')""",
    """CREATE TRIGGER document_chunks_search_delete AFTER DELETE ON document_chunks BEGIN
        INSERT INTO chunk_search(chunk_search, rowid, terms)
        VALUES ('delete', old.rowid, coalesce(old.search_text, old.text));
    END""",
    """CREATE TRIGGER document_chunks_search_update AFTER UPDATE ON document_chunks BEGIN
        INSERT INTO chunk_search(chunk_search, rowid, terms)
        VALUES ('delete', old.rowid, coalesce(old.search_text, old.text));
        INSERT INTO chunk_search(rowid, terms) VALUES (new.rowid, coalesce(new.search_text, new.text));
    END""",
    """INSERT INTO chunk_search(rowid, terms)
        SELECT rowid, coalesce(search_text, text) FROM document_chunks""",
]
_SQLITE_DOWN = [
    "DROP TRIGGER document_chunks_search_update",
    "DROP TRIGGER document_chunks_search_delete",
    "DROP TABLE chunk_search",
]
_POSTGRES_UP = [
    """ALTER TABLE document_chunks ADD COLUMN search_vector tsvector GENERATED ALWAYS AS
        (to_tsvector('english'::regconfig, coalesce(search_text, text))) STORED""",
    """CREATE INDEX ix_document_chunks_search_vector ON document_chunks
        USING gin (search_vector)""",
]
_POSTGRES_DOWN = [
    "DROP INDEX ix_document_chunks_search_vector",
    "ALTER TABLE document_chunks DROP COLUMN search_vector",
]


def upgrade() -> None:
    op.create_table(
        "collections",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant_id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_collections_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_collections")),
    )
    with op.batch_alter_table("collections", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_collections_tenant_id"), ["tenant_id"], unique=False)

    op.create_table(
        "collection_documents",
        sa.Column("collection_id", sa.String(length=40), nullable=False),
        sa.Column("document_id", sa.String(length=40), nullable=False),
        sa.Column("tenant_id", sa.String(length=40), nullable=False),
        sa.Column("added_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["collection_id"],
            ["collections.id"],
            name=op.f("fk_collection_documents_collection_id_collections"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["document_id"],
            ["documents.id"],
            name=op.f("fk_collection_documents_document_id_documents"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_collection_documents_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint(
            "collection_id", "document_id", name=op.f("pk_collection_documents")
        ),
    )
    with op.batch_alter_table("collection_documents", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_collection_documents_document_id"), ["document_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_collection_documents_tenant_id"), ["tenant_id"], unique=False
        )

    # A plain ADD COLUMN on SQLite too: rebuilding the table would renumber the rowids.
    op.add_column("document_chunks", sa.Column("search_text", sa.Text(), nullable=True))
    _backfill_search_text()
    dialect = op.get_bind().dialect.name
    for statement in _POSTGRES_UP if dialect == "postgresql" else _SQLITE_UP:
        op.execute(statement)


def _backfill_search_text() -> None:
    """search_text for the chunks already stored that need it (Chinese or Japanese)."""
    connection = op.get_bind()
    chunks = sa.table(
        "document_chunks",
        sa.column("document_id", sa.String),
        sa.column("chunk_index", sa.Integer),
        sa.column("text", sa.Text),
        sa.column("search_text", sa.Text),
    )
    order = (chunks.c.document_id, chunks.c.chunk_index)
    after: tuple[str, int] | None = None
    while True:
        query = sa.select(chunks.c.document_id, chunks.c.chunk_index, chunks.c.text)
        if after is not None:
            query = query.where(sa.tuple_(*order) > sa.tuple_(*after))
        rows = connection.execute(query.order_by(*order).limit(_BATCH)).all()
        if not rows:
            return
        updates = [
            {"d": document_id, "i": index, "s": search_text}
            for document_id, index, text in rows
            if (search_text := indexed_text(text)) is not None
        ]
        if updates:
            connection.execute(
                chunks.update()
                .where(
                    chunks.c.document_id == sa.bindparam("d"),
                    chunks.c.chunk_index == sa.bindparam("i"),
                )
                .values(search_text=sa.bindparam("s")),
                updates,
            )
        after = (rows[-1][0], rows[-1][1])


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    for statement in _POSTGRES_DOWN if dialect == "postgresql" else _SQLITE_DOWN:
        op.execute(statement)
    with op.batch_alter_table("document_chunks", schema=None) as batch_op:
        batch_op.drop_column("search_text")

    with op.batch_alter_table("collection_documents", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_collection_documents_tenant_id"))
        batch_op.drop_index(batch_op.f("ix_collection_documents_document_id"))

    op.drop_table("collection_documents")
    with op.batch_alter_table("collections", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_collections_tenant_id"))

    op.drop_table("collections")
