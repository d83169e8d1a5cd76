"""Run the Alembic migrations from code (``citegate migrate``, ``citegate serve``, tests).

``python -m app.db.migrations`` migrates the configured database: ``citegate serve`` runs it in
a process of its own, so that Alembic and Mako are never loaded in a serving process, and only
when the database is not at the newest revision already (``at_head``: the revisions named in the
migration files against the database's ``alembic_version``, read without Alembic), so that a
restart starts in the time its imports take.
"""

from __future__ import annotations

import asyncio
import re
from importlib.resources import files
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from alembic.config import Config

# ``revision: str = "0017"`` and ``down_revision: str | None = "0016"`` in a migration file.
_REVISION = re.compile(
    r"""^(revision|down_revision)\s*(?::[^=\n]*)?=\s*["']([^"'\n]+)["']""", re.MULTILINE
)


def alembic_config(database_url: str) -> Config:
    """An Alembic config for the packaged ``migrations`` folder and the given database."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(files("migrations")))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade_to_head(database_url: str) -> None:
    """Bring the schema to the newest revision. Call it with no event loop running."""
    from alembic import command

    command.upgrade(alembic_config(database_url), "head")


def head_revisions() -> frozenset[str]:
    """The newest revisions of the packaged migrations (one unless they branch): those no
    migration names as its ``down_revision``. Read from the files' text, without Alembic."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in files("migrations").joinpath("versions").iterdir():
        if not path.name.endswith(".py"):
            continue
        for name, value in _REVISION.findall(path.read_text(encoding="utf-8")):
            (revisions if name == "revision" else parents).add(value)
    return frozenset(revisions - parents)


async def database_revisions(database_url: str) -> frozenset[str] | None:
    """The revisions the database's ``alembic_version`` holds; None when it cannot be read (no
    such table: a new database, or one that cannot be reached: the migrations will say)."""
    from sqlalchemy import text
    from sqlalchemy.pool import NullPool

    from app.db.engine import create_engine

    engine = create_engine(database_url, poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            rows = await connection.execute(text("SELECT version_num FROM alembic_version"))
            return frozenset(row[0] for row in rows)
    except Exception:  # whatever it is, the migration process meets it again and says it
        return None
    finally:
        await engine.dispose()


def at_head(database_url: str) -> bool:
    """Whether the database is at the packaged migrations' newest revision (nothing to apply).
    Call it with no event loop running."""
    return asyncio.run(database_revisions(database_url)) == head_revisions()


def main() -> None:
    from app.observability import configure_logging
    from app.settings import Settings

    settings = Settings()
    configure_logging(settings.log_level)
    upgrade_to_head(settings.database_url)


if __name__ == "__main__":
    main()
