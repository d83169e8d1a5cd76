"""The parts of the Messages API's responses that Citegate reads; everything else is kept."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

CURRENT_VERSION = "2026-10-21"
"""The ``anthropic-version`` Citegate sends by default, and the newest the local engine speaks."""
DEFAULT_MODEL = "claude-sonnet-5"
"""The model asked when a question names none and the real API answers."""
LOCAL_MODEL = "citegate-local-1"
"""The model name the embedded local engine answers as."""
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
