"""The answers half of the contract but the Answer itself (``app.answers.answer``): the request,
the streamed events' data, and a conversation with its answers."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)

from app.answers.answer import AnswerDocument, AnswerOut, ResolvedCitation, SupportMode
from app.ids import NO_NUL, Id
from app.upstream.wire import MAX_DOCUMENTS_PER_REQUEST


class Retrieval(BaseModel):
    """How the documents reach the model: whole, or the passages that matter."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["auto", "documents", "passages"] = Field(
        default="auto",
        description="`documents`: whole documents. `passages`: the best passages for the "
        "question, as search results. `auto`: whole documents when they fit one request, "
        "passages otherwise.",
    )
    max_passages: int = Field(default=20, ge=1, le=100, description="Passages sent at most.")


_ONE_OF = ("document_ids", "collection_id", "conversation_id")


def _given(name: str) -> dict[str, Any]:
    """JSON Schema for "``name`` is given and not null"."""
    return {"required": [name], "properties": {name: {"not": {"type": "null"}}}}


class AnswerRequest(BaseModel):
    """A question about `document_ids` or a `collection_id`, or a follow-up in
    `conversation_id`: exactly one of the three."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"question": "What color is the grass?", "document_ids": ["doc_01jf3k2m4n5p"]}
            ],
            # What the validator below enforces, for clients and schema-driven tests (null is
            # as good as absent): exactly one of the three; a follow-up in a conversation has no
            # model, system prompt or retrieval of its own.
            "if": _given("conversation_id"),
            "then": {
                "properties": {
                    name: {"type": "null"}
                    for name in ("document_ids", "collection_id", "model", "system", "retrieval")
                }
            },
            "else": {
                "if": _given("collection_id"),
                "then": {"properties": {"document_ids": {"type": "null"}}},
                "else": {
                    "required": ["document_ids"],
                    "properties": {"document_ids": {"type": "array"}},
                },
            },
        },
    )

    question: str = Field(
        min_length=1,
        max_length=100_000,
        pattern=r"^[^\x00]*[^\s\x00][^\x00]*$",
        description="Not blank; no NUL characters.",
    )
    document_ids: list[Id] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_DOCUMENTS_PER_REQUEST,
        description="The documents, in the order the model sees.",
    )
    collection_id: Id | None = Field(
        default=None, description="Ask about the documents of this collection."
    )
    conversation_id: Id | None = Field(
        default=None, description="Ask a follow-up in this conversation, on its documents."
    )
    retrieval: Retrieval | None = Field(
        default=None, description="Whole documents or passages; `auto` when absent."
    )
    model: str | None = Field(default=None, min_length=1, max_length=200, pattern=NO_NUL)
    max_tokens: int | None = Field(default=None, ge=1, le=128_000)
    system: str | None = Field(default=None, min_length=1, pattern=NO_NUL)
    stream: bool = Field(default=False, description="Answer as server-sent events.")
    support: SupportMode | None = Field(
        default=None,
        description="How each citation's support is checked: `lexical` (in-process), `judge` "
        "(also one upstream call about the citations `lexical` did not find supported), or "
        "`off` (every citation `unchecked`). Default: the setting `CITEGATE_SUPPORT_CHECK`.",
    )

    @model_validator(mode="after")
    def _one_target(self) -> AnswerRequest:
        given = [name for name in _ONE_OF if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of document_ids, collection_id, conversation_id")
        if self.conversation_id is not None and (self.model or self.system or self.retrieval):
            raise ValueError("a conversation fixes its model, system prompt and retrieval")
        return self


class TokenCount(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"input_tokens": 2095}]})

    input_tokens: int = Field(ge=0, description="Input tokens the question would use upstream.")


# The data of the streamed events (``"stream": true``). ``answer.done`` carries the Answer and
# ``error`` a problem document.


class AnswerStartedData(BaseModel):
    """`answer.started`: the answer's id and what it is about."""

    id: str
    conversation_id: str | None
    model: str
    documents: list[AnswerDocument]


class SegmentStartedData(BaseModel):
    """`segment.started`: a new segment begins."""

    segment_index: int = Field(ge=0)


class TextDeltaData(BaseModel):
    """`text.delta`: text to append to the segment."""

    segment_index: int = Field(ge=0)
    text: str


class CitationData(BaseModel):
    """`citation`: a citation of the segment, resolved to a stored span."""

    segment_index: int = Field(ge=0)
    citation: ResolvedCitation


class SegmentDoneData(BaseModel):
    """`segment.done`: the segment is complete."""

    segment_index: int = Field(ge=0)


STREAM_EVENT_DATA: dict[str, type[BaseModel]] = {
    "answer.started": AnswerStartedData,
    "segment.started": SegmentStartedData,
    "text.delta": TextDeltaData,
    "citation": CitationData,
    "segment.done": SegmentDoneData,
    "answer.done": AnswerOut,
}


# A conversation as the API shows it: its turns are answers.


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
