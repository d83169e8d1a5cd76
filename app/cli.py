"""``citegate serve | migrate | local-engine | eval | keys create|list|revoke``."""

from __future__ import annotations

import enum
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer
import uvicorn
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth import keys as api_keys
from app.auth.budgets import usd_text
from app.auth.scopes import TENANT_SCOPES, Scope
from app.db.engine import run_in_session
from app.db.migrations import at_head, upgrade_to_head
from app.errors import NotFound
from app.http_protocol import HeaderTimeoutProtocol
from app.main import create_app
from app.observability import MULTIPROCESS_DIR, configure_logging
from app.settings import Settings

cli = typer.Typer(help="Citegate: cited answers over your documents.", no_args_is_help=True)
keys_cli = typer.Typer(help="API keys: one tenant each.", no_args_is_help=True)
cli.add_typer(keys_cli, name="keys")
T = TypeVar("T")
log = logging.getLogger(__name__)


class SupportChoice(enum.StrEnum):
    lexical = "lexical"
    judge = "judge"


@cli.command()
def migrate() -> None:
    """Bring the database schema to the newest revision."""
    settings = Settings()
    configure_logging(settings.log_level)
    upgrade_to_head(settings.database_url)


@cli.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    proxy_headers: Annotated[
        bool, typer.Option(help="Trust X-Forwarded-* headers (behind a proxy).")
    ] = False,
    forwarded_allow_ips: Annotated[
        str | None,
        typer.Option(
            help="With --proxy-headers: comma-separated addresses or networks whose "
            "X-Forwarded-* headers are trusted, * for any. Default: $FORWARDED_ALLOW_IPS, "
            "else 127.0.0.1,::1 (uvicorn's).",
            show_default=False,
        ),
    ] = None,
    graceful_timeout: Annotated[
        int,
        typer.Option(
            min=0,
            help="On SIGTERM: stop accepting connections, let requests and streams in flight "
            "finish for at most this many seconds, cancel the rest, then exit 0.",
        ),
    ] = 30,
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            help="Worker processes sharing the port. With more than one, /metrics adds up all "
            "workers' figures, and rate limits count per worker unless CITEGATE_REDIS_URL is set.",
        ),
    ] = 1,
) -> None:
    """Apply the migrations, then serve the API."""
    import signal

    from sse_starlette.sse import AppStatus

    # sse-starlette ends every stream as soon as SIGTERM arrives; let them finish instead, like
    # any request in flight, within uvicorn's graceful timeout.
    AppStatus.disable_automatic_graceful_drain()  # type: ignore[no-untyped-call]

    def exit_cleanly(signum: int, frame: object) -> None:
        # uvicorn handles SIGTERM while it serves, then raises it again once it has shut down
        # gracefully; end with status 0 then (and on a SIGTERM before serving).
        raise SystemExit(0)

    previous = signal.signal(signal.SIGTERM, exit_cleanly)
    metrics_dir = None
    try:
        settings = Settings()
        configure_logging(settings.log_level)
        if at_head(settings.database_url):
            log.info("the database is at the newest migration: none to apply")
        else:
            # In a process of its own (app/db/migrations.py says why); its failure is ours.
            migrated = subprocess.run([sys.executable, "-m", "app.db.migrations"], check=False)
            if migrated.returncode != 0:
                raise SystemExit(migrated.returncode)
        if workers > 1:
            metrics_dir = _prepare_workers(settings)
        app = None
        if workers == 1:
            app = create_app(settings, own_process=True)
        uvicorn.run(
            app or "app.main:create_worker_app",
            factory=workers > 1,  # each worker builds its own app from the same environment
            workers=workers,
            # A worker answers the supervisor's pings only between imports: on a loaded machine
            # starting one takes longer than uvicorn's 5 s, and it would be restarted forever.
            timeout_worker_healthcheck=60,
            host=host,
            port=port,
            http=HeaderTimeoutProtocol,  # uvicorn's httptools protocol, with a header timeout
            proxy_headers=proxy_headers,
            forwarded_allow_ips=forwarded_allow_ips,
            timeout_graceful_shutdown=graceful_timeout,
            log_config=None,
            access_log=False,  # the app logs each request itself, as one JSON line
        )
    finally:
        signal.signal(signal.SIGTERM, previous)
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _prepare_workers(settings: Settings) -> str | None:
    """Workers are separate processes: their metrics meet in a directory that /metrics reads,
    and they sign list cursors with one secret (each reads its settings from the environment,
    where an unset secret would be a random one of its own, refusing the others' cursors).
    Returns the directory when it was made here (to remove at exit)."""
    os.environ.setdefault("CITEGATE_CURSOR_SECRET", settings.cursor_secret.get_secret_value())
    made = None
    if not os.environ.get(MULTIPROCESS_DIR):
        made = os.environ[MULTIPROCESS_DIR] = tempfile.mkdtemp(prefix="citegate-metrics-")
    if settings.rate_limit_per_minute and settings.redis_url is None:
        logging.getLogger(__name__).warning(
            "several workers and no CITEGATE_REDIS_URL: each worker counts rate limits alone"
        )
    return made


@cli.command("local-engine")
def local_engine(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8001,
) -> None:
    """Serve the embedded local engine alone: a Messages API for tests and other tools."""
    from app.local_engine import serve as serve_local_engine

    serve_local_engine(host, port)


@cli.command("eval")
def evaluate(
    questions: Annotated[
        Path,
        typer.Argument(
            help="A JSONL question set: one {question, document_ids | collection_id | files, "
            "expected: {answer_contains, cites}} a line; files relative to its folder.",
            exists=True,
            dir_okay=False,
        ),
    ],
    url: Annotated[
        str | None,
        typer.Option(
            help="A running Citegate to ask (its base URL). Default: one served in this process "
            "with a temporary SQLite database and the local engine.",
            show_default=False,
        ),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="CITEGATE_API_KEY",
            help="With --url: the API key to ask with.",
            show_default=False,
        ),
    ] = None,
    support: Annotated[
        SupportChoice, typer.Option(help="How each citation's support is checked.")
    ] = SupportChoice.lexical,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object (with every result).")
    ] = False,
) -> None:
    """Answer a question set and report accuracy, citation precision and recall (by support
    verdict), the verified rate, latency and tokens."""
    from app.evaluation import command as evaluation

    evaluation.run(questions, url=url, api_key=api_key, support=support.value, as_json=as_json)


def _with_session(work: Callable[[AsyncSession], Awaitable[T]]) -> T:
    """Run ``work`` with a session on the configured database, migrated to the newest schema."""
    settings = Settings()
    upgrade_to_head(settings.database_url)
    return run_in_session(settings.database_url, work)


@keys_cli.command("create")
def create_key(
    tenant: Annotated[str, typer.Option(help="The tenant's name; created if new.")],
    scope: Annotated[
        list[Scope] | None,
        typer.Option(
            help="A scope of the key (repeat for more). Default: read, write and admin over "
            "its tenant; `operator` administers every tenant.",
            show_default=False,
        ),
    ] = None,
    name: Annotated[str | None, typer.Option(help="A name to tell the key by.")] = None,
) -> None:
    """Make a key for a tenant. The key is shown once: store it now."""
    scopes = frozenset(scope) if scope else TENANT_SCOPES
    row, key = _with_session(
        lambda session: api_keys.create_key(session, tenant, scopes=scopes, name=name)
    )
    typer.echo(
        f"id: {row.id}\ntenant: {tenant}\nprefix: {row.prefix}\n"
        f"scopes: {' '.join(row.scopes)}\nkey: {key}"
    )
    typer.echo("Store the key now: only its hash is kept.", err=True)


@keys_cli.command("list")
def list_keys() -> None:
    """Every key: id, tenant, prefix, created, status, scopes, budget, revoked."""
    for row, tenant in _with_session(api_keys.list_keys):
        revoked = row.revoked_at.isoformat() if row.revoked_at else "-"
        budget = "-"
        if row.budget_nano_usd is not None:
            budget = f"{usd_text(row.budget_nano_usd)} USD/{row.budget_period}"
        typer.echo(
            f"{row.id}  {tenant}  {row.prefix}…  {row.created_at.isoformat()}  {row.status}  "
            f"{','.join(row.scopes)}  {budget}  {revoked}"
        )


@keys_cli.command("revoke")
def revoke_key(key_id: Annotated[str, typer.Argument(help="The key's id (key_…).")]) -> None:
    """Revoke a key: it stops working at once."""
    try:
        row = _with_session(lambda session: api_keys.revoke_key(session, key_id))
    except NotFound as exc:
        typer.echo(exc.detail, err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"revoked {row.id}")


def main() -> None:
    cli()
