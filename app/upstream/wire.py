"""The parts of the Messages API's responses that Citegate reads; everything else is kept."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_CACHE_BREAKPOINTS = 4
"""The upstream refuses a request with a fifth block carrying ``cache_control``."""
MAX_REQUEST_BYTES = 32_000_000
"""The upstream refuses a request body larger than 32 MB."""
MAX_DOCUMENTS_PER_REQUEST = 100
"""Citegate's own bound on the document blocks of one request."""


class Usage(BaseModel):
    model_config = ConfigDict(extra="allow")

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int | None = 0
    cache_read_input_tokens: int | None = 0


class ContentBlock(BaseModel):
    """Any content block; text blocks carry ``text`` and maybe ``citations``."""

    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None
    citations: list[dict[str, Any]] | None = None


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[ContentBlock]
    stop_reason: str | None = None
    usage: Usage = Field(default_factory=Usage)


class TokenCount(BaseModel):
    model_config = ConfigDict(extra="allow")

    input_tokens: int


MAX_BATCH_REQUESTS = 100_000
"""The upstream refuses a Message Batch of more requests."""
MAX_BATCH_BYTES = 256 * 1024 * 1024
"""The upstream refuses a Message Batch whose body is larger than 256 MB."""
CUSTOM_ID_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"
"""What the upstream accepts as a batch request's ``custom_id``."""


class BatchRequestCounts(BaseModel):
    model_config = ConfigDict(extra="allow")

    processing: int = 0
    succeeded: int = 0
    errored: int = 0
    canceled: int = 0
    expired: int = 0


class MessageBatch(BaseModel):
    """A Message Batch as the upstream describes it."""

    model_config = ConfigDict(extra="allow")

    id: str
    type: Literal["message_batch"]
    processing_status: Literal["in_progress", "canceling", "ended"]
    request_counts: BatchRequestCounts = Field(default_factory=BatchRequestCounts)
    created_at: datetime
    expires_at: datetime
    ended_at: datetime | None = None


class BatchPage(BaseModel):
    """A page of ``GET /v1/messages/batches``: newest first."""

    model_config = ConfigDict(extra="allow")

    data: list[MessageBatch]
    has_more: bool = False
    last_id: str | None = None


class BatchResult(BaseModel):
    """One line of a batch's results file. ``result.type``: succeeded (with ``message``),
    errored (with ``error``, an error body), canceled or expired."""

    model_config = ConfigDict(extra="allow")

    custom_id: str
    result: dict[str, Any]
