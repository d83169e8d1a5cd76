"""The Messages API on the wire: request parameters as the local engine validates them, and the
response shapes it writes.

Request models forbid unknown fields, as the real API does, so that pydantic's errors read like the
upstream's (``messages.0.content.1.text.citations: Extra inputs are not permitted``). Blocks the
engine does not read (images, tool use, thinking, ...) are accepted loosely and only hashed and
counted. Message ``content`` and ``system`` are validated in a second pass
(``request_validation``) because which blocks are allowed depends on the role and on the
``anthropic-version``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictBool, Tag, field_validator

from app.settings import CURRENT_VERSION
from app.settings import LOCAL_MODEL as MODEL_NAME

__all__ = ["CURRENT_VERSION", "MODEL_NAME"]


class _Forbidding(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- request -------------------------------------------------------------------------------------


class CacheControlParam(_Forbidding):
    """A prompt-cache breakpoint; ``ttl`` absent means 5 minutes."""

    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None

    @property
    def seconds(self) -> float:
        """How long an entry written at this breakpoint lives."""
        return 3600.0 if self.ttl == "1h" else 300.0

    @property
    def label(self) -> Literal["5m", "1h"]:
        """The TTL as the API names it."""
        return self.ttl or "5m"


class CitationsConfigParam(_Forbidding):
    """The only citation config the API knows: ``{"enabled": bool}``."""

    enabled: StrictBool


class CitationParam(BaseModel):
    """A citation replayed in an earlier assistant turn; kept as given, never checked."""

    model_config = ConfigDict(extra="allow")

    type: Literal[
        "char_location",
        "content_block_location",
        "page_location",
        "search_result_location",
        "web_search_result_location",
    ]
    cited_text: str


class TextBlockParam(_Forbidding):
    """A text block as assistant turns (and, before 2026-10-21, user turns) may send it."""

    type: Literal["text"]
    text: str
    cache_control: CacheControlParam | None = None
    citations: list[CitationParam] | None = None


class UncitedTextBlockParam(_Forbidding):
    """A text block that may not carry ``citations``: in ``system``, in a content document, and
    in a user turn under 2026-10-21."""

    type: Literal["text"]
    text: str
    cache_control: CacheControlParam | None = None


class ImageBlockParam(BaseModel):
    """An image; accepted and hashed, never read (images are not citable)."""

    model_config = ConfigDict(extra="allow")

    type: Literal["image"]
    cache_control: CacheControlParam | None = None


class OtherBlockParam(BaseModel):
    """Blocks the engine passes over in an assistant turn: tool use and results, search results,
    thinking, server tool results."""

    model_config = ConfigDict(extra="allow")

    type: Literal[
        "bash_code_execution_tool_result",
        "code_execution_tool_result",
        "container_upload",
        "redacted_thinking",
        "search_result",
        "server_tool_use",
        "text_editor_code_execution_tool_result",
        "thinking",
        "tool_result",
        "tool_search_tool_result",
        "tool_use",
        "web_fetch_tool_result",
        "web_search_tool_result",
    ]
    cache_control: CacheControlParam | None = None


class OtherUserBlockParam(BaseModel):
    """Blocks the engine passes over in a user turn: those of ``OtherBlockParam`` except search
    results and tool results, which a user turn's citable sources come in."""

    model_config = ConfigDict(extra="allow")

    type: Literal[
        "bash_code_execution_tool_result",
        "code_execution_tool_result",
        "container_upload",
        "redacted_thinking",
        "server_tool_use",
        "text_editor_code_execution_tool_result",
        "thinking",
        "tool_search_tool_result",
        "tool_use",
        "web_fetch_tool_result",
        "web_search_tool_result",
    ]
    cache_control: CacheControlParam | None = None


class PlainTextSource(_Forbidding):
    """``{"type": "text", "media_type": "text/plain", "data": ...}``."""

    type: Literal["text"]
    media_type: Literal["text/plain"]
    data: str


class Base64PdfSource(_Forbidding):
    """``{"type": "base64", "media_type": "application/pdf", "data": ...}``."""

    type: Literal["base64"]
    media_type: Literal["application/pdf"]
    data: str


class UrlPdfSource(_Forbidding):
    """A PDF by URL; the local engine has no network and refuses it."""

    type: Literal["url"]
    url: str


class FileSource(_Forbidding):
    """A Files API file; the local engine has no file store and refuses it."""

    type: Literal["file"]
    file_id: str


ContentSourceBlock = Annotated[UncitedTextBlockParam | ImageBlockParam, Field(discriminator="type")]


class ContentSource(_Forbidding):
    """Caller-chunked content: each text block is one citable unit."""

    type: Literal["content"]
    content: str | list[ContentSourceBlock]


DocumentSource = Annotated[
    PlainTextSource | Base64PdfSource | ContentSource | UrlPdfSource | FileSource,
    Field(discriminator="type"),
]


class DocumentBlockParam(_Forbidding):
    """A document block; ``title`` and ``context`` are never cited."""

    type: Literal["document"]
    source: DocumentSource
    title: str | None = Field(default=None, min_length=1, max_length=500)
    context: str | None = Field(default=None, min_length=1)
    citations: CitationsConfigParam | None = None
    cache_control: CacheControlParam | None = None

    @property
    def citations_enabled(self) -> bool:
        """Whether this document asks for citations."""
        return self.citations is not None and self.citations.enabled


class SearchResultBlockParam(_Forbidding):
    """A retrieved passage: each text block of ``content`` is one citable unit, cited with
    ``search_result_location``; citations are off unless enabled."""

    type: Literal["search_result"]
    source: str
    title: str
    content: list[UncitedTextBlockParam] = Field(min_length=1)
    citations: CitationsConfigParam | None = None
    cache_control: CacheControlParam | None = None

    @property
    def citations_enabled(self) -> bool:
        """Whether this search result asks for citations."""
        return self.citations is not None and self.citations.enabled


class ToolResultContentParam(BaseModel):
    """A block of a tool result other than text or a search result (an image, a document, ...);
    accepted, hashed and counted, never read."""

    model_config = ConfigDict(extra="allow")

    type: str
    cache_control: CacheControlParam | None = None


def _tool_result_content_tag(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in ("search_result", "text") else "other"


# Tagged by a function so that an unknown block type falls to the loose model, while a faulty
# search result is reported as one (a plain union would quietly accept it as "other").
ToolResultContent = Annotated[
    Annotated[SearchResultBlockParam, Tag("search_result")]
    | Annotated[TextBlockParam, Tag("text")]
    | Annotated[ToolResultContentParam, Tag("other")],
    Discriminator(_tool_result_content_tag),
]


class ToolResultBlockParam(BaseModel):
    """A tool's answer. Only its search results are read (they are citable); the rest is
    hashed and counted. String content is taken as one text block."""

    model_config = ConfigDict(extra="allow")

    type: Literal["tool_result"]
    tool_use_id: str
    content: list[ToolResultContent] = Field(default_factory=list)
    cache_control: CacheControlParam | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _text_as_block(cls, value: Any) -> Any:
        # One shape for both forms, so that errors inside a list are located without naming
        # the alternatives of a union ("content.0.search_result.content", not "content.str").
        if isinstance(value, str):
            return [{"type": "text", "text": value}] if value else []
        return value

    @property
    def search_results(self) -> list[SearchResultBlockParam]:
        """The search results of this tool result, in order."""
        return [item for item in self.content if isinstance(item, SearchResultBlockParam)]


UserBlock = Annotated[
    DocumentBlockParam
    | SearchResultBlockParam
    | ToolResultBlockParam
    | ImageBlockParam
    | UncitedTextBlockParam
    | OtherUserBlockParam,
    Field(discriminator="type"),
]
LegacyUserBlock = Annotated[
    DocumentBlockParam
    | SearchResultBlockParam
    | ToolResultBlockParam
    | ImageBlockParam
    | TextBlockParam
    | OtherUserBlockParam,
    Field(discriminator="type"),
]
AssistantBlock = Annotated[
    ImageBlockParam | TextBlockParam | OtherBlockParam, Field(discriminator="type")
]
LegacyAssistantBlock = Annotated[
    DocumentBlockParam | ImageBlockParam | TextBlockParam | OtherBlockParam,
    Field(discriminator="type"),
]

Block = (
    DocumentBlockParam
    | SearchResultBlockParam
    | ToolResultBlockParam
    | ImageBlockParam
    | TextBlockParam
    | UncitedTextBlockParam
    | OtherBlockParam
    | OtherUserBlockParam
)
# The blocks a citation can point into: ``document_index`` counts the first, and
# ``search_result_index`` the second, each on its own.
CitableBlock = DocumentBlockParam | SearchResultBlockParam


class RawMessageParam(_Forbidding):
    """A turn before its content is checked against what its role allows."""

    role: Literal["user", "assistant", "system"]
    content: Any


class ToolParam(BaseModel):
    """A tool definition; hashed and counted, never called."""

    model_config = ConfigDict(extra="allow")

    cache_control: CacheControlParam | None = None


class _MaxTokens(BaseModel):
    # A base of its own so that pydantic checks max_tokens first, as the upstream does
    # (`{"model": "m", "messages": [{}]}` answers "max_tokens: Field required").
    max_tokens: int = Field(ge=1)


class _PromptFields(_Forbidding):
    messages: list[RawMessageParam]
    model: str = Field(min_length=1)
    system: Any = None
    tools: list[ToolParam] | None = None
    tool_choice: dict[str, Any] | None = None
    cache_control: CacheControlParam | None = None
    thinking: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None
    speed: Literal["standard", "fast"] | None = None
    container: Any = None
    context_management: dict[str, Any] | None = None
    diagnostics: dict[str, Any] | None = None
    mcp_servers: list[dict[str, Any]] | None = None
    user_profile_id: str | None = None
    workspace_id: str | None = None


class CreateMessageParams(_PromptFields, _MaxTokens):
    """The body of ``POST /v1/messages``."""

    metadata: dict[str, Any] | None = None
    stop_sequences: list[str] | None = None
    stream: bool | None = None
    service_tier: Literal["auto", "standard_only"] | None = None
    inference_geo: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None


class CountTokensParams(_PromptFields):
    """The body of ``POST /v1/messages/count_tokens``."""


# --- response ------------------------------------------------------------------------------------


class CharLocation(BaseModel):
    """A citation of a plain-text document: ``data[start_char_index:end_char_index]``."""

    type: Literal["char_location"] = "char_location"
    cited_text: str
    document_index: int
    document_title: str | None
    start_char_index: int
    end_char_index: int


class PageLocation(BaseModel):
    """A citation of a PDF: pages 1-based, end exclusive."""

    type: Literal["page_location"] = "page_location"
    cited_text: str
    document_index: int
    document_title: str | None
    start_page_number: int
    end_page_number: int


class ContentBlockLocation(BaseModel):
    """A citation of a content document: block indices 0-based, end exclusive."""

    type: Literal["content_block_location"] = "content_block_location"
    cited_text: str
    document_index: int
    document_title: str | None
    start_block_index: int
    end_block_index: int


class SearchResultLocation(BaseModel):
    """A citation of a search result: block indices into its ``content``, end exclusive."""

    type: Literal["search_result_location"] = "search_result_location"
    cited_text: str
    source: str
    title: str | None
    search_result_index: int
    start_block_index: int
    end_block_index: int


Citation = Annotated[
    CharLocation | PageLocation | ContentBlockLocation | SearchResultLocation,
    Field(discriminator="type"),
]


class TextBlock(BaseModel):
    """An answer's text block; an uncited one carries no ``citations`` key."""

    type: Literal["text"] = "text"
    text: str
    citations: list[Citation] | None = Field(default=None, exclude_if=lambda value: value is None)


class CacheCreation(BaseModel):
    """Cache-write tokens by TTL."""

    ephemeral_5m_input_tokens: int = 0
    ephemeral_1h_input_tokens: int = 0


class Usage(BaseModel):
    """Token counts; total input is ``input + cache creation + cache read``."""

    input_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation: CacheCreation = Field(default_factory=CacheCreation)
    output_tokens: int
    service_tier: Literal["standard"] = "standard"


class ToolUseBlock(BaseModel):
    """A call of a tool the request offered: the engine makes one only to judge support."""

    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]


StopReason = Literal["end_turn", "max_tokens", "stop_sequence"]


class Message(BaseModel):
    """A complete answer, as ``POST /v1/messages`` returns it."""

    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str = MODEL_NAME
    content: list[TextBlock]
    stop_reason: StopReason
    stop_sequence: str | None = None
    stop_details: None = None
    usage: Usage


class TokenCount(BaseModel):
    """The body of a ``count_tokens`` answer."""

    input_tokens: int


class ToolUseMessage(BaseModel):
    """An answer that calls a tool (the support judge's ``record_support``): never streamed."""

    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str = MODEL_NAME
    content: list[ToolUseBlock]
    stop_reason: Literal["tool_use"] = "tool_use"
    stop_sequence: None = None
    stop_details: None = None
    usage: Usage
