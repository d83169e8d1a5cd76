"""The conversations half of the contract."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from app.answers.schemas import AnswerDocument, AnswerOut


class ConversationRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"document_ids": ["doc_01jf3k2m4n5p"], "title": "Q3 report questions"}]
        },
    )

    document_ids: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(
        min_length=1, max_length=100, description="Fixed for every turn, in this order."
    )
    system: str | None = Field(default=None, min_length=1)
    model: str | None = Field(default=None, min_length=1, max_length=200)
    title: str | None = Field(default=None, min_length=1, max_length=500)


class ConversationOut(BaseModel):
    id: str
    title: str | None
    system: str | None
    model: str | None
    documents: list[AnswerDocument]
    created_at: datetime
    answers: list[AnswerOut] | None = Field(
        default=None, description="The turns in order; in getConversation only."
    )


class ConversationPage(BaseModel):
    data: list[ConversationOut]
    next_cursor: str | None
