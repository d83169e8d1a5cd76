"""Every setting of the service, read from environment variables (``CITEGATE_*``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

MIB = 1024 * 1024


class Settings(BaseSettings):
    """Service configuration. Nothing reads the environment at import time: build one of these."""

    model_config = SettingsConfigDict(env_prefix="CITEGATE_", extra="ignore")

    database_url: str = Field(
        default="sqlite+aiosqlite:///./data/citegate.db",
        description="SQLAlchemy async URL: sqlite+aiosqlite:///… or postgresql+asyncpg://…",
    )
    max_document_bytes: int = Field(
        default=32 * MIB,
        gt=0,
        description="Largest document accepted, in bytes (the upstream's request limit).",
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
    rate_limit_per_minute: int = Field(
        default=600, ge=0, description="Requests per minute per API key; 0 turns it off."
    )
    token_limit_per_day: int = Field(
        default=0, ge=0, description="Upstream tokens per day per API key; 0 turns it off."
    )
    redis_url: str | None = Field(
        default=None,
        description="redis://host:port/db to share rate-limit counters between replicas; "
        "without it they live in the process.",
    )
    anthropic_api_key: SecretStr | None = Field(
        default=None,
        validation_alias="ANTHROPIC_API_KEY",
        description="With a key the Messages API answers; without, the local engine.",
    )

    @property
    def upstream_name(self) -> str:
        """Which upstream answers questions: the real API or the embedded local engine."""
        return "anthropic" if self.anthropic_api_key else "local"
