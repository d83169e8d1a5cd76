"""documents and their index

Revision ID: 0001
Revises:
Create Date: 2026-11-29

Tenants (with the default tenant), documents, their original bytes and their chunk index.
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tenants")),
        sa.UniqueConstraint("name", name=op.f("uq_tenants_name")),
    )
    op.bulk_insert(
        sa.table(
            "tenants",
            sa.column("id", sa.String),
            sa.column("name", sa.String),
            sa.column("created_at", sa.DateTime(timezone=True)),
        ),
        [{"id": "ten_default", "name": "default", "created_at": datetime(2026, 1, 1, tzinfo=UTC)}],
    )
    op.create_table(
        "documents",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant_id", sa.String(length=40), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("media_type", sa.String(length=100), nullable=False),
        sa.Column("title", sa.String(length=500), nullable=True),
        sa.Column("context", sa.Text(), nullable=True),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("filename", sa.String(length=255), nullable=True),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("page_count", sa.Integer(), nullable=True),
        sa.Column("char_count", sa.Integer(), nullable=False),
        sa.Column("chunk_count", sa.Integer(), nullable=False),
        sa.Column("citable", sa.Boolean(), nullable=False),
        sa.Column("warnings", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_documents_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_documents")),
        sa.UniqueConstraint(
            "tenant_id", "kind", "sha256", name=op.f("uq_documents_tenant_id_kind_sha256")
        ),
    )
    with op.batch_alter_table("documents", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_documents_tenant_id"), ["tenant_id"], unique=False)

    op.create_table(
        "document_blobs",
        sa.Column("document_id", sa.String(length=40), nullable=False),
        sa.Column("tenant_id", sa.String(length=40), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["document_id"],
            ["documents.id"],
            name=op.f("fk_document_blobs_document_id_documents"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_document_blobs_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("document_id", name=op.f("pk_document_blobs")),
    )
    with op.batch_alter_table("document_blobs", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_document_blobs_tenant_id"), ["tenant_id"], unique=False
        )

    op.create_table(
        "document_chunks",
        sa.Column("document_id", sa.String(length=40), nullable=False),
        sa.Column("chunk_index", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("tenant_id", sa.String(length=40), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("start_char", sa.Integer(), nullable=False),
        sa.Column("end_char", sa.Integer(), nullable=False),
        sa.Column("page_number", sa.Integer(), nullable=True),
        sa.Column("block_index", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["document_id"],
            ["documents.id"],
            name=op.f("fk_document_chunks_document_id_documents"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_document_chunks_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("document_id", "chunk_index", name=op.f("pk_document_chunks")),
    )
    with op.batch_alter_table("document_chunks", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_document_chunks_tenant_id"), ["tenant_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("document_chunks", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_document_chunks_tenant_id"))

    op.drop_table("document_chunks")
    with op.batch_alter_table("document_blobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_document_blobs_tenant_id"))

    op.drop_table("document_blobs")
    with op.batch_alter_table("documents", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_documents_tenant_id"))

    op.drop_table("documents")
    op.drop_table("tenants")
