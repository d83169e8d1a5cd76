"""Writing a document's original bytes in pieces, so that storing them makes no copy of them,
and reading them into a file in pieces, so that the file is made without them all in memory.

A bound parameter is copied by the driver (asyncpg encodes it into its buffer; sqlite3 binds
it as a transient blob and SQLite builds the row around it), which for a document of 200 MB
is 200 MB more, or 400. Here PostgreSQL gets the row by a binary COPY whose data is sent a
piece at a time, and SQLite gets a row of zeros that is then written through its incremental
blob I/O, in the transaction of the session either way.

Reading a blob whole costs twice its size as well (the driver's buffer, or SQLite's, and the
bytes made from it), and an OCR job then held the PDF's bytes while its pages were read.
``blob_to_file`` reads it a piece at a time (SQLite's incremental blob I/O; PostgreSQL's
``substring``, which reads only the slice of a value stored uncompressed) into a file.
"""

from __future__ import annotations

import sqlite3
import struct
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import aiosqlite
from anyio import to_thread
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import DocumentBlob
from app.db.unavailable import driver_calls

PIECE = 1024 * 1024
_T = TypeVar("_T")
_TABLE = DocumentBlob.__tablename__
_COLUMNS = ("document_id", "tenant_id", "data")
_INSERT_ZEROS = text(
    "INSERT INTO document_blobs (document_id, tenant_id, data) "
    "VALUES (:document_id, :tenant_id, zeroblob(:size)) RETURNING rowid"
)


async def insert_blob(session: AsyncSession, document_id: str, tenant_id: str, data: bytes) -> None:
    """The document's blob row, in the session's transaction (its document row flushed)."""
    connection = await session.connection()
    driver = connection.dialect.driver
    if driver == "asyncpg":
        raw = await connection.get_raw_connection()
        # asyncpg's own call, outside SQLAlchemy: a connection lost under it told as one lost
        # under SQLAlchemy is.
        with driver_calls(raw.driver_connection):
            await raw.driver_connection.copy_to_table(  # type: ignore[union-attr]
                _TABLE,
                source=_binary_copy((document_id, tenant_id), data),
                columns=_COLUMNS,
                format="binary",
            )
    else:
        assert driver == "aiosqlite", driver
        rowid = await session.scalar(
            _INSERT_ZEROS, {"document_id": document_id, "tenant_id": tenant_id, "size": len(data)}
        )
        raw = await connection.get_raw_connection()
        sqlite: aiosqlite.Connection = raw.driver_connection  # type: ignore[assignment]
        await _on_thread(sqlite, _write_blob, rowid, data)


async def blob_to_file(
    session: AsyncSession, document_id: str, path: str, *, piece: int = PIECE
) -> bool:
    """Write the document's blob to the file at ``path`` (made afresh), ``piece`` bytes at a
    time, in the session's transaction; False when the document has no blob, or none any more
    (then the file is left as it was, or holds part of it)."""
    connection = await session.connection()
    driver = connection.dialect.driver
    if driver == "asyncpg":
        size = await session.scalar(
            select(func.length(DocumentBlob.data)).where(DocumentBlob.document_id == document_id)
        )
        if size is None:
            return False
        file = await to_thread.run_sync(open, path, "wb")
        try:
            for start in range(0, size, piece):
                data = await session.scalar(
                    # substring counts from 1
                    select(func.substring(DocumentBlob.data, start + 1, piece)).where(
                        DocumentBlob.document_id == document_id
                    )
                )
                if data is None:
                    return False  # deleted meanwhile (each statement sees what is committed)
                await to_thread.run_sync(file.write, data)
        finally:
            await to_thread.run_sync(file.close)
        return True
    assert driver == "aiosqlite", driver
    rowid = await session.scalar(
        text("SELECT rowid FROM document_blobs WHERE document_id = :document_id"),
        {"document_id": document_id},
    )
    if rowid is None:
        return False
    raw = await connection.get_raw_connection()
    sqlite: aiosqlite.Connection = raw.driver_connection  # type: ignore[assignment]
    await _on_thread(sqlite, _read_blob, rowid, path, piece)
    return True


async def _on_thread(
    connection: aiosqlite.Connection, function: Callable[..., _T], *args: Any
) -> _T:
    """``function(sqlite3_connection, *args)`` on aiosqlite's thread. aiosqlite has no method
    for SQLite's incremental blob I/O: this takes its private ``_execute`` and ``_conn``,
    fenced by tests/unit/test_aiosqlite_fence.py."""
    return await connection._execute(function, connection._conn, *args)  # type: ignore[no-untyped-call,no-any-return]


def _write_blob(connection: sqlite3.Connection, rowid: int, data: bytes) -> None:
    """On aiosqlite's thread."""
    view = memoryview(data)
    with connection.blobopen(_TABLE, "data", rowid) as blob:
        for start in range(0, len(view), PIECE):
            blob.write(view[start : start + PIECE])


def _read_blob(connection: sqlite3.Connection, rowid: int, path: str, piece: int) -> None:
    """On aiosqlite's thread."""
    with (
        connection.blobopen(_TABLE, "data", rowid, readonly=True) as blob,
        open(path, "wb") as file,
    ):
        while data := blob.read(piece):
            file.write(data)


async def _binary_copy(texts: tuple[str, ...], data: bytes) -> AsyncIterator[bytes]:
    """One row of PostgreSQL's binary COPY format: text columns, then ``data`` as bytea."""
    head = [b"PGCOPY\n\xff\r\n\x00", struct.pack("!iih", 0, 0, len(texts) + 1)]
    for value in texts:
        encoded = value.encode()
        head.append(struct.pack("!i", len(encoded)) + encoded)
    head.append(struct.pack("!i", len(data)))
    yield b"".join(head)
    view = memoryview(data)
    for start in range(0, len(view), PIECE):
        yield bytes(view[start : start + PIECE])
    yield struct.pack("!h", -1)
