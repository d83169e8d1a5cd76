"""The collections half of the contract: request and response bodies."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.ids import NO_NUL, Id

_NEXT_CURSOR = "`cursor` for the next page; null on the last page."


class CreateCollectionRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "name": "Handbook",
                    "description": "Every policy we publish",
                    "metadata": {"team": "people"},
                }
            ]
        },
    )

    name: str = Field(min_length=1, max_length=200, pattern=NO_NUL)
    description: str | None = Field(default=None, min_length=1, max_length=10_000, pattern=NO_NUL)
    metadata: dict[str, Any] = Field(default_factory=dict)


class AddCollectionDocumentsRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"document_ids": ["doc_01jf3k2m4n5p"]}]}
    )

    document_ids: list[Id] = Field(
        min_length=1,
        max_length=1000,
        description="Documents to add; those already in the collection stay as they are.",
    )


class CollectionOut(BaseModel):
    """A named set of the tenant's documents."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "col_01jf3k2m4n5p",
                    "name": "Handbook",
                    "description": "Every policy we publish",
                    "metadata": {"team": "people"},
                    "document_count": 12,
                    "created_at": "2025-01-01T12:00:00Z",
                }
            ]
        }
    )

    id: str = Field(examples=["col_01jf3k2m4n5p6q7r8s9t0v1w2x"])
    name: str
    description: str | None
    metadata: dict[str, Any]
    document_count: int = Field(ge=0)
    created_at: datetime


class CollectionPage(BaseModel):
    """A page of collections, newest first."""

    data: list[CollectionOut]
    next_cursor: str | None = Field(description=_NEXT_CURSOR)
