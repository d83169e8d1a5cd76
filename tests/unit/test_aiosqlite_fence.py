"""A fence around aiosqlite: ``app.db.blobs`` writes a document's blob on aiosqlite's thread
through ``Connection._execute`` and ``Connection._conn``, which are not aiosqlite's documented
API (it has no method for SQLite's incremental blob I/O), so nothing but these tests notices when
a release moves or changes them.

When one fails, read aiosqlite's ``core.py`` for the release installed and make
``app.db.blobs._on_thread`` run its function on the connection's thread again, given the sqlite3
connection.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import aiosqlite

from app.db.blobs import _on_thread


async def test_a_function_runs_on_aiosqlites_thread_with_its_sqlite3_connection(
    tmp_path: Path,
) -> None:
    async with aiosqlite.connect(tmp_path / "fence.db") as connection:
        await connection.execute("CREATE TABLE blobs (data BLOB)")
        await connection.execute("INSERT INTO blobs (data) VALUES (zeroblob(4))")
        seen: list[object] = []

        def write(sqlite: sqlite3.Connection, data: bytes) -> int:
            seen.append(threading.current_thread())
            assert isinstance(sqlite, sqlite3.Connection)
            with sqlite.blobopen("blobs", "data", 1) as blob:
                blob.write(data)
            return len(data)

        assert await _on_thread(connection, write, b"abcd") == 4
        assert seen and seen[0] is not threading.current_thread()
        await connection.commit()
        async with connection.execute("SELECT data FROM blobs") as cursor:
            assert await cursor.fetchone() == (b"abcd",)
