"""Every table of the service. The schema itself comes only from the Alembic migrations."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

DEFAULT_TENANT_ID = "ten_default"

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend (SQLite stores it naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


def utcnow() -> datetime:
    return datetime.now(UTC)


def _index_of_set(table: str, column: str) -> Index:
    """An index of the rows whose ``column`` is not null: every query that reads it asks for
    one value (``column = x`` implies it is set, on SQLite and PostgreSQL alike)."""
    where = text(f"{column} IS NOT NULL")
    return Index(f"ix_{table}_{column}", column, sqlite_where=where, postgresql_where=where)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Tenant(Base):
    """Who owns data. One default tenant exists until API keys bring more."""

    __tablename__ = "tenants"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # A budget (app.auth.budgets): nano-USD per day, month or in total; null for none.
    budget_nano_usd: Mapped[int | None] = mapped_column(BigInteger)
    budget_period: Mapped[str | None] = mapped_column(String(8))


class ApiKey(Base):
    """A tenant's API key, stored only as a SHA-256 hash; ``prefix`` identifies it to people."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    prefix: Mapped[str] = mapped_column(String(16))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    name: Mapped[str | None] = mapped_column(String(200))
    # Of read, write, admin, operator (app.auth.scopes); keys older than migration 0017 have
    # the first three.
    scopes: Mapped[list[str]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default="active")  # active | disabled
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # After a rotation: the previous secret's hash, which works until ``previous_until``.
    previous_hash: Mapped[str | None] = mapped_column(String(64), unique=True)
    previous_until: Mapped[datetime | None] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # A budget (app.auth.budgets): nano-USD per day, month or in total; null for none.
    budget_nano_usd: Mapped[int | None] = mapped_column(BigInteger)
    budget_period: Mapped[str | None] = mapped_column(String(8))


class BudgetSpend(Base):
    """What a budget's owner (a tenant's or key's id) spent in one period, and what calls
    under way reserved: reserved by one conditional UPDATE, settled after (app.auth.budgets)."""

    __tablename__ = "budget_spend"

    owner_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    period: Mapped[str] = mapped_column(String(8), primary_key=True)  # day | month | total
    period_start: Mapped[datetime] = mapped_column(UTCDateTime(), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(40))  # the owner's, or the owner's key's
    spent_nano_usd: Mapped[int] = mapped_column(BigInteger, default=0)
    reserved_nano_usd: Mapped[int] = mapped_column(BigInteger, default=0)


class UsageRecord(Base):
    """An upstream call that stores no answer (the support judge, say): its usage, for the
    usage and cost reports, which add these to the stored answers' (``app.db.usage``)."""

    __tablename__ = "usage_records"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(40), index=True)
    api_key_id: Mapped[str | None] = mapped_column(String(40))
    source: Mapped[str] = mapped_column(String(32))  # what made the call: judge, ...
    model: Mapped[str] = mapped_column(String(200))
    usage: Mapped[dict[str, int]] = mapped_column(JSON)
    batch: Mapped[bool]
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)


class AuthVersion(Base):
    """One row (``id`` 1) whose ``version`` each change of any key bumps, in the change's
    transaction: a process trusts the keys it read until the version moves (app.auth.keys)."""

    __tablename__ = "auth_version"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    version: Mapped[int] = mapped_column(BigInteger)


class AuditEvent(Base):
    """An admin action: who (the key and its tenant), what (``action`` on a target), when,
    from where (the client's address), and the fields it changed. Never a secret."""

    __tablename__ = "audit_events"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    # The tenant the target belongs to: an admin lists the events of its own tenant.
    tenant_id: Mapped[str | None] = mapped_column(String(40), index=True)
    actor_key_id: Mapped[str | None] = mapped_column(String(40))
    actor_tenant_id: Mapped[str | None] = mapped_column(String(40))
    via: Mapped[str] = mapped_column(String(16))  # http | cli | bootstrap
    action: Mapped[str] = mapped_column(String(64))
    target_type: Mapped[str] = mapped_column(String(32))
    target_id: Mapped[str] = mapped_column(String(40))
    client_address: Mapped[str | None] = mapped_column(String(64))
    request_id: Mapped[str | None] = mapped_column(String(64))
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Document(Base):
    """A stored document's description. Its bytes and its index live in their own tables."""

    __tablename__ = "documents"
    __table_args__ = (UniqueConstraint("tenant_id", "kind", "sha256"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    media_type: Mapped[str] = mapped_column(String(100))
    title: Mapped[str | None] = mapped_column(String(500))
    context: Mapped[str | None] = mapped_column(Text)
    # "metadata" is reserved by SQLAlchemy's declarative base, hence the attribute name.
    user_metadata: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    filename: Mapped[str | None] = mapped_column(String(255))
    sha256: Mapped[str] = mapped_column(String(64))
    size_bytes: Mapped[int] = mapped_column(Integer)
    page_count: Mapped[int | None] = mapped_column(Integer)
    char_count: Mapped[int] = mapped_column(Integer)
    chunk_count: Mapped[int] = mapped_column(Integer)
    citable: Mapped[bool]
    warnings: Mapped[list[str]] = mapped_column(JSON, default=list)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # "ready", or "processing" while pages are read by OCR in the background, or "failed"
    # (with error_code and error_detail); pages_done counts the pages read so far.
    status: Mapped[str] = mapped_column(String(16), default="ready", server_default="ready")
    pages_done: Mapped[int | None] = mapped_column(Integer)
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_detail: Mapped[str | None] = mapped_column(Text)


class DocumentPageRow(Base):
    """How one page of a PDF was read (see ``app.documents.kinds.base.PageFacts``). An OCR'd
    page keeps its text and words; ``text_source`` is ``pending`` until it is read."""

    __tablename__ = "document_pages"

    document_id: Mapped[str] = mapped_column(
        ForeignKey("documents.id", ondelete="CASCADE"), primary_key=True
    )
    page_number: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    start_char: Mapped[int] = mapped_column(Integer)
    char_count: Mapped[int] = mapped_column(Integer)
    text_source: Mapped[str] = mapped_column(String(16))
    ocr_confidence: Mapped[float | None] = mapped_column(Float)
    warnings: Mapped[list[str]] = mapped_column(JSON, default=list)
    text: Mapped[str | None] = mapped_column(Text, deferred=True)
    words: Mapped[list[list[float]] | None] = mapped_column(JSON, deferred=True)


class OcrJob(Base):
    """A document whose pages are being read by OCR. The process reading it holds
    ``lease_owner`` / ``lease_until`` (seconds since the epoch) and renews it; a lease that
    ran out is taken over by the next process that looks. Deleted when the document is done."""

    __tablename__ = "ocr_jobs"

    document_id: Mapped[str] = mapped_column(
        ForeignKey("documents.id", ondelete="CASCADE"), primary_key=True
    )
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    created_at: Mapped[float] = mapped_column(Float, index=True)
    languages: Mapped[str] = mapped_column(String(200))
    lease_owner: Mapped[str | None] = mapped_column(String(64))
    lease_until: Mapped[float | None] = mapped_column(Float)
    attempts: Mapped[int] = mapped_column(Integer, default=0)


class DocumentBlob(Base):
    """The original bytes of a document, kept apart so that listing documents never loads them."""

    __tablename__ = "document_blobs"

    document_id: Mapped[str] = mapped_column(
        ForeignKey("documents.id", ondelete="CASCADE"), primary_key=True
    )
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class DocumentChunk(Base):
    """One entry of the document index: the smallest citable unit.

    Chunks tile the document text, so the text is the chunks' texts joined in order.
    """

    __tablename__ = "document_chunks"

    document_id: Mapped[str] = mapped_column(
        ForeignKey("documents.id", ondelete="CASCADE"), primary_key=True
    )
    chunk_index: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    # Not indexed: searches find chunks by the search index and their documents (migration 0010).
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    text: Mapped[str] = mapped_column(Text)
    start_char: Mapped[int] = mapped_column(Integer)
    end_char: Mapped[int] = mapped_column(Integer)
    page_number: Mapped[int | None] = mapped_column(Integer)
    block_index: Mapped[int | None] = mapped_column(Integer)
    # Where a converted document's chunk stands in the original: {"paragraph": 12}, ...
    locator: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # What the search index reads instead of ``text`` when the two differ (Chinese or Japanese,
    # see app.search.terms); NULL for most chunks. The index itself is in app.search.index.
    search_text: Mapped[str | None] = mapped_column(Text)


class SearchStatistics(Base):
    """A tenant's number of chunks and the generation of its search index, which changes with
    every chunk written or deleted, each the sum over the tenant's rows (one a shard: on
    PostgreSQL a transaction updates the shard of its server process, so that concurrent
    uploads of a tenant do not wait for each other's row). Kept by triggers on
    ``document_chunks`` (migration 0019), read by app.search to weigh words by their rarity
    among the tenant's chunks."""

    __tablename__ = "search_statistics"

    tenant_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    shard: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    chunk_count: Mapped[int] = mapped_column(BigInteger)
    generation: Mapped[int] = mapped_column(BigInteger)


class Collection(Base):
    """A named set of the tenant's documents; a document may be in many."""

    __tablename__ = "collections"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str | None] = mapped_column(Text)
    user_metadata: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class CollectionDocument(Base):
    """A document's membership of a collection. Goes with either of them."""

    __tablename__ = "collection_documents"

    collection_id: Mapped[str] = mapped_column(
        ForeignKey("collections.id", ondelete="CASCADE"), primary_key=True
    )
    document_id: Mapped[str] = mapped_column(
        ForeignKey("documents.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    added_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Conversation(Base):
    """A conversation fixes its documents, system prompt and model; its answers are its turns."""

    __tablename__ = "conversations"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    title: Mapped[str | None] = mapped_column(String(500))
    system: Mapped[str | None] = mapped_column(Text)
    model: Mapped[str | None] = mapped_column(String(200))
    document_ids: Mapped[list[str]] = mapped_column(JSON)  # empty over a collection
    collection_id: Mapped[str | None] = mapped_column(String(40))
    # Set while a follow-up is being answered: a second one at the same time is refused.
    busy_until: Mapped[datetime | None] = mapped_column(UTCDateTime())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Answer(Base):
    """A stored answer: what was asked, what the upstream said, its citations resolved."""

    __tablename__ = "answers"
    # An answer is found by its id (then its tenant checked), a conversation's answers by its
    # id, a batch's (when the batch is deleted, by the cascade) by the batch's: no index of the
    # tenant, and the others only of the answers that have one. Each index is one more B-tree
    # written with every answer (migration 0011). The streams being answered are found by
    # their owner, among only the rows in progress: a stream's row enters that index when it
    # begins and leaves it when it ends, and an answer asked whole never enters it.
    __table_args__ = (
        _index_of_set("answers", "conversation_id"),
        _index_of_set("answers", "batch_id"),
        Index(
            "ix_answers_in_progress",
            "stream_owner",
            sqlite_where=text("status = 'in_progress'"),
            postgresql_where=text("status = 'in_progress'"),
        ),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    conversation_id: Mapped[str | None] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE")
    )
    # completed | failed | cancelled; a stream's is in_progress from its start to its end, or
    # interrupted when the process relaying it died first
    status: Mapped[str] = mapped_column(String(16))
    question: Mapped[str] = mapped_column(Text)
    system: Mapped[str | None] = mapped_column(Text)
    model: Mapped[str] = mapped_column(String(200))
    max_tokens: Mapped[int] = mapped_column(Integer)
    stop_reason: Mapped[str | None] = mapped_column(String(40))
    text: Mapped[str] = mapped_column(Text)
    segments: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    documents: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    # {"mode", "passages", "first_new_passage"}; null for answers stored before retrieval
    retrieval: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    usage: Mapped[dict[str, int]] = mapped_column(JSON)
    upstream_message_id: Mapped[str | None] = mapped_column(String(200))
    upstream_request_id: Mapped[str | None] = mapped_column(String(200))
    # The answer batch it is a result of; its custom_id is the batch request's.
    batch_id: Mapped[str | None] = mapped_column(
        ForeignKey("answer_batches.id", ondelete="CASCADE")
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # The process (``ServiceProcess``) relaying a streamed answer; null for one asked whole.
    stream_owner: Mapped[str | None] = mapped_column(String(40))
    # The key that asked (a batch's: the key that made the batch); null while the service ran
    # open, and for answers stored before migration 0017. Usage and cost reports group by it.
    api_key_id: Mapped[str | None] = mapped_column(String(40))


class ServiceProcess(Base):
    """A process of the service that relays streams, while it lives: it sets ``seen_at`` every
    third of ``CITEGATE_STREAM_LEASE_SECONDS``, and deletes its row when it stops. The streams
    of one not seen for that long, or with no row, were cut by its end."""

    __tablename__ = "service_processes"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    seen_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class AnswerShareLink(Base):
    """A link that shows one answer without a key until it expires; only its token's SHA-256
    is stored, as for API keys. It goes with its answer."""

    __tablename__ = "answer_share_links"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    answer_id: Mapped[str] = mapped_column(ForeignKey("answers.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())


class AnswerBatch(Base):
    """Questions sent upstream as one Message Batch, followed by the poller until every result
    is stored. ``lease_owner`` / ``lease_until``: the process polling it now (one at a time,
    among any number of replicas); a lease that ran out is anyone's to take."""

    __tablename__ = "answer_batches"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    # validating | in_progress | canceling | ended ("ended" once every result is stored)
    status: Mapped[str] = mapped_column(String(16))
    upstream_batch_id: Mapped[str | None] = mapped_column(String(200))
    request_count: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    cancel_requested_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    next_poll_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    polls_unchanged: Mapped[int] = mapped_column(Integer, default=0)  # for the backoff
    lease_owner: Mapped[str | None] = mapped_column(String(64))
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # The key whose daily tokens the answers spend (None: the service ran open).
    key_id: Mapped[str | None] = mapped_column(String(40))
    # Status ``validating`` with no ``upstream_batch_id``: the intent, written before the
    # upstream is asked. ``upstream_body`` is what is sent (kept until the upstream batch is
    # known, so that it can be sent again), ``upstream_sent_at`` when it was last sent.
    upstream_body: Mapped[bytes | None] = mapped_column(LargeBinary, deferred=True)
    upstream_sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # The budget ledger rows its requests reserved in when it was made (``Reservation.owners``
    # of app.auth.budgets); null when no budget applied.
    budget_owners: Mapped[list[list[str]] | None] = mapped_column(JSON)


class AnswerBatchRequest(Base):
    """One question of a batch, in request order (``position``), and its result once known:
    ``status`` pending, then succeeded (``answer_id`` names the stored Answer, whose id is fixed
    here so that it is stored once however often its result is read), errored (``error`` is
    the problem), canceled or expired. What its answer needs besides the upstream's message is
    kept here; the request sent upstream is not."""

    __tablename__ = "answer_batch_requests"
    __table_args__ = (UniqueConstraint("batch_id", "custom_id"),)

    batch_id: Mapped[str] = mapped_column(
        ForeignKey("answer_batches.id", ondelete="CASCADE"), primary_key=True
    )
    position: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    custom_id: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    answer_id: Mapped[str] = mapped_column(String(40))
    question: Mapped[str] = mapped_column(Text)
    system: Mapped[str | None] = mapped_column(Text)
    model: Mapped[str | None] = mapped_column(String(200))
    max_tokens: Mapped[int | None] = mapped_column(Integer)
    # sent whole, in order; None for a block of the compatible API that names no document
    document_ids: Mapped[list[str | None]] = mapped_column(JSON)
    documents: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    retrieval: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # How its citations' support is checked (``AnswerRequest.support``); None before 0014.
    support: Mapped[str | None] = mapped_column(String(16))
    # What it reserved of the batch's budgets (nano-USD); 0 once settled or released.
    reserved_nano_usd: Mapped[int] = mapped_column(BigInteger, default=0)


class LocalEngineBatch(Base):
    """A Message Batch of the local engine. ``body`` is the batch as it arrived (kept until the
    batch ends, its requests read from it again after a restart); the process answering it
    holds ``lease_owner`` / ``lease_until``. Times are seconds since the epoch (the engine's
    clock)."""

    __tablename__ = "local_engine_batches"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[float] = mapped_column(Float, index=True)
    expires_at: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float)
    cancel_initiated_at: Mapped[float | None] = mapped_column(Float)
    version: Mapped[str] = mapped_column(String(32))  # the anthropic-version it was sent with
    request_count: Mapped[int] = mapped_column(Integer)
    body: Mapped[bytes | None] = mapped_column(LargeBinary, deferred=True)
    lease_owner: Mapped[str | None] = mapped_column(String(64))
    lease_until: Mapped[float | None] = mapped_column(Float)


class LocalEngineResult(Base):
    """One line of a local batch's results file, for the request at ``position``; written
    once (its primary key), so a request answered again after a restart is not recorded
    twice."""

    __tablename__ = "local_engine_results"

    batch_id: Mapped[str] = mapped_column(
        ForeignKey("local_engine_batches.id", ondelete="CASCADE"), primary_key=True
    )
    position: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    outcome: Mapped[str] = mapped_column(String(16))
    line: Mapped[bytes] = mapped_column(LargeBinary)
