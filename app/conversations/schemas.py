"""What creating a conversation takes. (A conversation as the API shows it has its turns, which
are answers: ``app.answers.schemas.ConversationOut``.)"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.ids import NO_NUL, Id
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
