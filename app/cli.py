"""``citegate serve | migrate``."""

from __future__ import annotations

import logging
from typing import Annotated

import typer
import uvicorn

from app.db.migrations import upgrade_to_head
from app.main import create_app
from app.settings import Settings

cli = typer.Typer(help="Citegate: cited answers over your documents.", no_args_is_help=True)


def _configure_logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )


@cli.command()
def migrate() -> None:
    """Bring the database schema to the newest revision."""
    settings = Settings()
    _configure_logging(settings)
    upgrade_to_head(settings.database_url)


@cli.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    proxy_headers: Annotated[
        bool, typer.Option(help="Trust X-Forwarded-* headers (behind a proxy).")
    ] = False,
) -> None:
    """Apply the migrations, then serve the API."""
    settings = Settings()
    _configure_logging(settings)
    upgrade_to_head(settings.database_url)
    uvicorn.run(
        create_app(settings),
        host=host,
        port=port,
        proxy_headers=proxy_headers,
        log_config=None,
    )


def main() -> None:
    cli()
