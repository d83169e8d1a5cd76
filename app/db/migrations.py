"""Run the Alembic migrations from code (``citegate migrate``, ``citegate serve``, tests).

``python -m app.db.migrations`` migrates the configured database: ``citegate serve`` runs it in
a process of its own, so that Alembic and Mako are never loaded in a serving process.
"""

from __future__ import annotations

from importlib.resources import files
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from alembic.config import Config


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


def main() -> None:
    from app.observability import configure_logging
    from app.settings import Settings

    settings = Settings()
    configure_logging(settings.log_level)
    upgrade_to_head(settings.database_url)


if __name__ == "__main__":
    main()
