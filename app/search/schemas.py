"""searchPassages: its request and the passages it answers."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.ids import Id

MAX_SEARCH_LIMIT = 100


class SearchRequest(BaseModel):
    """A query over a collection or over some documents (exactly one of the two)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"query": "How do I get a refund?", "collection_id": "col_01jf3k2m4n5p"}],
            # What the validator below enforces, for clients and schema-driven tests (null is
            # as good as absent).
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

    query: str = Field(
        min_length=1,
        max_length=10_000,
        pattern=r"^[^\x00]*$",
        description="Words to look for; never query syntax (quotes, operators are words).",
    )
    collection_id: Id | None = Field(default=None, description="Search this collection.")
    document_ids: list[Id] | None = Field(
        default=None, min_length=1, max_length=1000, description="Or search these documents."
    )
    limit: int = Field(default=10, ge=1, le=MAX_SEARCH_LIMIT, description="Passages at most.")

    @model_validator(mode="after")
    def _collection_or_documents(self) -> SearchRequest:
        if (self.collection_id is None) == (self.document_ids is None):
            raise ValueError("give either collection_id or document_ids, not both or neither")
        return self


class PassageOut(BaseModel):
    """A run of adjacent chunks of one document, never across pages."""

    document_id: str
    title: str | None
    text: str = Field(description="The chunks' texts joined: the document text it spans.")
    start_char: int = Field(description="Code point offset into the document text.")
    end_char: int = Field(description="Exclusive end offset.")
    start_page: int | None = Field(description="1-based page of a PDF passage.")
    end_page: int | None
    chunk_indices: list[int]
    score: float = Field(description="Relevance; higher is better, comparable within a search.")


class SearchResponse(BaseModel):
    """The passages, best first."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "data": [
                        {
                            "document_id": "doc_01jf3k2m4n5p",
                            "title": "Refunds",
                            "text": "Refunds are paid within 14 days. Ask support to start one.",
                            "start_char": 1200,
                            "end_char": 1258,
                            "start_page": 3,
                            "end_page": 3,
                            "chunk_indices": [14, 15],
                            "score": 12.7,
                        }
                    ]
                }
            ]
        }
    )

    data: list[PassageOut]
