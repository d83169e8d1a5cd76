"""Load the documents a question is about: checked for the tenant, ready for the prompt and
for citation resolution. Stored documents never change, so what was built for one request is
kept (bounded) for the next; and for a few seconds after the database last said a document
exists, a question about it asks the database nothing."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from anyio import to_thread
from cachetools import LRUCache, TTLCache
from sqlalchemy import Row, bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import Document, DocumentBlob, DocumentChunk
from app.documents.index import DocumentIndex, IndexedChunk
from app.documents.kinds import DocumentKind, StoredParts, kind_named
from app.errors import Conflict, ErrorCode, InvalidRequest, NotFound
from app.settings import Settings
from app.upstream.wire import MAX_DOCUMENTS_PER_REQUEST, MAX_REQUEST_BYTES


@dataclass(frozen=True, slots=True)
class PromptDocument:
    """A document block as the upstream receives it: a stored document, or a page window of
    one, its kind made ``source``."""

    title: str | None
    context: str | None
    source: dict[str, Any]
    document_id: str | None = None
    window: tuple[int, int] | None = None
    """For a page window, the first and last page of the stored document it holds."""


def window_title(title: str | None, window: tuple[int, int]) -> str:
    """A page window's title: the document's, with the pages it holds ("… (pages 601–700)"),
    within the upstream's 500 characters."""
    pages = f"pages {window[0]}–{window[1]}"
    if title is None:
        return pages.capitalize()
    suffix = f" ({pages})"
    return title[: _MAX_TITLE - len(suffix)] + suffix


_MAX_TITLE = 500


@dataclass(frozen=True, slots=True)
class SourceDocument:
    document_id: str
    tenant_id: str
    title: str | None
    prompts: tuple[PromptDocument, ...]  # its document blocks: itself, or its page windows
    index: DocumentIndex
    size: int  # characters held, for the cache's bound
    cost: RequestCost
    filename: str | None = None  # as uploaded (the OpenAI-compatible API names files by it)


@dataclass(frozen=True, slots=True)
class RequestCost:
    """What documents take of one upstream request: document blocks (a page window is one),
    bytes and estimated input tokens."""

    documents: int = 0
    bytes: int = 0
    tokens: int = 0

    def __add__(self, other: RequestCost) -> RequestCost:
        return RequestCost(
            self.documents + other.documents,
            self.bytes + other.bytes,
            self.tokens + other.tokens,
        )


@dataclass(frozen=True, slots=True)
class RequestLimits:
    """What one upstream request can hold: the upstream's limits and, when choosing between
    whole documents and passages, a token budget. ``pdf_pages`` bounds each PDF document
    block: a longer PDF is sent as page windows of at most that many pages."""

    documents: int
    pdf_pages: int
    bytes: int
    tokens: int | None  # None: no budget, only the upstream's limits

    def check(self, cost: RequestCost) -> None:
        """422 ``document_too_large`` when ``cost`` does not fit."""
        for what, used, limit in (
            ("documents (each page window of a long PDF counts)", cost.documents, self.documents),
            ("bytes", cost.bytes, self.bytes),
            ("input tokens (estimated)", cost.tokens, self.tokens),
        ):
            if limit is not None and used > limit:
                raise DocumentsTooLarge(
                    f"The documents do not fit one request: {used} {what}, at most {limit}. "
                    'Ask with "retrieval": {"mode": "passages"} to send the passages that '
                    "matter instead.",
                    code=ErrorCode.DOCUMENT_TOO_LARGE,
                )


def request_limits(settings: Settings, *, budget: bool = False) -> RequestLimits:
    """The upstream's limits; with ``budget``, also the token budget above which ``auto``
    retrieval sends passages rather than whole documents."""
    return RequestLimits(
        documents=MAX_DOCUMENTS_PER_REQUEST,
        pdf_pages=settings.max_pdf_pages_per_document,
        bytes=MAX_REQUEST_BYTES,
        tokens=settings.whole_documents_token_budget if budget else None,
    )


class DocumentsTooLarge(InvalidRequest):
    """The documents asked about do not fit one upstream request whole."""


def cost_of(
    kind: DocumentKind,
    char_count: int,
    page_count: int | None,
    size_bytes: int,
    limits: RequestLimits,
) -> RequestCost:
    """What a stored document is expected to take of a request before it is loaded. The
    bytes of page windows are known only once they are made: they are checked then."""
    tokens = kind.estimated_tokens(char_count, page_count)
    windows = kind.page_windows(page_count, size_bytes, limits.pdf_pages, limits.bytes)
    if windows is not None:
        return RequestCost(len(windows), 0, tokens)
    return RequestCost(1, kind.request_bytes(size_bytes, char_count), tokens)


def _sent_size(document: Described) -> tuple[int | None, int]:
    """The pages and bytes a document is sent with: a PDF with OCR'd pages goes as its text
    (content blocks), not as its pictures, and in no page windows."""
    if "pdf_pages_read_by_ocr" in document.warnings:
        return None, 4 * document.char_count
    return document.page_count, document.size_bytes


class SourceCache:
    """Least recently used source documents, bounded by the characters they hold, each with
    the time the database last said it exists.

    ``recent`` hands out documents the database vouched for less than ``recheck_seconds`` ago
    without asking it again: a question then takes no turn on the database's connection before
    the upstream is called (SQLite has one, and a busy event loop makes each turn long). A
    document deleted here is forgotten at once, and a question that read it just before the
    delete cannot put it back; one deleted through another process may still be asked about for
    that long, as a question that began just before the delete would be.
    """

    def __init__(
        self,
        max_chars: int,
        recheck_seconds: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._recheck = recheck_seconds
        self._clock = clock
        self._entries: LRUCache[str, tuple[SourceDocument, float]] = LRUCache(
            max_chars, getsizeof=lambda entry: entry[0].size
        )
        # Ids deleted here lately (ids are never reused): a question puts what it read within
        # moments of reading it, never an hour later.
        self._deleted: TTLCache[str, bool] = TTLCache(100_000, 3600, clock)

    def now(self) -> float:
        """The time to pass to ``confirmed`` and ``put``: taken before asking the database."""
        return self._clock()

    def confirmed(self, document_id: str, asked: float) -> SourceDocument | None:
        """The document, if held; the database said at ``asked`` that it exists."""
        entry = self._entries.get(document_id)
        if entry is None:
            return None
        self._entries[document_id] = (entry[0], asked)
        return entry[0]

    def recent(self, tenant_id: str, document_ids: Sequence[str]) -> list[SourceDocument] | None:
        """All the tenant's documents asked for, if each was vouched for recently; else None."""
        oldest = self._clock() - self._recheck
        sources = []
        for document_id in document_ids:
            entry = self._entries.get(document_id)
            if entry is None or entry[0].tenant_id != tenant_id or not entry[1] > oldest:
                return None
            sources.append(entry[0])
        return sources

    def put(self, source: SourceDocument, asked: float) -> None:
        """Hold a document the database said at ``asked`` exists, unless deleted since."""
        document_id = source.document_id
        if document_id in self._entries or document_id in self._deleted:
            return
        if source.size <= self._entries.maxsize:
            self._entries[document_id] = (source, asked)

    def forget(self, document_id: str) -> None:
        """The document was deleted."""
        self._deleted[document_id] = True
        self._entries.pop(document_id, None)


# Built once, as every question runs it: building a statement costs more than running it. On the
# table, not the entity: rows of plain columns skip the ORM's loading, which costs more again.
_documents = Document.__table__.c
_DOCUMENTS = select(
    _documents.id,
    _documents.kind,
    _documents.title,
    _documents.context,
    _documents.page_count,
    _documents.char_count,
    _documents.size_bytes,
    _documents.citable,
    _documents.warnings,
    _documents.filename,
    _documents.status,
).where(
    _documents.tenant_id == bindparam("tenant_id"),
    _documents.id.in_(bindparam("ids", expanding=True)),
)
Described = Row[*tuple[Any, ...]]  # a row of _DOCUMENTS


async def load_sources(
    session: AsyncSession,
    tenant_id: str,
    document_ids: Sequence[str],
    cache: SourceCache,
    limits: RequestLimits,
    *,
    from_collection: bool = False,
) -> list[SourceDocument]:
    """The tenant's documents in the order asked, ready to send whole: 404 for any other id,
    422 for one with nothing to cite and ``DocumentsTooLarge`` when they do not fit one
    request within ``limits``. Ids read from a collection (``from_collection``): one deleted
    since, or with nothing to cite, is left out rather than refused."""
    # More documents than a request takes is known before any is read.
    limits.check(RequestCost(documents=len(document_ids)))
    if (recent := cache.recent(tenant_id, document_ids)) is not None:
        _check_unique(document_ids)
        limits.check(sum((source.cost for source in recent), RequestCost()))
        return recent
    asked = cache.now()
    documents = await describe(session, tenant_id, document_ids, from_collection=from_collection)
    limits.check(
        sum(
            (cost_of(kind_named(d.kind), d.char_count, *_sent_size(d), limits) for d in documents),
            RequestCost(),
        )
    )
    sources = {d.id: hit for d in documents if (hit := cache.confirmed(d.id, asked)) is not None}
    built = await _build(session, tenant_id, [d for d in documents if d.id not in sources], limits)
    for source in built:
        sources[source.document_id] = source
        cache.put(source, asked)
    loaded = [sources[d.id] for d in documents]
    # With the bytes of page windows, known now that they are made.
    limits.check(sum((source.cost for source in loaded), RequestCost()))
    return loaded


async def describe(
    session: AsyncSession,
    tenant_id: str,
    document_ids: Sequence[str],
    *,
    from_collection: bool = False,
) -> list[Described]:
    """The tenant's documents' descriptions, in the order asked: 404 for any other id, 422 for
    one with nothing to cite; with ``from_collection``, those are left out instead."""
    _check_unique(document_ids)
    rows = await session.execute(_DOCUMENTS, {"tenant_id": tenant_id, "ids": document_ids})
    found = {document.id: document for document in rows}
    documents = []
    for document_id in document_ids:
        if document_id not in found:
            if from_collection:
                continue  # deleted since the collection was read
            raise NotFound(
                f"No document with id {document_id!r}.", code=ErrorCode.DOCUMENT_NOT_FOUND
            )
        document = found[document_id]
        if document.status == "processing":
            if from_collection:
                continue  # not citable yet
            raise Conflict(
                f"Document {document_id!r} is still being read by OCR; ask again later.",
                code=ErrorCode.DOCUMENT_PROCESSING,
                headers={"Retry-After": str(PROCESSING_RETRY_AFTER)},
            )
        if not document.citable:
            if from_collection:
                continue
            raise InvalidRequest(
                f"Document {document_id!r} has no text to cite ({', '.join(document.warnings)}).",
                code=ErrorCode.DOCUMENT_NOT_CITABLE,
            )
        documents.append(document)
    return documents


# Seconds a caller is told to wait before asking about a document being read by OCR again.
PROCESSING_RETRY_AFTER = 10


def _check_unique(document_ids: Sequence[str]) -> None:
    if len(set(document_ids)) != len(document_ids):
        raise InvalidRequest(
            "document_ids lists a document more than once.", code=ErrorCode.DUPLICATE_DOCUMENT_IDS
        )


def describe_sources(sources: Sequence[SourceDocument | None]) -> list[dict[str, Any]]:
    """The documents of a question as an answer lists them, in the order sent; None stands
    for a document block that is not a stored document (it keeps its place in the count)."""
    return [
        {"document_index": index, "document_id": source.document_id, "title": source.title}
        for index, source in enumerate(sources)
        if source is not None
    ]


def sent_blocks(sources: Sequence[SourceDocument]) -> list[PromptDocument]:
    """The document blocks a request sends for these documents, in order: each document, or
    its page windows."""
    return [prompt for source in sources for prompt in source.prompts]


async def _build(
    session: AsyncSession, tenant_id: str, documents: list[Described], limits: RequestLimits
) -> list[SourceDocument]:
    if not documents:
        return []
    ids = [document.id for document in documents]
    chunk_rows = await session.execute(
        select(
            DocumentChunk.document_id,
            DocumentChunk.text,
            DocumentChunk.start_char,
            DocumentChunk.end_char,
            DocumentChunk.page_number,
            DocumentChunk.block_index,
            DocumentChunk.locator,
        )
        .where(DocumentChunk.document_id.in_(ids))
        .order_by(DocumentChunk.document_id, DocumentChunk.chunk_index)
    )
    chunks: dict[str, list[tuple[str, IndexedChunk]]] = {document_id: [] for document_id in ids}
    for document_id, text, start, end, page, block, locator in chunk_rows.all():
        chunks[document_id].append((text, IndexedChunk(start, end, page, block, locator)))
    sends_original = [d.id for d in documents if kind_named(d.kind).sends_original]
    originals: dict[str, bytes] = {}
    if sends_original:
        blob_rows = await session.execute(
            select(DocumentBlob.document_id, DocumentBlob.data).where(
                DocumentBlob.document_id.in_(sends_original)
            )
        )
        originals = {document_id: data for document_id, data in blob_rows.all()}
    sources = []
    for document in documents:
        kind = kind_named(document.kind)
        if not chunks[document.id] or (kind.sends_original and document.id not in originals):
            # Deleted since it was looked up: on PostgreSQL each statement sees the latest
            # commit. (A citable document always has chunks.)
            raise NotFound(
                f"No document with id {document.id!r}.", code=ErrorCode.DOCUMENT_NOT_FOUND
            )
        texts = [text for text, _ in chunks[document.id]]
        text = "".join(texts)
        read_by_ocr = "pdf_pages_read_by_ocr" in document.warnings
        parts = StoredParts(text, texts, originals.pop(document.id, None), read_by_ocr)
        windows = (
            None
            if read_by_ocr
            else kind.page_windows(
                document.page_count, document.size_bytes, limits.pdf_pages, limits.bytes
            )
        )
        if parts.data is None:
            sent = kind.sent_parts(parts, windows)
        else:  # encoding (base64) or splitting the bytes is work for a thread, not the loop
            sent = await to_thread.run_sync(kind.sent_parts, parts, windows)
        del parts
        prompts = tuple(
            PromptDocument(
                document.title
                if part.window is None
                else window_title(document.title, part.window),
                document.context,
                part.source,
                document.id,
                part.window,
            )
            for part in sent
        )
        index = DocumentIndex(
            document.id,
            document.kind,
            text,
            [chunk for _, chunk in chunks[document.id]],
            document.page_count,
        )
        sent_bytes = sum(
            document.size_bytes if part.size_bytes is None else part.size_bytes for part in sent
        )
        size = len(text) + (sent_bytes * 4 // 3 if kind.sends_original else 0)
        cost = RequestCost(
            len(sent),
            sum(
                kind.request_bytes(document.size_bytes, document.char_count)
                if part.size_bytes is None
                else kind.request_bytes(part.size_bytes, 0)
                for part in sent
            ),
            # A PDF read by OCR goes as its text: its tokens are its text's, no page images.
            kind.estimated_tokens(document.char_count, _sent_size(document)[0]),
        )
        sources.append(
            SourceDocument(
                document.id,
                tenant_id,
                document.title,
                prompts,
                index,
                size,
                cost,
                document.filename,
            )
        )
    return sources
