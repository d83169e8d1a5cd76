"""What the benchmarks share: Citegate (and a fake upstream) each in its own process on
127.0.0.1, on a new database, and the figures read off a process."""

from __future__ import annotations

import asyncio
import os
import resource
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import httpx
from sqlalchemy import text as sql
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_up(url: str) -> None:
    for _ in range(300):
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


def process_tree(pid: int) -> list[int]:
    """The process and its descendants (``citegate serve --workers N``'s workers)."""
    pids, todo = [], [pid]
    while todo:
        current = todo.pop()
        pids.append(current)
        try:
            for task in Path(f"/proc/{current}/task").iterdir():
                todo.extend(int(child) for child in (task / "children").read_text().split())
        except OSError:  # a thread (or the process) ended meanwhile
            continue
    return pids


def _stat_cpu(stat: Path) -> float:
    """User and system CPU seconds in a /proc ``stat`` file (a process's or a thread's)."""
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_of(pids: list[int]) -> float:
    """User and system CPU time these processes have used (those gone count nothing)."""
    total = 0.0
    for pid in pids:
        try:
            total += _stat_cpu(Path(f"/proc/{pid}/stat"))
        except FileNotFoundError:
            continue
    return total


def loop_cpu(pid: int) -> float:
    """CPU seconds of a process's main thread, which runs its event loop (aiosqlite's thread
    and the workers of a thread pool left out)."""
    return _stat_cpu(Path(f"/proc/{pid}/task/{pid}/stat"))


def cpu_seconds(pid: int) -> float:
    """User and system CPU time the process and its running descendants have used."""
    return cpu_of(process_tree(pid))


def own_cpu_seconds() -> float:
    """User and system CPU time this process (the load client) has used."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def load_client(stack: Stack, timeout: float, max_connections: int) -> aiohttp.ClientSession:
    """The load client: the measuring instrument, on the same two cores as Citegate and the
    fake, so it should cost them as little as it can: aiohttp's session alone (through httpx's
    API over aiohttp, reading 1,000 streams took the client half a core)."""
    return aiohttp.ClientSession(
        headers=stack.headers,
        # A stream may last longer than ``timeout``; a silence, a connection may not.
        timeout=aiohttp.ClientTimeout(total=None, sock_read=timeout, sock_connect=timeout),
        # Idle connections let go of before uvicorn's 5 s: a request sent on one the server
        # is just closing fails.
        connector=aiohttp.TCPConnector(limit=max_connections, keepalive_timeout=4),
    )


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@dataclass(frozen=True)
class Stack:
    citegate: str  # base URL
    pid: int  # Citegate's process
    fake: str | None  # the fake upstream's base URL
    fake_pid: int | None
    database: str  # the database's kind
    headers: dict[str, str]  # Citegate's API key, as every request carries it


def make_database(url: str, *, fresh: bool) -> None:
    """Make the PostgreSQL database ``url`` names on its server: dropped and made again when
    ``fresh``, else made only when it does not exist (a benchmark's first run on a machine)."""
    given = make_url(url)
    name = given.database

    async def make() -> None:
        server = create_async_engine(given.set(database="postgres"), isolation_level="AUTOCOMMIT")
        try:
            async with server.connect() as connection:
                if fresh:
                    await connection.execute(sql(f'DROP DATABASE IF EXISTS "{name}"'))
                exists = await connection.scalar(
                    sql("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": name}
                )
                if not exists:
                    await connection.execute(sql(f'CREATE DATABASE "{name}"'))
        finally:
            await server.dispose()

    asyncio.run(make())


@contextmanager
def running(
    database_url: str | None,
    fake_script: str | None,
    *fake_args: str,
    serve_args: tuple[str, ...] = (),
    root: Path = ROOT,
    wrap: tuple[str, ...] | None = None,
) -> Iterator[Stack]:
    """`citegate serve *SERVE_ARGS` on a new database (SQLite unless given), behind a fake
    upstream started as ``python FAKE_SCRIPT --serve-fake PORT *FAKE_ARGS`` when one is named;
    the code of the checkout at ``root`` (another revision's worktree, say), with this
    environment's dependencies. ``wrap``: a command to run Citegate under (valgrind, say);
    by default the environment's BENCH_WRAP, e.g. "python -m cProfile -o out.prof"."""
    if database_url is not None and database_url.startswith("postgresql"):
        make_database(database_url, fresh=False)
    workdir = Path(tempfile.mkdtemp(prefix="citegate-bench-"))
    key = "cg_" + secrets.token_urlsafe(32)
    env = dict(
        os.environ,
        CITEGATE_AUTH="required",  # as deployed: every request is authenticated
        CITEGATE_BOOTSTRAP_API_KEY=key,
        CITEGATE_LOG_LEVEL="WARNING",
        CITEGATE_RATE_LIMIT_PER_MINUTE="0",
        CITEGATE_DATABASE_URL=database_url or f"sqlite+aiosqlite:///{workdir}/bench.db",
        # The code of that checkout, even when the environment's install points at another.
        PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
    )
    processes = []
    fake = None
    if fake_script is not None:
        fake_port = free_port()
        command = [sys.executable, fake_script, "--serve-fake", str(fake_port), *fake_args]
        processes.append(subprocess.Popen(command))
        fake = f"http://127.0.0.1:{fake_port}"
        env |= {"ANTHROPIC_API_KEY": "bench-key", "ANTHROPIC_BASE_URL": fake}
    port = free_port()
    citegate = str(Path(sys.executable).parent / "citegate")
    if wrap is None:
        wrap = tuple(os.environ.get("BENCH_WRAP", "").split())
    server = subprocess.Popen([*wrap, citegate, "serve", "--port", str(port), *serve_args], env=env)
    processes.append(server)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_up(f"{base}/healthz")
        if fake is not None:
            wait_up(f"{fake}/")
        database = env["CITEGATE_DATABASE_URL"].split(":", 1)[0]
        fake_pid = processes[0].pid if fake else None
        headers = {"Authorization": f"Bearer {key}"}
        yield Stack(base, server.pid, fake, fake_pid, database, headers)
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)
