"""The Answer: what an answer is as the API shows it, the same on create, at the end of a
stream, in a batch and on read. Made of the answer's row (``AnswerOut.of_row``); the route's
``response_model`` renders and documents it."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializeAsAny,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)

from app.search.schemas import PassageOut


class SpanBox(BaseModel):
    """One line of a cited PDF passage on its page: fractions of the displayed page's width
    and height, origin top left."""

    page: int = Field(ge=1, description="The 1-based page the rectangle is on.")
    x0: float = Field(ge=0, le=1)
    y0: float = Field(ge=0, le=1)
    x1: float = Field(ge=0, le=1)
    y1: float = Field(ge=0, le=1)


class Span(BaseModel):
    """Where a citation points in the stored document text (code point offsets)."""

    start_char: int
    end_char: int
    start_page: int | None = Field(description="First page of the span (PDFs).")
    end_page: int | None = Field(description="Last page of the span, inclusive (PDFs).")
    chunk_indices: list[int]
    locator: dict[str, Any] | None = Field(
        default=None,
        description="Where the span stands in a converted document's original: its first "
        'chunk\'s locator (`{"paragraph": 12}`, `{"slide": 4}`), or for spreadsheet rows '
        'every row cited (`{"sheet": "Q3", "rows": [14, 15]}`); null for text and PDF.',
    )
    boxes: list[SpanBox] = Field(
        default_factory=list,
        description="For a PDF, PDFium's boxes of the cited characters, one per line of text; "
        "empty for other kinds. On every stored Answer (and so in `answer.done`); a streamed "
        "`citation` event, sent before the boxes are measured, has none.",
    )


SupportMode = Literal["lexical", "judge", "off"]
"""How citations' support is checked (``AnswerRequest.support``)."""


class SupportReason(BaseModel):
    """Why a citation does not (fully) support its claim."""

    code: str = Field(
        description="`number_not_in_source`, `date_not_in_source`, `unit_mismatch`, "
        "`negation_mismatch`, `entity_not_in_source`, `low_overlap`; from the judge "
        "`judge_partial`, `judge_unsupported` and `judge_failed`. More may be added."
    )
    claim: str = Field(description="The words of the claim the reason is about.")
    detail: str


class CitationSupport(BaseModel):
    """Whether the cited text supports the segment that cites it."""

    verdict: Literal["supported", "partial", "unsupported", "unchecked"]
    score: float = Field(ge=0, le=1, description="How well, 0 to 1.")
    method: Literal["lexical", "judge"]
    reasons: list[SupportReason]


class _Resolved(BaseModel):
    """A citation as the upstream sent it (every field kept), resolved to a stored span."""

    model_config = ConfigDict(extra="allow")  # every field the upstream sent is kept

    cited_text: str
    document_id: str | None = Field(description="The stored document cited; null for web results.")
    span: Span | None
    verified: bool = Field(description="The stored text at span matches cited_text.")
    support: CitationSupport | None = Field(
        default=None,
        description="Whether cited_text supports the segment's text (absent on answers stored "
        "before support was checked).",
    )


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


_KnownCitation = Annotated[
    CharLocationCitation
    | PageLocationCitation
    | ContentBlockLocationCitation
    | SearchResultLocationCitation
    | WebSearchResultLocationCitation,
    Field(discriminator="type"),
]


def _as_sent(value: Any, validate: ValidatorFunctionWrapHandler) -> Any:
    """A citation that fits none of the models above is kept as it came, resolved: one of a
    type the upstream added since (the schema tells a client to skip a type it does not know),
    or one the upstream sent without a field its type has."""
    try:
        return validate(value)
    except ValidationError:
        if isinstance(value, Mapping):
            return dict(value)
        raise


# Serialized as what it holds: a citation model, or the citation as it came.
ResolvedCitation = SerializeAsAny[Annotated[_KnownCitation, WrapValidator(_as_sent)]]


class Segment(BaseModel):
    """One upstream text block; `start`/`end` are offsets in the answer text."""

    text: str
    start: int = Field(description="Code point offset of the segment in the answer text.")
    end: int = Field(description="Exclusive end offset.")
    citations: list[ResolvedCitation] = Field(
        description="The citations of this segment, by `type`. The upstream may add citation "
        "types: a client should skip a type it does not know."
    )


class AnswerDocument(BaseModel):
    document_index: int
    document_id: str
    title: str | None


class SupportCheckUsage(BaseModel):
    """The tokens of the judge's call (not counted in the answer's own)."""

    input_tokens: int
    output_tokens: int


class AnswerUsage(BaseModel):
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    support_check: SupportCheckUsage | None = Field(
        default=None, description="The support judge's call, when the answer was judged."
    )


USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)
"""The token counts an answer keeps, as the upstream names them."""


class SupportSummary(BaseModel):
    """How many of the answer's citations have each verdict, and how many segments with text
    cite nothing."""

    supported: int
    partial: int
    unsupported: int
    unchecked: int
    uncited_segments: int


def support_summary(segments: list[dict[str, Any]]) -> dict[str, int]:
    """The summary of an answer's segments (as stored): a citation stored before support was
    checked counts as unchecked."""
    summary = dict.fromkeys(("supported", "partial", "unsupported", "unchecked"), 0)
    uncited = 0
    for segment in segments:
        citations = segment.get("citations") or []
        if not citations and any(ch.isalnum() for ch in segment.get("text") or ""):
            uncited += 1
        for citation in citations:
            support = citation.get("support") if isinstance(citation, Mapping) else None
            verdict = support.get("verdict") if isinstance(support, Mapping) else None
            summary[verdict if verdict in summary else "unchecked"] += 1
    return {**summary, "uncited_segments": uncited}


class UpstreamIds(BaseModel):
    message_id: str | None
    request_id: str | None


# FastAPI drops null members from examples: these have none.
_CITATION_EXAMPLE: dict[str, JsonValue] = {
    "type": "page_location",
    "cited_text": "Revenue grew 12% in the third quarter. ",
    "document_index": 0,
    "document_title": "Q3 report",
    "start_page_number": 2,
    "end_page_number": 3,
    "document_id": "doc_01jf3k2m4n5p",
    "span": {
        "start_char": 1804,
        "end_char": 1843,
        "start_page": 2,
        "end_page": 2,
        "chunk_indices": [21],
        "boxes": [{"page": 2, "x0": 0.118, "y0": 0.302, "x1": 0.861, "y1": 0.318}],
    },
    "verified": True,
    "support": {"verdict": "supported", "score": 1.0, "method": "lexical", "reasons": []},
}
_ANSWER_EXAMPLE: dict[str, JsonValue] = {
    "id": "ans_01jf3k4q5r6s",
    "conversation_id": "conv_01jf3k6t7v8w",
    "status": "completed",
    "question": "How did revenue develop?",
    "model": "claude-sonnet-4-5",
    "stop_reason": "end_turn",
    "text": "According to the report, revenue grew 12% in the third quarter.",
    "segments": [
        {"text": "According to the report, ", "start": 0, "end": 25, "citations": []},
        {
            "text": "revenue grew 12% in the third quarter.",
            "start": 25,
            "end": 63,
            "citations": [_CITATION_EXAMPLE],
        },
    ],
    "documents": [{"document_index": 0, "document_id": "doc_01jf3k2m4n5p", "title": "Q3 report"}],
    "retrieval": {"mode": "documents", "passages": [], "first_new_passage": 0},
    "usage": {
        "input_tokens": 2095,
        "output_tokens": 31,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 2048,
    },
    "upstream": {"message_id": "msg_01XFDUDYJgAACzvnptvVoYEL", "request_id": "req_011CV7x8y9z"},
    "created_at": "2025-01-01T12:00:00Z",
    "support_summary": {
        "supported": 1,
        "partial": 0,
        "unsupported": 0,
        "unchecked": 0,
        "uncited_segments": 1,
    },
}


class AnswerRetrieval(BaseModel):
    """What was sent: whole documents, or passages in the order sent (so that a citation's
    `search_result_index` indexes them)."""

    mode: Literal["documents", "passages"]
    passages: list[PassageOut]
    first_new_passage: int = Field(
        ge=0,
        description="The first of `passages` retrieved for this question; those before it were "
        "retrieved for earlier turns of the conversation and sent again.",
    )


class AnswerOut(BaseModel):
    """A stored answer; the same on create, at the end of a stream and on read."""

    model_config = ConfigDict(json_schema_extra={"examples": [_ANSWER_EXAMPLE]})

    id: str
    conversation_id: str | None
    status: Literal["in_progress", "completed", "failed", "cancelled", "interrupted"] = Field(
        description="`in_progress` while its stream is relayed, holding the text that arrived "
        "(saved about once a second); then `completed`, `failed` (the upstream failed, or the "
        "stream broke), `cancelled` (the client went away), or `interrupted` (the process "
        "relaying it ended first, a crash: the text that had arrived was kept)."
    )
    question: str
    model: str
    stop_reason: str | None
    text: str
    segments: list[Segment]
    documents: list[AnswerDocument]
    retrieval: AnswerRetrieval
    usage: AnswerUsage
    upstream: UpstreamIds
    created_at: datetime
    support_summary: SupportSummary = Field(
        description="The citations by support verdict, and the segments with text that cite "
        "nothing."
    )

    # Shown without the fields its parts were not given (``exclude_unset``; the routes that
    # return it say ``response_model_exclude_unset``): a citation keeps exactly the fields the
    # upstream sent, and an answer stored before a field existed shows none of it.
    def shown(self) -> dict[str, Any]:
        """The Answer as JSON data."""
        return self.model_dump(mode="json", exclude_unset=True)

    def shown_json(self) -> str:
        """The Answer as JSON."""
        return self.model_dump_json(exclude_unset=True)

    @classmethod
    def of_row(cls, row: Mapping[str, Any]) -> AnswerOut:
        """The Answer of a stored answer's row (the answers table's columns)."""
        return cls.model_validate(
            {
                **row,
                # Stored before retrieval was recorded: whole documents.
                "retrieval": row["retrieval"] or whole_documents(),
                "upstream": {
                    "message_id": row["upstream_message_id"],
                    "request_id": row["upstream_request_id"],
                },
                "support_summary": support_summary(row["segments"]),
            }
        )


def whole_documents() -> dict[str, Any]:
    """The retrieval of an answer whole documents were sent for (a new dict each time)."""
    return {"mode": "documents", "passages": [], "first_new_passage": 0}
