"""The answers half of the contract: the request and the resolved, stored Answer."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class AnswerRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"question": "What color is the grass?", "document_ids": ["doc_01jf3k2m4n5p"]}
            ]
        },
    )

    question: str = Field(min_length=1, max_length=100_000, pattern=r"\S")
    document_ids: list[Annotated[str, Field(min_length=1, max_length=100)]] | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        description="The documents, in the order the model sees. Not with conversation_id.",
    )
    conversation_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        description="Ask a follow-up in this conversation, on its documents.",
    )
    model: str | None = Field(default=None, min_length=1, max_length=200)
    max_tokens: int | None = Field(default=None, ge=1, le=128_000)
    system: str | None = Field(default=None, min_length=1)
    stream: bool = Field(default=False, description="Answer as server-sent events.")

    @model_validator(mode="after")
    def _documents_or_conversation(self) -> AnswerRequest:
        if (self.document_ids is None) == (self.conversation_id is None):
            raise ValueError("give either document_ids or conversation_id, not both or neither")
        if self.conversation_id is not None and (self.model or self.system):
            raise ValueError("a conversation fixes its model and system prompt")
        return self


class TokenCount(BaseModel):
    input_tokens: int


class Span(BaseModel):
    """Where a citation points in the stored document text (code point offsets)."""

    start_char: int
    end_char: int
    start_page: int | None = Field(description="First page of the span (PDFs).")
    end_page: int | None = Field(description="Last page of the span, inclusive (PDFs).")
    chunk_indices: list[int]


class _Resolved(BaseModel):
    model_config = ConfigDict(extra="allow")  # every field the upstream sent is kept

    cited_text: str
    document_id: str | None = Field(description="The stored document cited; null for web results.")
    span: Span | None
    verified: bool = Field(description="The stored text at span matches cited_text.")


class CharLocationCitation(_Resolved):
    type: Literal["char_location"]
    document_index: int
    document_title: str | None = None
    start_char_index: int
    end_char_index: int


class PageLocationCitation(_Resolved):
    type: Literal["page_location"]
    document_index: int
    document_title: str | None = None
    start_page_number: int
    end_page_number: int


class ContentBlockLocationCitation(_Resolved):
    type: Literal["content_block_location"]
    document_index: int
    document_title: str | None = None
    start_block_index: int
    end_block_index: int


class SearchResultLocationCitation(_Resolved):
    type: Literal["search_result_location"]
    search_result_index: int
    source: str
    title: str | None = None
    start_block_index: int
    end_block_index: int


class WebSearchResultLocationCitation(_Resolved):
    type: Literal["web_search_result_location"]
    url: str
    title: str | None = None
    encrypted_index: str


ResolvedCitation = Annotated[
    CharLocationCitation
    | PageLocationCitation
    | ContentBlockLocationCitation
    | SearchResultLocationCitation
    | WebSearchResultLocationCitation,
    Field(discriminator="type"),
]


class Segment(BaseModel):
    """One upstream text block; ``start``/``end`` are offsets in the answer text."""

    text: str
    start: int
    end: int
    citations: list[ResolvedCitation]


class AnswerDocument(BaseModel):
    document_index: int
    document_id: str
    title: str | None


class AnswerUsage(BaseModel):
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int


class UpstreamIds(BaseModel):
    message_id: str | None
    request_id: str | None


class AnswerOut(BaseModel):
    id: str
    conversation_id: str | None
    status: Literal["completed", "failed", "cancelled"]
    question: str
    model: str
    stop_reason: str | None
    text: str
    segments: list[Segment]
    documents: list[AnswerDocument]
    usage: AnswerUsage
    upstream: UpstreamIds
    created_at: datetime
