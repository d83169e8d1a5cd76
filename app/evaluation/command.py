"""``citegate eval``: load the set, ask it with a progress bar on stderr, print the figures as a
table on stdout (or one JSON object with ``--json``). Exit 2 for a set that cannot be read (the
message names the line), 1 when the service cannot be asked at all."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from app.evaluation.questions import Question, QuestionFileError, load_questions
from app.evaluation.runner import (
    EvaluationError,
    evaluate,
    in_process_database,
    in_process_folder,
    in_process_service,
)
from app.evaluation.scoring import Result, summarize
from app.observability import configure_logging


def run(
    questions_file: Path, *, url: str | None, api_key: str | None, support: str, as_json: bool
) -> None:
    """The command's work (``app.cli`` declares its options)."""
    try:
        questions = load_questions(questions_file)
    except QuestionFileError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    try:
        results = _ask(questions, url=url, api_key=api_key, support=support)
    except EvaluationError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    summary = summarize(results, support=support)
    if as_json:
        sys.stdout.write(json.dumps(summary, ensure_ascii=False) + "\n")
    else:
        console = Console()
        console.print(figures_table(summary, results))
        wrong = [r for r in results if not r.correct or not r.cites_found]
        if wrong:
            console.print(wrong_table(wrong))


def _ask(
    questions: Sequence[Question], *, url: str | None, api_key: str | None, support: str
) -> list[Result]:
    files = {path for question in questions for path in question.files}
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    )
    with progress:
        uploading = progress.add_task("Uploading", total=len(files), visible=bool(files))
        answering = progress.add_task("Answering", total=len(questions))

        async def ask(base_url: str, key: str | None) -> list[Result]:
            return await evaluate(
                questions,
                base_url=base_url,
                api_key=key,
                support=support,
                uploaded=lambda: progress.advance(uploading),
                answered=lambda result: progress.advance(answering),
            )

        if url is not None:
            return asyncio.run(ask(url, api_key))

        async def in_process(database_url: str) -> list[Result]:
            async with in_process_service(database_url) as base_url:
                return await ask(base_url, None)

        # The served app's notices (no key, the local engine answers) are said here instead.
        configure_logging("ERROR")
        with in_process_folder() as folder:
            return asyncio.run(in_process(in_process_database(Path(folder))))


def _share(value: float | None, part: int | None = None, whole: int | None = None) -> str:
    if value is None:
        return "-"
    counts = f"{part}/{whole}, " if part is not None else ""
    return f"{counts}{value * 100:.1f}%" if counts else f"{value * 100:.1f}%"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def figures_table(summary: dict[str, Any], results: Sequence[Result]) -> Table:
    """The set's figures, with the counts behind each ratio."""
    citations = sum(r.citations for r in results)
    with_cites = [r for r in results if r.cites]
    tokens = summary["tokens"]
    table = Table(title=f"{summary['questions']} questions, support: {summary['support']}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = [
        ("accuracy", _share(summary["accuracy"], sum(r.correct for r in results), len(results))),
        (
            "citation precision",
            _share(summary["citation_precision"], sum(r.supported for r in results), citations),
        ),
        (
            "citation recall",
            _share(
                summary["citation_recall"],
                sum(r.supported_segments for r in results),
                sum(r.claim_segments for r in results),
            ),
        ),
        (
            "verified rate",
            _share(summary["verified_rate"], sum(r.verified for r in results), citations),
        ),
        (
            "expected cites found",
            _share(summary["cites_rate"], sum(r.cites_found for r in with_cites), len(with_cites)),
        ),
        ("latency p50", _ms(summary["latency_p50_ms"])),
        ("latency p95", _ms(summary["latency_p95_ms"])),
        ("input tokens", str(tokens["input_tokens"])),
        ("output tokens", str(tokens["output_tokens"])),
        (
            "judge tokens (in/out)",
            f"{tokens['support_check']['input_tokens']}/{tokens['support_check']['output_tokens']}",
        ),
        ("failed answers", str(summary["errors"])),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def wrong_table(results: Sequence[Result]) -> Table:
    """The questions answered wrongly or without the expected citations, and what was missing."""
    table = Table(title="Wrong answers or missing citations")
    table.add_column("line", justify="right")
    table.add_column("question")
    table.add_column("missing")
    for result in results:
        missing = [f"answer: {text}" for text in result.missing]
        missing += [f"cite: {text}" for text in result.missing_cites]
        if result.error is not None:
            missing.insert(0, f"error {result.error['status']} {result.error['code']}")
        question = f"{result.id}: {result.question}" if result.id else result.question
        table.add_row(str(result.line), question, "; ".join(missing))
    return table
