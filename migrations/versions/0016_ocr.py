"""reading every page: how each PDF page was read, documents processed in the background

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04

``document_pages`` says how each page of a PDF was read (its text layer, OCR, or nothing), with
an OCR'd page's text, confidence and word boxes. A document whose pages need OCR is stored at
once with ``status`` ``processing`` and an ``ocr_jobs`` row that the process reading it leases,
so another process takes it over when that one dies; ``pages_done`` counts its pages read, and
``error_code`` / ``error_detail`` say why it ``failed``.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("documents", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("status", sa.String(length=16), server_default="ready", nullable=False)
        )
        batch_op.add_column(sa.Column("pages_done", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("error_code", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("error_detail", sa.Text(), nullable=True))
    op.create_table(
        "document_pages",
        sa.Column("document_id", sa.String(length=40), nullable=False),
        sa.Column("page_number", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("tenant_id", sa.String(length=40), nullable=False),
        sa.Column("start_char", sa.Integer(), nullable=False),
        sa.Column("char_count", sa.Integer(), nullable=False),
        sa.Column("text_source", sa.String(length=16), nullable=False),
        sa.Column("ocr_confidence", sa.Float(), nullable=True),
        sa.Column("warnings", sa.JSON(), nullable=False),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("words", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(
            ["document_id"],
            ["documents.id"],
            name=op.f("fk_document_pages_document_id_documents"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_document_pages_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("document_id", "page_number", name=op.f("pk_document_pages")),
    )
    op.create_table(
        "ocr_jobs",
        sa.Column("document_id", sa.String(length=40), nullable=False),
        sa.Column("tenant_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("languages", sa.String(length=200), nullable=False),
        sa.Column("lease_owner", sa.String(length=64), nullable=True),
        sa.Column("lease_until", sa.Float(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["document_id"],
            ["documents.id"],
            name=op.f("fk_ocr_jobs_document_id_documents"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_ocr_jobs_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("document_id", name=op.f("pk_ocr_jobs")),
    )
    op.create_index(op.f("ix_ocr_jobs_created_at"), "ocr_jobs", ["created_at"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_ocr_jobs_created_at"), table_name="ocr_jobs")
    op.drop_table("ocr_jobs")
    op.drop_table("document_pages")
    with op.batch_alter_table("documents", schema=None) as batch_op:
        batch_op.drop_column("error_detail")
        batch_op.drop_column("error_code")
        batch_op.drop_column("pages_done")
        batch_op.drop_column("status")
