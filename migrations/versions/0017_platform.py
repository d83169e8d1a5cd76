"""platform: keys with names, scopes, status, expiry and rotation; the key version; audit events

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-04

Keys are managed over HTTP (``/v1/admin/...``). A key gets a ``name``, its ``scopes`` (a JSON
list of ``read``, ``write``, ``admin``, ``operator``), a ``status`` (``active`` or
``disabled``), an optional ``expires_at`` and, after a rotation, the previous secret's hash
(``previous_hash``) that keeps working until ``previous_until``. Keys made before this
revision keep working with every scope over their own tenant: ``read``, ``write``, ``admin``.

``auth_version`` holds one row whose ``version`` every change of a key bumps in the change's own
transaction: each process compares it with the version its cache of keys was read at, so that a
disabled, revoked or rotated-out key is refused on its next request by every process.

``audit_events``: one row per admin action (who, what, when, from where); never a secret.

``answers.api_key_id``: the key that asked, so that usage and cost reports, which are read from
the stored answers (their totals are the answers' usage exactly), group by key.
``usage_records``: the usage of upstream calls that store no answer (the support judge).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

EXISTING_SCOPES = '["read", "write", "admin"]'


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("name", sa.String(length=200), nullable=True))
        batch.add_column(
            sa.Column(
                "scopes", sa.JSON(), nullable=False, server_default=sa.text(f"'{EXISTING_SCOPES}'")
            )
        )
        batch.add_column(
            sa.Column(
                "status", sa.String(length=16), nullable=False, server_default=sa.text("'active'")
            )
        )
        batch.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("previous_hash", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("previous_until", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True))
        batch.create_unique_constraint("uq_api_keys_previous_hash", ["previous_hash"])
    with op.batch_alter_table("answers") as batch:
        batch.add_column(sa.Column("api_key_id", sa.String(length=40), nullable=True))
    op.create_table(
        "auth_version",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_auth_version")),
    )
    op.execute("INSERT INTO auth_version (id, version) VALUES (1, 1)")
    op.create_table(
        "usage_records",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant_id", sa.String(length=40), nullable=False),
        sa.Column("api_key_id", sa.String(length=40), nullable=True),
        sa.Column("source", sa.String(length=32), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("usage", sa.JSON(), nullable=False),
        sa.Column("batch", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_usage_records")),
    )
    op.create_index("ix_usage_records_tenant_id", "usage_records", ["tenant_id"])
    op.create_index("ix_usage_records_created_at", "usage_records", ["created_at"])
    op.create_table(
        "audit_events",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant_id", sa.String(length=40), nullable=True),
        sa.Column("actor_key_id", sa.String(length=40), nullable=True),
        sa.Column("actor_tenant_id", sa.String(length=40), nullable=True),
        sa.Column("via", sa.String(length=16), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("target_type", sa.String(length=32), nullable=False),
        sa.Column("target_id", sa.String(length=40), nullable=False),
        sa.Column("client_address", sa.String(length=64), nullable=True),
        sa.Column("request_id", sa.String(length=64), nullable=True),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_events")),
    )
    op.create_index("ix_audit_events_tenant_id", "audit_events", ["tenant_id"])


def downgrade() -> None:
    op.drop_index("ix_audit_events_tenant_id", table_name="audit_events")
    op.drop_table("audit_events")
    op.drop_index("ix_usage_records_created_at", table_name="usage_records")
    op.drop_index("ix_usage_records_tenant_id", table_name="usage_records")
    op.drop_table("usage_records")
    op.drop_table("auth_version")
    with op.batch_alter_table("answers") as batch:
        batch.drop_column("api_key_id")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_constraint("uq_api_keys_previous_hash", type_="unique")
        for column in (
            "updated_at",
            "previous_until",
            "previous_hash",
            "expires_at",
            "status",
            "scopes",
            "name",
        ):
            batch.drop_column(column)
