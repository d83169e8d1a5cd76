"""What one read of the key version costs in the process: through the engine, and the way each
request reads it (app/db/scalar.py: a kept connection of its own, driver only); and what a
request's whole key check costs (``authenticate``: the version read, the key hashed, the cached
principal) against the check as it was before keys were checked where they are changed (the
key hashed and the cached principal, trusted with no read): the difference is the version read
with its sharing (a task, shielded), which every request now pays.

    .venv/bin/python bench/key_version.py [--database-url URL] [--reads 2000]

CPU time of the process (``time.process_time``) over ``--reads`` reads, after 50 to warm up;
a new SQLite file by default, migrated. On PostgreSQL, the CPU of the server's backend that
answers the direct reads too (read from /proc: the server on this machine).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from harness import make_database
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from app.auth.keys import _VERSION, VERSION_READER, KeyCache, authenticate, create_key, hash_key
from app.db.engine import create_engine
from app.db.migrations import upgrade_to_head
from app.db.scalar import ScalarReader, sql_of


async def cpu_per_read(read: Callable[[], Awaitable[int]], reads: int) -> float:
    for _ in range(50):
        await read()
    started = time.process_time()
    for _ in range(reads):
        await read()
    return (time.process_time() - started) / reads


def cpu_seconds(pid: int) -> float:
    """User and system CPU of a process of this machine (a PostgreSQL backend)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def backend_of(engine: AsyncEngine, name: str) -> int | None:
    """The pid of the PostgreSQL backend of the connection named ``name``; None on SQLite."""
    if engine.dialect.name != "postgresql":
        return None
    async with engine.connect() as connection:
        pid: int | None = await connection.scalar(
            text(
                "SELECT pid FROM pg_stat_activity WHERE application_name = :name "
                "AND datname = current_database()"
            ),
            {"name": name},
        )
    return pid


async def measure(url: str, reads: int) -> None:
    engine = create_engine(url)
    reader = ScalarReader(engine, sql_of(_VERSION), _VERSION, name="citegate-bench")

    async def through_engine() -> int:
        async with engine.connect() as connection:
            return int(await connection.scalar(_VERSION) or 0)

    sessions = async_sessionmaker(engine, expire_on_commit=False)
    async with sessions() as session:
        _, key = await create_key(session, "bench")
    cache = KeyCache(engine)
    version = await cache.current_version()

    async def key_check() -> int:
        assert await authenticate(sessions, key, cache) is not None
        return 0

    async def key_check_before() -> int:  # trusted as cached: no version read
        assert await cache.principal(sessions, hash_key(key), version) is not None
        return 0

    try:
        for name, read in (
            ("through the engine", through_engine),
            ("directly", reader.read),
            ("key check now", key_check),
            ("key check before", key_check_before),
        ):
            await read()  # the direct connections made before their backends are looked for
            names = {"directly": "citegate-bench", "key check now": VERSION_READER}
            backend = await backend_of(engine, names.get(name, "-"))
            backend_before = cpu_seconds(backend) if backend else 0.0
            own = await cpu_per_read(read, reads)
            line = f"{name:20} {own * 1e6:8.1f} us CPU per call"
            if backend:
                server = (cpu_seconds(backend) - backend_before) / (reads + 50)
                line += f", + {server * 1e6:.1f} us of its PostgreSQL backend"
            print(line)
    finally:
        await reader.aclose()
        await cache.aclose()
        await engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url", help="default: a new SQLite file")
    parser.add_argument("--reads", type=int, default=2000)
    args = parser.parse_args()
    url = args.database_url
    if url is None:
        url = f"sqlite+aiosqlite:///{tempfile.mkdtemp(prefix='citegate-bench-')}/bench.db"
    else:
        make_database(url, fresh=True)
    upgrade_to_head(url)
    print(f"database: {url.split('://')[0]}")
    asyncio.run(measure(url, args.reads))


if __name__ == "__main__":
    main()
