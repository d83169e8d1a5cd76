"""search statistics per tenant: its number of chunks and a generation of its index

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07

A search ranks a chunk by how rare the query's words it holds are among the searching tenant's
own chunks (app.search.terms.rarity): that needs the tenant's number of chunks, and how many of
them match each word. ``search_statistics`` keeps the first (the sum over the tenant's rows:
one a shard on PostgreSQL, see below), and a ``generation`` that changes whenever the tenant's
chunks do (from a random start): each process caches the words' counts under (tenant,
generation) and counts them again only after a change.

Both are kept by triggers on ``document_chunks``, in the transaction that writes or deletes the
chunks, whatever writes them (the service, COPY, a script): PostgreSQL once a statement, from
its transition tables; SQLite once a row (it has no statement triggers).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A tenant's generation starts at a random number, not 1: a database made again under the same
# name (a restore, a test's fresh database) never repeats a generation a process has cached.
_FILL = {
    "postgresql": """
        INSERT INTO search_statistics (tenant_id, shard, chunk_count, generation)
        SELECT tenant_id, 0, count(*), floor(random() * 1e15)::bigint + 1
        FROM document_chunks GROUP BY tenant_id
    """,
    "sqlite": """
        INSERT INTO search_statistics (tenant_id, shard, chunk_count, generation)
        SELECT tenant_id, 0, count(*), abs(random() % 1000000000000000) + 1
        FROM document_chunks GROUP BY tenant_id
    """,
}

# PostgreSQL: a tenant's statistics are the sums of its rows, one a shard, and a transaction
# writes the shard of its connection's server process (its pid modulo 64). The row a
# transaction writing chunks updates stays locked until it commits: with one row a tenant, two
# uploads of the tenant could not write their chunks at the same time. Each change adds at
# least 1 to one shard's generation, so the sum of a tenant's generations changes with each.
_POSTGRES_UP = [
    """
    CREATE FUNCTION search_statistics_count() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        this_shard integer := pg_backend_pid() % 64;
    BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO search_statistics AS s (tenant_id, shard, chunk_count, generation)
            SELECT tenant_id, this_shard, count(*), floor(random() * 1e15)::bigint + 1
            FROM new_rows GROUP BY tenant_id
            ON CONFLICT (tenant_id, shard) DO UPDATE
            SET chunk_count = s.chunk_count + excluded.chunk_count,
                generation = s.generation + 1;
        ELSE
            INSERT INTO search_statistics AS s (tenant_id, shard, chunk_count, generation)
            SELECT tenant_id, this_shard, -count(*), floor(random() * 1e15)::bigint + 1
            FROM old_rows GROUP BY tenant_id
            ON CONFLICT (tenant_id, shard) DO UPDATE
            SET chunk_count = s.chunk_count + excluded.chunk_count,
                generation = s.generation + 1;
        END IF;
        IF TG_OP = 'UPDATE' THEN
            INSERT INTO search_statistics AS s (tenant_id, shard, chunk_count, generation)
            SELECT tenant_id, this_shard, count(*), floor(random() * 1e15)::bigint + 1
            FROM new_rows GROUP BY tenant_id
            ON CONFLICT (tenant_id, shard) DO UPDATE
            SET chunk_count = s.chunk_count + excluded.chunk_count,
                generation = s.generation + 1;
        END IF;
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER document_chunks_statistics_insert AFTER INSERT ON document_chunks
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION search_statistics_count()
    """,
    """
    CREATE TRIGGER document_chunks_statistics_update AFTER UPDATE ON document_chunks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION search_statistics_count()
    """,
    """
    CREATE TRIGGER document_chunks_statistics_delete AFTER DELETE ON document_chunks
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION search_statistics_count()
    """,
]
_POSTGRES_DOWN = [
    "DROP TRIGGER document_chunks_statistics_delete ON document_chunks",
    "DROP TRIGGER document_chunks_statistics_update ON document_chunks",
    "DROP TRIGGER document_chunks_statistics_insert ON document_chunks",
    "DROP FUNCTION search_statistics_count()",
]

# SQLite: one writer at a time anyway, so one row a tenant (shard 0), kept once a row.
_SQLITE_ADD = """
        INSERT INTO search_statistics (tenant_id, shard, chunk_count, generation)
        VALUES (new.tenant_id, 0, 1, abs(random() % 1000000000000000) + 1)
        ON CONFLICT (tenant_id, shard) DO UPDATE
        SET chunk_count = chunk_count + 1, generation = generation + 1;"""
_SQLITE_REMOVE = """
        UPDATE search_statistics SET chunk_count = chunk_count - 1, generation = generation + 1
        WHERE tenant_id = old.tenant_id AND shard = 0;"""
_SQLITE_UP = [
    f"CREATE TRIGGER document_chunks_statistics_insert AFTER INSERT ON document_chunks BEGIN"
    f"{_SQLITE_ADD}\n    END",
    f"CREATE TRIGGER document_chunks_statistics_update AFTER UPDATE ON document_chunks BEGIN"
    f"{_SQLITE_REMOVE}{_SQLITE_ADD}\n    END",
    f"CREATE TRIGGER document_chunks_statistics_delete AFTER DELETE ON document_chunks BEGIN"
    f"{_SQLITE_REMOVE}\n    END",
]
_SQLITE_DOWN = [
    "DROP TRIGGER document_chunks_statistics_delete",
    "DROP TRIGGER document_chunks_statistics_update",
    "DROP TRIGGER document_chunks_statistics_insert",
]


def upgrade() -> None:
    op.create_table(
        "search_statistics",
        sa.Column("tenant_id", sa.String(length=40), nullable=False),
        sa.Column("shard", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("chunk_count", sa.BigInteger(), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "shard", name=op.f("pk_search_statistics")),
    )
    postgres = op.get_bind().dialect.name == "postgresql"
    op.execute(_FILL["postgresql" if postgres else "sqlite"])
    for statement in _POSTGRES_UP if postgres else _SQLITE_UP:
        op.execute(statement)


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for statement in _POSTGRES_DOWN if postgres else _SQLITE_DOWN:
        op.execute(statement)
    op.drop_table("search_statistics")
