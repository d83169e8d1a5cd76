"""Every setting of the service, read from environment variables (``CITEGATE_*``)."""

from __future__ import annotations

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
    anthropic_api_key: SecretStr | None = Field(
        default=None,
        validation_alias="ANTHROPIC_API_KEY",
        description="With a key the Messages API answers; without, the local engine.",
    )

    @property
    def upstream_name(self) -> str:
        """Which upstream answers questions: the real API or the embedded local engine."""
        return "anthropic" if self.anthropic_api_key else "local"
