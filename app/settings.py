"""Every setting of the service, read from environment variables (``CITEGATE_*``)."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

MIB = 1024 * 1024

CURRENT_VERSION = "2026-10-21"
"""The ``anthropic-version`` Citegate sends by default, and the newest the local engine speaks."""
DEFAULT_MODEL = "claude-sonnet-5"
"""The model asked when a question names none and the real API answers."""
LOCAL_MODEL = "citegate-local-1"
"""The model name the embedded local engine answers as."""


class Settings(BaseSettings):
    """Service configuration. Nothing reads the environment at import time: build one of these."""

    model_config = SettingsConfigDict(env_prefix="CITEGATE_", extra="ignore")

    database_url: str = Field(
        default="sqlite+aiosqlite:///./data/citegate.db",
        description="SQLAlchemy async URL: sqlite+aiosqlite:///… or postgresql+asyncpg://…",
    )
    # Each request holds a connection only for its few statements, and overflow connections
    # made and dropped under load grow a worker's memory: a small pool and none past it
    # (docs/PERFORMANCE.md has the measure).
    database_pool_size: int = Field(
        default=10, ge=1, description="PostgreSQL connections each worker keeps open."
    )
    database_ping_after_idle_seconds: float = Field(
        default=1.0,
        ge=0,
        description="A pooled PostgreSQL connection idle longer than this is pinged before it "
        "is used, and replaced if the server has closed it; 0 pings before every use.",
    )
    database_connect_timeout_seconds: float = Field(
        default=5.0,
        gt=0,
        description="How long opening a PostgreSQL connection may take before the request is "
        "answered 503 `database_unavailable`: a server that does not answer at all (packets "
        "dropped, a host gone) held each request for asyncpg's own 60 s.",
    )
    database_max_overflow: int = Field(
        default=0,
        ge=0,
        description="PostgreSQL connections a worker may open past its pool under load, each "
        "closed when given back.",
    )
    max_document_bytes: int = Field(
        default=256 * MIB,
        gt=0,
        description="Largest document stored, in bytes. An upload is streamed to a temporary "
        "file while it arrives; a document given as JSON is limited to the upstream's request "
        "size besides.",
    )
    max_unpacked_bytes: int = Field(
        default=128 * MIB,
        gt=0,
        description="Largest size a .docx, .xlsx or .pptx may unpack to, in bytes (against "
        "ZIP bombs).",
    )
    max_sheet_rows: int = Field(
        default=100_000, gt=0, description="Most rows read from a spreadsheet, in all its sheets."
    )
    log_level: str = "INFO"
    auth: Literal["auto", "required"] = Field(
        default="auto",
        description="auto: open with one default tenant until a key exists; required: refuse "
        "to start without a key (production).",
    )
    bootstrap_api_key: SecretStr | None = Field(
        default=None, description="An API key to ensure at start-up, for automated deployments."
    )
    bootstrap_tenant: str = Field(default="default", min_length=1, max_length=200)
    # Unset, each process makes its own: a restart ends every cursor, and replicas (or
    # workers started apart) refuse each other's. `citegate serve --workers N` hands its own to
    # its workers.
    cursor_secret: SecretStr = Field(
        default_factory=lambda: SecretStr(secrets.token_urlsafe(32)),
        min_length=32,
        description="The key list cursors are signed with (at least 32 characters); the same "
        "for every replica behind one address. Unset: a random one per process.",
    )
    recheck_seconds: float = Field(
        default=5.0,
        ge=0,
        le=3600,
        description="How long a process trusts what the database said about a document (it "
        "exists): a document deleted through another process is refused within this long. 0: "
        "ask on every request. (Keys are never trusted past a change: every process sees a "
        "disabled, revoked or rotated key on its next request.)",
    )
    rate_limit_per_minute: int = Field(
        default=600, ge=0, description="Requests per minute per API key; 0 turns it off."
    )
    token_limit_per_day: int = Field(
        default=0, ge=0, description="Upstream tokens per day per API key; 0 turns it off."
    )
    prices_file: Path | None = Field(
        default=None,
        description="A price table (JSON, in the shape of app/usage/prices.json) that replaces "
        "the one shipped, for cost reports: USD per million tokens per model, with a version "
        "and the batch discount.",
    )
    redis_url: str | None = Field(
        default=None,
        description="redis://host:port/db to share rate-limit counters between replicas; "
        "without it they live in the process.",
    )
    anthropic_api_key: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("ANTHROPIC_API_KEY", "anthropic_api_key"),
        description="With a key the Messages API answers; without, the local engine.",
    )

    anthropic_base_url: str = Field(
        default="https://api.anthropic.com",
        validation_alias=AliasChoices("ANTHROPIC_BASE_URL", "anthropic_base_url"),
        description="The Messages API, when a key is set.",
    )
    anthropic_version: str = Field(default=CURRENT_VERSION, description="anthropic-version header.")
    model: str | None = Field(
        default=None,
        description=f"Default model; {LOCAL_MODEL} for the local engine, else {DEFAULT_MODEL}.",
    )
    max_tokens: int = Field(default=1024, ge=1, le=128_000)
    system_prompt: str | None = Field(default=None, description="Default system prompt.")
    support_check: Literal["lexical", "judge", "off"] = Field(
        default="lexical",
        description="How each citation's support is checked when a question does not say: "
        "`lexical` (in-process, milliseconds), `judge` (also one upstream call per answer "
        "about the citations `lexical` did not find supported), `off` (`unchecked`).",
    )
    support_judge_model: str | None = Field(
        default=None,
        description="The model that judges support; the answer's own model when unset.",
    )
    upstream_connect_timeout: float = Field(default=5.0, gt=0)
    upstream_read_timeout: float = Field(default=300.0, gt=0)
    upstream_max_connections: int = Field(
        default=1000, ge=1, description="Open upstream connections at most (one per stream)."
    )
    upstream_max_attempts: int = Field(default=3, ge=1, le=10)
    upstream_max_retry_seconds: float = Field(
        default=60.0, ge=0, description="No retry starts after this long since the first try."
    )
    source_cache_chars: int = Field(
        default=64_000_000,
        ge=0,
        description="Characters of prepared documents kept in memory between questions.",
    )
    sse_keepalive_seconds: float = Field(
        default=15.0, gt=0, description="Seconds of silence before a keep-alive comment."
    )
    stream_send_timeout_seconds: float = Field(
        default=30.0,
        ge=0,
        description="A stream whose client reads nothing for this long is ended and its answer "
        "stored as cancelled; 0: wait for the client as long as its connection is open.",
    )
    header_timeout_seconds: float = Field(
        default=10.0,
        ge=0,
        description="A request's headers must arrive whole within this long of the connection "
        "opening, or of the request's first byte on a connection kept alive; else the "
        "connection is closed. 0: no limit.",
    )
    body_timeout_seconds: float = Field(
        default=20.0,
        ge=0,
        description="How long a request's body may keep Citegate waiting, and a second more "
        "for every `body_min_bytes_per_second` bytes that arrived; past that it is refused "
        "408 `request_timeout` and the connection closed. A rate rather than a deadline, so "
        "that large uploads over slow links succeed. 0: no limit.",
    )
    body_min_bytes_per_second: int = Field(
        default=500,
        ge=0,
        description="The slowest average rate, past `body_timeout_seconds`, at which a body "
        "may arrive, in bytes a second. 0: no limit.",
    )
    stream_lease_seconds: float = Field(
        default=30.0,
        gt=0,
        description="A streamed answer belongs to the process relaying it, which says every "
        "third of this that it is alive; the streams of a process silent this long (a crash, "
        "kill -9) are marked interrupted by any process of the service, the restarted one too.",
    )
    max_pdf_pages_per_document: int = Field(
        default=600,
        ge=1,
        validation_alias=AliasChoices(
            "CITEGATE_MAX_PDF_PAGES_PER_DOCUMENT",
            "CITEGATE_MAX_PDF_PAGES_PER_REQUEST",  # its name before PDFs were sent in windows
            "max_pdf_pages_per_document",
        ),
        description="The upstream's page limit for one PDF document block: a longer PDF is "
        "sent as consecutive page windows of at most this many pages.",
    )
    whole_documents_token_budget: int = Field(
        default=150_000,
        ge=1,
        description="Estimated input tokens above which `auto` retrieval sends passages rather "
        "than whole documents.",
    )
    search_window_chunks: int = Field(
        default=2,
        ge=0,
        le=20,
        description="A passage is the matching chunk and up to this many chunks on each side "
        "(on its page).",
    )
    search_max_passages_per_document: int = Field(
        default=5,
        ge=1,
        le=100,
        description="Passages of one document in a search at most, so that one long document "
        "cannot take every slot.",
    )

    batch_poller: bool = Field(
        default=True,
        description="Whether this process polls the open answer batches (any number of "
        "replicas may; each batch is polled by one at a time).",
    )
    batch_poll_seconds: float = Field(
        default=10.0,
        gt=0,
        description="How soon an open answer batch is first polled upstream; each poll that "
        "finds it unchanged doubles the wait, up to `batch_poll_max_seconds`. With the local "
        "engine: how often a process looks for the batches a stopped process left.",
    )
    batch_poll_max_seconds: float = Field(
        default=300.0, gt=0, description="The longest wait between two polls of a batch."
    )
    batch_lease_seconds: float = Field(
        default=120.0,
        gt=0,
        description="How long a replica holds a batch it polls; a replica that died holding "
        "one leaves it to another after this long.",
    )
    local_batch_lifetime_seconds: float = Field(
        default=86_400.0,
        ge=0,
        description="The local engine's Message Batches: requests not processed this long "
        "after creation expire (the Messages API's 24 h).",
    )

    ocr: Literal["auto", "off", "force"] = Field(
        default="auto",
        description="Which PDF pages are read by OCR (Tesseract): `auto` those with no text "
        "layer or a garbage one, `off` none (they stay without text, and this process takes no "
        "OCR job another process stored), `force` every page.",
    )
    ocr_languages: str = Field(
        default="eng+deu+fra+spa+ita+por+rus+ara+chi_sim+jpn",
        pattern=r"^[a-z]{3}(_[a-z]{3,4})?(\+[a-z]{3}(_[a-z]{3,4})?)*$",
        description="Tesseract's languages, joined by `+`. A page is read first in those the "
        "page before it was found in (English for a document's first page); when Tesseract is "
        "unsure of those words, with those of the script its orientation and script detection "
        "finds on the page (all of them when it finds none); fewer languages read faster.",
    )
    ocr_max_pages: int = Field(
        default=1000,
        ge=0,
        description="Pages of one PDF that may need OCR at most; a PDF with more is refused "
        "(413 `ocr_page_limit_exceeded`) before anything is stored.",
    )
    ocr_workers: int = Field(
        default=0,
        ge=0,
        description="Worker processes reading pages by OCR, one page each at a time; 0: one "
        "per CPU core but one (at least one), the core left being the service's and its "
        "database's.",
    )
    ocr_lease_seconds: float = Field(
        default=60.0,
        gt=0,
        description="How long a process holds a document it reads by OCR without renewing "
        "its lease (it renews it after every page); a process that died holding one leaves "
        "it to another after this long.",
    )
    ocr_poll_seconds: float = Field(
        default=5.0,
        gt=0,
        description="How often a process looks for documents whose OCR a stopped process left.",
    )

    @property
    def max_json_document_bytes(self) -> int:
        """Largest document given as JSON. A JSON body is read whole, its base64 a third larger
        than the PDF it holds, so it stays within the upstream's request size; larger
        documents are uploaded, which streams them to a temporary file."""
        return min(self.max_document_bytes, 32 * MIB)

    @property
    def default_model(self) -> str:
        if self.model:
            return self.model
        return DEFAULT_MODEL if self.anthropic_api_key else LOCAL_MODEL

    @property
    def upstream_name(self) -> str:
        """Which upstream answers questions: the real API or the embedded local engine."""
        return "anthropic" if self.anthropic_api_key else "local"
