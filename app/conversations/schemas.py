"""The conversations half of the contract."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.answers.schemas import AnswerDocument, AnswerOut
from app.documents.schemas import NO_NUL, Id
from app.upstream.wire import MAX_DOCUMENTS_PER_REQUEST


class ConversationRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"document_ids": ["doc_01jf3k2m4n5p"], "title": "Q3 report questions"}],
            # What the validator below enforces, for clients and schema-driven tests.
            "if": {
                "required": ["collection_id"],
                "properties": {"collection_id": {"type": "string"}},
            },
            "then": {"properties": {"document_ids": {"type": "null"}}},
            "else": {
                "required": ["document_ids"],
                "properties": {"document_ids": {"type": "array"}},
            },
        },
    )

    document_ids: list[Id] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_DOCUMENTS_PER_REQUEST,
        description="Sent whole with every turn, in this order. Not with collection_id.",
    )
    collection_id: Id | None = Field(
        default=None,
        description="Each turn retrieves its own passages from this collection's documents.",
    )
    system: str | None = Field(default=None, min_length=1, pattern=NO_NUL)
    model: str | None = Field(default=None, min_length=1, max_length=200, pattern=NO_NUL)
    title: str | None = Field(default=None, min_length=1, max_length=500, pattern=NO_NUL)

    @model_validator(mode="after")
    def _documents_or_collection(self) -> ConversationRequest:
        if (self.document_ids is None) == (self.collection_id is None):
            raise ValueError("give either document_ids or collection_id, not both or neither")
        return self


class ConversationOut(BaseModel):
    """A conversation: fixed documents, model and system prompt; its turns are answers."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "conv_01jf3k6t7v8w",
                    "title": "Q3 report questions",
                    "system": "Answer in one sentence.",
                    "model": "claude-sonnet-4-5",
                    "documents": [
                        {
                            "document_index": 0,
                            "document_id": "doc_01jf3k2m4n5p",
                            "title": "Q3 report",
                        }
                    ],
                    "created_at": "2025-01-01T12:00:00Z",
                    "answers": [],
                }
            ]
        }
    )

    id: str
    title: str | None
    system: str | None
    model: str | None
    documents: list[AnswerDocument] = Field(
        description="The documents sent whole with every turn; empty over a collection."
    )
    collection_id: str | None = Field(
        default=None, description="The collection each turn retrieves from."
    )
    created_at: datetime
    answers: list[AnswerOut] | None = Field(
        default=None, description="The turns in order; in getConversation only."
    )


class ConversationPage(BaseModel):
    """A page of conversations, newest first (without their answers)."""

    data: list[ConversationOut]
    next_cursor: str | None = Field(
        description="`cursor` for the next page; null on the last page."
    )
