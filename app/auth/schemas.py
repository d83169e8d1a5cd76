"""The administration half of the contract: tenants and API keys, as requests and responses."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, JsonValue

from app.auth.scopes import Scope
from app.ids import NO_NUL, Id

_NEXT_CURSOR = "`cursor` for the next page; null on the last page."
Name = Field(min_length=1, max_length=200, pattern=NO_NUL)
_BUDGET_FIELD = (
    "At most this much spent upstream per period (reserved before each call at its maximum "
    "cost, settled after); null: no budget. On an update, absent leaves it as it is."
)


class Budget(BaseModel):
    """A spending limit: US dollars per UTC day, calendar month, or in total."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"usd": "50.00", "period": "month"}]}
    )

    usd: str = Field(
        pattern=r"^[0-9]{1,9}(\.[0-9]{1,9})?$",
        description="US dollars as a decimal string, not negative (at most 9 decimals).",
        examples=["50.00"],
    )
    period: Literal["day", "month", "total"] = Field(
        description="`day` and `month` roll over at UTC midnight and on the 1st; `total` never."
    )


class CreateTenantRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"name": "search"}]})

    name: str = Name
    budget: Budget | None = Field(default=None, description=_BUDGET_FIELD)


class UpdateTenantRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"name": "search-team"}]}
    )

    name: str | None = Field(default=None, min_length=1, max_length=200, pattern=NO_NUL)
    budget: Budget | None = Field(default=None, description=_BUDGET_FIELD)


class TenantOut(BaseModel):
    """Who owns data: documents, answers and keys belong to one tenant."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "ten_01jf3k2m4n5p",
                    "name": "search",
                    "created_at": "2025-01-01T12:00:00Z",
                    "budget": {"usd": "50.00", "period": "month"},
                }
            ]
        }
    )

    id: str
    name: str
    created_at: datetime
    budget: Budget | None = Field(default=None, description="Its budget; null: none.")


class TenantPage(BaseModel):
    """A page of tenants, oldest first."""

    data: list[TenantOut]
    next_cursor: str | None = Field(description=_NEXT_CURSOR)


class CreateApiKeyRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "tenant_id": "ten_01jf3k2m4n5p",
                    "name": "indexer",
                    "scopes": ["read", "write"],
                    "expires_at": "2026-01-01T00:00:00Z",
                }
            ]
        },
    )

    tenant_id: Id | None = Field(
        default=None, description="The key's tenant; by default the caller's own."
    )
    name: str | None = Field(default=None, min_length=1, max_length=200, pattern=NO_NUL)
    scopes: list[Scope] = Field(
        default_factory=lambda: [Scope.READ, Scope.WRITE],
        max_length=4,
        description="What the key may do; only scopes the caller holds can be granted.",
    )
    expires_at: AwareDatetime | None = Field(
        default=None, description="When the key stops working; never by default."
    )
    budget: Budget | None = Field(default=None, description=_BUDGET_FIELD)


class UpdateApiKeyRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"status": "disabled"}]}
    )

    name: str | None = Field(default=None, min_length=1, max_length=200, pattern=NO_NUL)
    scopes: list[Scope] | None = Field(default=None, max_length=4)
    status: Literal["active", "disabled"] | None = Field(
        default=None, description="`disabled`: refused until made `active` again."
    )
    budget: Budget | None = Field(default=None, description=_BUDGET_FIELD)


class RotateApiKeyRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"grace_seconds": 3600}]}
    )

    grace_seconds: int = Field(
        default=0,
        strict=True,  # not `false` for 0, nor "60"
        ge=0,
        le=30 * 24 * 3600,
        description="How long the old secret keeps working; 0: it stops at once.",
    )


_KEY_EXAMPLE: dict[str, JsonValue] = {
    "id": "key_01jf3k2m4n5p",
    "tenant_id": "ten_01jf3k2m4n5p",
    "name": "indexer",
    "prefix": "cg_Zx81kPq2a",
    "scopes": ["read", "write"],
    "status": "active",
    "created_at": "2025-01-01T12:00:00Z",
    "expires_at": None,
    "revoked_at": None,
    "previous_secret_expires_at": None,
    "budget": {"usd": "10.00", "period": "day"},
}


class ApiKeyOut(BaseModel):
    """An API key as administrators see it: never its secret."""

    model_config = ConfigDict(json_schema_extra={"examples": [_KEY_EXAMPLE]})

    id: str
    tenant_id: str
    name: str | None
    prefix: str = Field(description="The secret's first characters, to tell keys apart.")
    scopes: list[str]
    status: Literal["active", "disabled", "revoked", "expired"]
    created_at: datetime
    expires_at: datetime | None = Field(default=None, description="When it stops working.")
    revoked_at: datetime | None = None
    previous_secret_expires_at: datetime | None = Field(
        default=None,
        description="After a rotation with a grace period: when the old secret stops working.",
    )
    budget: Budget | None = Field(default=None, description="Its budget; null: none.")


class ApiKeyWithSecret(ApiKeyOut):
    """A key just made or rotated, with its secret: shown this once, stored only as a hash."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                _KEY_EXAMPLE | {"secret": "cg_Zx81kPq2aQ7m0b3F9vT2yL8cN4dR6wX1eJ5hK0sU3pA"}
            ]
        }
    )

    secret: str = Field(description="`Authorization: Bearer <secret>`. Shown once.")


class ApiKeyPage(BaseModel):
    """A page of API keys, newest first."""

    data: list[ApiKeyOut]
    next_cursor: str | None = Field(description=_NEXT_CURSOR)


class AuditEventOut(BaseModel):
    """An admin action: who, what, when, from where. Never a secret."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "aud_01jf3k2m4n5p",
                    "tenant_id": "ten_01jf3k2m4n5p",
                    "actor_key_id": "key_01jf3k2m4n00",
                    "actor_tenant_id": "ten_01jf3k2m4n5p",
                    "via": "http",
                    "action": "api_key.rotated",
                    "target_type": "api_key",
                    "target_id": "key_01jf3k2m4n5p",
                    "client_address": "10.0.0.7",
                    "request_id": "5f0c6e7f0b7d4a3e9c1d2b3a4f5e6d7c",
                    "details": {"prefix": "cg_Zx81kPq2a", "grace_seconds": 3600},
                    "created_at": "2025-01-01T12:00:00Z",
                }
            ]
        }
    )

    id: str
    tenant_id: str | None = Field(description="The tenant the target belongs to.")
    actor_key_id: str | None = Field(
        description="The key that acted; null for the command line or start-up."
    )
    actor_tenant_id: str | None
    via: Literal["http", "cli", "bootstrap"]
    action: str = Field(
        description="`tenant.created`, `tenant.updated`, `api_key.created`, `api_key.updated`, "
        "`api_key.revoked`, `api_key.rotated`."
    )
    target_type: Literal["tenant", "api_key"]
    target_id: str
    client_address: str | None = Field(description="The caller's address, as the server saw it.")
    request_id: str | None = Field(description="The request's `X-Request-ID`.")
    details: dict[str, JsonValue] = Field(description="The fields the action set.")
    created_at: datetime


class AuditEventPage(BaseModel):
    """A page of audit events, newest first."""

    data: list[AuditEventOut]
    next_cursor: str | None = Field(description=_NEXT_CURSOR)
