"""Documents read by OCR in the background, as jobs stored in the database with a lease.

A PDF with pages to read is stored at once (``status`` ``processing``, its pages ``pending``)
with an ``ocr_jobs`` row leased by the process that stored it. The process holding a job's
lease reads its pending pages, each page's text, words and confidence written with the lease
renewed in one transaction, so a page once stored is never read again. When none is pending,
the document is made from its pages (text layers read again from the stored PDF, OCR'd pages
from their rows) and its chunks, index, pages and status written in one transaction: a
document is searchable and citable whole, or not at all. A process that dies (kill -9) leaves
its lease to run out; the next process to look (``CITEGATE_OCR_POLL_SECONDS``: a replica, or the
same service started again) takes the job and reads only the pages still pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from sqlalchemy import delete, or_, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.blobs import blob_to_file
from app.db.models import Document, DocumentPageRow, OcrJob
from app.documents.kinds.pdf import PageRead
from app.documents.ocr import OcrError, OcrPage, OcrPool, hint_after
from app.documents.reading import page_read, pdf_file, with_pages_read
from app.documents.service import insert_chunks, insert_pages, parse_pdf_file_off_loop
from app.search.index import index_document

log = logging.getLogger(__name__)

# A job interrupted this many times (its process died each time) fails: a page that kills its
# reader would otherwise be read for ever.
MAX_ATTEMPTS = 3


class LeaseLost(Exception):
    """Another process holds the job now (this one held it past its lease)."""


class OcrJobs:
    """This process's reader of OCR jobs: those it stores, and those others left."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        pool: OcrPool,
        *,
        lease_seconds: float,
        poll_seconds: float,
        max_jobs: int = 1,
    ) -> None:
        self._sessions = sessions
        self._pool = pool
        self._max_jobs = max(1, max_jobs)
        self._lease_seconds = lease_seconds
        self._poll_seconds = poll_seconds
        self.owner = secrets.token_hex(8)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._woken = asyncio.Event()

    def lease_until(self) -> float:
        return time.time() + self._lease_seconds

    def wake(self) -> None:
        """Look for jobs now (one was just stored)."""
        self._woken.set()

    async def run(self) -> None:
        """Take every job whose lease ran out (or that this process stored), for ever."""
        while True:
            try:
                for document_id in await self._take_due():
                    task = asyncio.get_running_loop().create_task(self._read(document_id))
                    self._tasks[document_id] = task
                    task.add_done_callback(partial(self._forget, document_id))
            except Exception:  # the database failed: the jobs wait for the next round
                log.exception("looking for documents to read by OCR failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), self._poll_seconds)
            self._woken.clear()

    def _forget(self, document_id: str, _: object) -> None:
        self._tasks.pop(document_id, None)

    async def stop(self) -> None:
        """Stop reading (at shutdown): the leases run out and another process goes on."""
        for task in list(self._tasks.values()):
            task.cancel()
        for task in list(self._tasks.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _take_due(self) -> list[str]:
        """Jobs no process holds, as many as this one has room for (``max_jobs`` at a time:
        the rest are left to other replicas, or to this one's next round)."""
        room = self._max_jobs - len(self._tasks)
        if room <= 0:
            return []
        now = time.time()
        mine_or_free = or_(OcrJob.lease_until.is_(None), OcrJob.lease_until < now)
        async with self._sessions() as session:
            due = (
                await session.scalars(
                    select(OcrJob.document_id)
                    .where(mine_or_free)
                    .order_by(OcrJob.created_at)
                    .limit(20)
                )
            ).all()
            taken: list[str] = []
            for document_id in due:
                if document_id in self._tasks or len(taken) >= room:
                    continue
                claimed = await session.execute(
                    update(OcrJob)
                    .where(OcrJob.document_id == document_id, mine_or_free)
                    .values(
                        lease_owner=self.owner,
                        lease_until=self.lease_until(),
                        attempts=OcrJob.attempts + 1,
                    )
                )
                await session.commit()
                if claimed.rowcount == 1:  # type: ignore[attr-defined]
                    taken.append(document_id)
        return taken

    async def _read(self, document_id: str) -> None:
        try:
            await self._read_document(document_id)
        except LeaseLost:
            log.warning("OCR of document %s: another process took it over", document_id)
        except asyncio.CancelledError:
            raise
        except OcrError as exc:
            await self._fail(document_id, str(exc))
        except SQLAlchemyError:
            log.exception("OCR of document %s: the database failed; left to a retry", document_id)
        except Exception:
            log.exception("OCR of document %s failed", document_id)
            await self._fail(document_id, "The document could not be read by OCR.")

    async def _read_document(self, document_id: str) -> None:
        # The PDF goes from the database to a file a piece at a time, and the service holds
        # none of its bytes while its pages are read, nor when the document is made whole
        # (parsed from the file): read whole, a scan cost twice its size at once, then was
        # held for the job's length (docs/PERFORMANCE.md, "The OCR job's memory").
        async with pdf_file() as path:
            async with self._sessions() as session:
                job = await session.get(OcrJob, document_id)
                if job is None:
                    return
                if job.attempts > MAX_ATTEMPTS:
                    raise OcrError(
                        f"Reading the document by OCR was interrupted {MAX_ATTEMPTS} times."
                    )
                languages = job.languages
                pending = (
                    await session.scalars(
                        select(DocumentPageRow.page_number)
                        .where(
                            DocumentPageRow.document_id == document_id,
                            DocumentPageRow.text_source == "pending",
                        )
                        .order_by(DocumentPageRow.page_number)
                    )
                ).all()
                if not await blob_to_file(session, document_id, path):
                    return  # deleted meanwhile (its job went with it)
            heartbeat = asyncio.ensure_future(self._keep_lease(document_id))
            reading = asyncio.ensure_future(self._read_pages(document_id, path, pending, languages))
            try:
                done, _ = await asyncio.wait((heartbeat, reading), return_when="FIRST_COMPLETED")
            finally:
                for task in (heartbeat, reading):
                    task.cancel()
                await asyncio.gather(heartbeat, reading, return_exceptions=True)
            if reading not in done or reading.cancelled():
                heartbeat.result()  # LeaseLost, or the database's error
            reading.result()
            await self._finish(document_id, path)

    async def _keep_lease(self, document_id: str) -> None:
        """Renew the lease a third of its length before it runs out, while pages are read (a
        page may take longer than the lease); LeaseLost when another process holds it."""
        while True:
            await asyncio.sleep(self._lease_seconds / 3)
            async with self._sessions() as session:
                await self._renew(session, document_id)
                await session.commit()

    async def _read_pages(
        self, document_id: str, path: str, pending: Sequence[int], languages: str
    ) -> None:
        """The pending pages read as many at a time as the pool has workers, in order, each
        stored as soon as it is read; a page is read first in the languages the last page
        read was found in (``read_picture``, ``hint_after``: most documents are in one
        language)."""
        waiting = iter(pending)
        reading: dict[asyncio.Future[OcrPage], str | None] = {}  # each read with its hint
        hint: str | None = None
        try:
            while True:
                for number in itertools.islice(waiting, self._pool.workers - len(reading)):
                    read = self._pool.read(path, number, languages, hint)
                    reading[asyncio.ensure_future(read)] = hint
                if not reading:
                    return
                done, _ = await asyncio.wait(reading, return_when=asyncio.FIRST_COMPLETED)
                for finished in done:
                    page = finished.result()
                    await self._store_page(document_id, page, reading.pop(finished))
                    hint = hint_after(page, hint)
        finally:
            for future in reading:
                future.cancel()
            await asyncio.gather(*reading, return_exceptions=True)

    async def _renew(self, session: AsyncSession, document_id: str) -> None:
        renewed = await session.execute(
            update(OcrJob)
            .where(OcrJob.document_id == document_id, OcrJob.lease_owner == self.owner)
            .values(lease_until=self.lease_until())
        )
        if renewed.rowcount != 1:  # type: ignore[attr-defined]
            await session.rollback()
            raise LeaseLost(document_id)

    async def _store_page(self, document_id: str, page: OcrPage, hint: str | None) -> None:
        """One page's reading, with the lease renewed, in one transaction (a page stored once
        is never stored, nor read, again); ``hint``: the languages it was handed (those of the
        page before)."""
        async with self._sessions() as session:
            await self._renew(session, document_id)
            row = await session.get(DocumentPageRow, (document_id, page.number))
            if row is None or row.text_source != "pending":
                await session.rollback()
                return
            read = page_read(page, row.warnings)
            row.text_source = read.text_source
            row.text = read.text if read.text_source == "ocr" else None
            row.char_count = len(read.text)
            row.ocr_confidence = read.ocr_confidence
            row.warnings = list(read.warnings)
            row.words = [list(word) for word in read.words] if read.words is not None else None
            await session.execute(
                update(Document)
                .where(Document.id == document_id)
                .values(pages_done=Document.pages_done + 1)
            )
            await session.commit()
        log.info(
            "OCR of document %s: page %d stored by %s (%s, rotation %d; hint %s, %d runs)",
            document_id,
            page.number,
            self.owner,
            page.languages,
            page.rotation,
            hint or "-",
            page.runs,
        )

    async def _finish(self, document_id: str, path: str) -> None:
        """The document made whole from its pages (text layers parsed from the PDF's file at
        ``path``): chunks, index, pages, status at once."""
        parsed = await parse_pdf_file_off_loop(Path(path))
        async with self._sessions() as session:
            rows = (
                await session.execute(
                    select(
                        DocumentPageRow.page_number,
                        DocumentPageRow.text_source,
                        DocumentPageRow.warnings,
                        DocumentPageRow.ocr_confidence,
                        DocumentPageRow.text,
                        DocumentPageRow.words,
                    )
                    .where(DocumentPageRow.document_id == document_id)
                    .order_by(DocumentPageRow.page_number)
                )
            ).all()
        # The pages read by OCR (or pending: none when this runs); text layers as parsed again.
        read = {
            row.page_number: PageRead(
                row.text or "",
                row.text_source,
                tuple(row.warnings),
                row.ocr_confidence,
                tuple((int(w[0]), int(w[1]), *w[2:6]) for w in row.words) if row.words else None,
            )
            for row in rows
            if row.text_source != "text_layer"
        }
        document = await asyncio.to_thread(with_pages_read, parsed, read)
        async with self._sessions() as session:
            await self._renew(session, document_id)
            owner = await session.get(Document, document_id)
            if owner is None:
                await session.rollback()
                return
            await session.execute(
                delete(DocumentPageRow).where(DocumentPageRow.document_id == document_id)
            )
            await insert_chunks(session, document_id, owner.tenant_id, document)
            await insert_pages(session, document_id, owner.tenant_id, document)
            owner.status = "ready"
            owner.char_count = len(document.text)
            owner.chunk_count = len(document.chunks)
            owner.citable = document.citable
            owner.warnings = document.warnings
            owner.pages_done = len(rows)
            await session.flush()
            await index_document(session, document_id)
            await session.execute(delete(OcrJob).where(OcrJob.document_id == document_id))
            await session.commit()
        log.info("OCR of document %s done: %d pages", document_id, len(rows))

    async def _fail(self, document_id: str, detail: str) -> None:
        """The document ``failed``, with nothing of it indexed, and its job gone."""
        try:
            async with self._sessions() as session:
                await session.execute(
                    update(Document)
                    .where(Document.id == document_id)
                    .values(
                        status="failed",
                        citable=False,
                        error_code="ocr_failed",
                        error_detail=detail,
                    )
                )
                await session.execute(delete(OcrJob).where(OcrJob.document_id == document_id))
                await session.commit()
        except SQLAlchemyError:
            log.exception("OCR of document %s: recording its failure failed", document_id)
        log.warning("OCR of document %s failed: %s", document_id, detail)
