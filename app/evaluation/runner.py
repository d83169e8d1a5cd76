"""Asking the set: against a running service over HTTP, or against one served in this process on
a loopback port, with its own temporary SQLite database and the local engine. Both ways go
through the same HTTP client, so what is measured is what a client of the service gets."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from app.db.migrations import upgrade_to_head
from app.evaluation.questions import Question
from app.evaluation.scoring import Result, failed, score
from app.main import create_app
from app.settings import Settings

ANSWER_TIMEOUT_SECONDS = 600.0  # a slow upstream's answer is measured, not cut


class EvaluationError(Exception):
    """The set cannot be asked at all: the service is unreachable, refuses the key, or refuses
    a file."""


def in_process_database(folder: Path) -> str:
    """A new SQLite database in ``folder``, migrated. Call it with no event loop running."""
    url = f"sqlite+aiosqlite:///{folder / 'citegate.db'}"
    upgrade_to_head(url)
    return url


@contextlib.asynccontextmanager
async def in_process_service(database_url: str) -> AsyncIterator[str]:
    """Citegate on the given database and the local engine, served on a loopback port of this
    process's event loop while the context lasts; yields its base URL."""
    settings = Settings(
        database_url=database_url,
        anthropic_api_key=None,  # the local engine answers
        auth="auto",
        bootstrap_api_key=None,  # open: the database is ours alone
        redis_url=None,
        rate_limit_per_minute=0,
        token_limit_per_day=0,
        batch_poller=False,
    )
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), log_config=None, log_level="warning")
    )
    serving = asyncio.create_task(server.serve(sockets=[listener]))
    try:
        while not server.started:
            if serving.done():
                serving.result()  # its exception, if any
                raise EvaluationError("the in-process service did not start")
            await asyncio.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await serving
        listener.close()


def in_process_folder() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="citegate-eval-")


def _problem(response: httpx.Response) -> dict[str, Any]:
    """What a refused request said: status, and the problem's code and detail when it has them."""
    try:
        body = response.json()
    except ValueError:
        body = None
    problem = body if isinstance(body, dict) else {}
    return {
        "status": response.status_code,
        "code": problem.get("code"),
        "detail": problem.get("detail") or response.text[:500],
    }


def _refused_key(response: httpx.Response) -> None:
    if response.status_code in (401, 403):
        problem = _problem(response)
        raise EvaluationError(
            f"the service refused the request ({problem['status']} {problem['code']}): "
            f"{problem['detail']}"
        )


async def upload_files(
    http: httpx.AsyncClient, paths: Sequence[Path], uploaded: Callable[[], None]
) -> dict[Path, str]:
    """Each file uploaded once: its document id by path."""
    ids: dict[Path, str] = {}
    for path in paths:
        if path in ids:
            continue
        data = await asyncio.to_thread(path.read_bytes)
        response = await http.post("/v1/documents/upload", files={"file": (path.name, data)})
        _refused_key(response)
        if response.status_code not in (200, 201):
            problem = _problem(response)
            raise EvaluationError(
                f"{path}: the upload was refused ({problem['status']} {problem['code']}): "
                f"{problem['detail']}"
            )
        ids[path] = str(response.json()["id"])
        uploaded()
    return ids


async def ask(
    http: httpx.AsyncClient, question: Question, document_ids: dict[Path, str], support: str
) -> Result:
    """One question answered and scored; a refused or failed answer is a result with an error."""
    body: dict[str, Any] = {"question": question.question, "support": support}
    if question.collection_id is not None:
        body["collection_id"] = question.collection_id
    else:
        body["document_ids"] = list(question.document_ids) or [
            document_ids[path] for path in question.files
        ]
    started = time.perf_counter()
    try:
        response = await http.post("/v1/answers", json=body, timeout=ANSWER_TIMEOUT_SECONDS)
    except httpx.TimeoutException as exc:
        elapsed = (time.perf_counter() - started) * 1000
        return failed(question, {"status": None, "code": "timeout", "detail": str(exc)}, elapsed)
    elapsed = (time.perf_counter() - started) * 1000
    _refused_key(response)
    if response.status_code != 200:
        return failed(question, _problem(response), elapsed)
    return score(question, response.json(), elapsed)


async def evaluate(
    questions: Sequence[Question],
    *,
    base_url: str,
    api_key: str | None,
    support: str,
    uploaded: Callable[[], None] = lambda: None,
    answered: Callable[[Result], None] = lambda result: None,
) -> list[Result]:
    """Upload the files the set names, then ask every question in order, one at a time (so that
    latencies are each answer's own)."""
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=60) as http:
        try:
            files = [path for question in questions for path in question.files]
            document_ids = await upload_files(http, list(dict.fromkeys(files)), uploaded)
            results = []
            for question in questions:
                result = await ask(http, question, document_ids, support)
                results.append(result)
                answered(result)
        except httpx.TransportError as exc:
            raise EvaluationError(f"cannot reach {base_url}: {exc!r}") from exc
    return results
