"""Run the Alembic migrations from code (``citegate migrate``, ``citegate serve``, tests)."""

from __future__ import annotations

from importlib.resources import files

from alembic import command
from alembic.config import Config


def alembic_config(database_url: str) -> Config:
    """An Alembic config for the packaged ``migrations`` folder and the given database."""
    config = Config()
    config.set_main_option("script_location", str(files("migrations")))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade_to_head(database_url: str) -> None:
    """Bring the schema to the newest revision. Call it with no event loop running."""
    command.upgrade(alembic_config(database_url), "head")
