"""Start-up time of `citegate serve`: from exec to the first 200 of /readyz, on SQLite and on
PostgreSQL, with the database already migrated (as after a restart: kill -9, a deploy) and,
once each, fresh (every migration to apply). Prints figures; asserts nothing.

    .venv/bin/python bench/startup.py [--runs 5] [--database-url postgresql+asyncpg://…]

Each run starts the service with no API key (the local engine) and stops it with SIGTERM once
/readyz answers. Without --database-url only SQLite is measured. The PostgreSQL database given
is emptied first: use one of your own.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from harness import free_port, make_database

ROOT = Path(__file__).resolve().parents[1]


def start_once(database_url: str, workdir: Path) -> tuple[float, float]:
    """Seconds from exec to the first 200 of /readyz, and the CPU seconds the service's
    processes (the migration process included) used in all, its shutdown included."""
    port = free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("CITEGATE_", "ANTHROPIC_"))
    }
    env.update(
        CITEGATE_DATABASE_URL=database_url,
        CITEGATE_LOG_LEVEL="ERROR",
        CITEGATE_OCR="off",
    )
    citegate = str(Path(sys.executable).parent / "citegate")
    with (workdir / "citegate.log").open("ab") as log:
        used = _children_cpu()
        started = time.perf_counter()
        process = subprocess.Popen(
            [citegate, "serve", "--port", str(port)], env=env, stdout=log, stderr=log
        )
        try:
            while True:
                if process.poll() is not None:
                    raise RuntimeError(
                        f"citegate serve exited {process.returncode}: see {log.name}"
                    )
                with contextlib.suppress(httpx.TransportError):
                    response = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1)
                    if response.status_code == 200:
                        ready = time.perf_counter() - started
                        break
                time.sleep(0.01)
        finally:
            process.terminate()
            process.wait(timeout=60)
    return ready, _children_cpu() - used


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(
    name: str, database_url: str, runs: int, workdir: Path, reset: Callable[[], None]
) -> None:
    reset()
    fresh, fresh_cpu = start_once(database_url, workdir)
    runs_done = [start_once(database_url, workdir) for _ in range(runs)]
    times = sorted(ready for ready, _ in runs_done)
    cpu = statistics.median(used for _, used in runs_done)
    print(
        f"{name}: fresh database {fresh:.2f} s (CPU {fresh_cpu:.2f} s); migrated, {runs} runs: "
        f"median {statistics.median(times):.2f} s, min {times[0]:.2f} s, max {times[-1]:.2f} s "
        f"(CPU median {cpu:.2f} s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--database-url", help="a PostgreSQL database of yours (emptied)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        workdir = Path(directory)
        sqlite = workdir / "startup.db"

        def reset_sqlite() -> None:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{sqlite}{suffix}").unlink(missing_ok=True)

        measure("SQLite", f"sqlite+aiosqlite:///{sqlite}", args.runs, workdir, reset_sqlite)
        if args.database_url:
            url = args.database_url
            measure("PostgreSQL", url, args.runs, workdir, lambda: make_database(url, fresh=True))


if __name__ == "__main__":
    main()
