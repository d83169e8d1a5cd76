"""Parse and validate a Messages API request body as the upstream does, or raise
``InvalidRequestError`` with the upstream's message.

Shape errors come from pydantic and are worded like the upstream's (``max_tokens: Field
required``). The rules pydantic cannot express are checked after: what each role may carry under
the ``anthropic-version``, non-empty text (in documents and search results too), citations on
all documents and search results or on none, at most 4 ``cache_control`` blocks and their TTL
order. Where the real wording is unknown, the message says the same thing plainly (marked below).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from app.local_engine.api_error import InvalidRequestError
from app.local_engine.wire import (
    CURRENT_VERSION,
    AssistantBlock,
    Block,
    CacheControlParam,
    CitableBlock,
    ContentSource,
    CountTokensParams,
    CreateMessageParams,
    DocumentBlockParam,
    FileSource,
    LegacyAssistantBlock,
    LegacyUserBlock,
    SearchResultBlockParam,
    TextBlockParam,
    ToolParam,
    ToolResultBlockParam,
    UncitedTextBlockParam,
    UrlPdfSource,
    UserBlock,
)
from app.upstream.wire import MAX_CACHE_BREAKPOINTS

_VERSION = re.compile(r"\d{4}-\d{2}-\d{2}")
_SAMPLING_PARAMS = ("temperature", "top_p", "top_k")

_USER_BLOCKS: TypeAdapter[list[Any]] = TypeAdapter(list[UserBlock])
_LEGACY_USER_BLOCKS: TypeAdapter[list[Any]] = TypeAdapter(list[LegacyUserBlock])
_ASSISTANT_BLOCKS: TypeAdapter[list[Any]] = TypeAdapter(list[AssistantBlock])
_LEGACY_ASSISTANT_BLOCKS: TypeAdapter[list[Any]] = TypeAdapter(list[LegacyAssistantBlock])
_SYSTEM_BLOCKS: TypeAdapter[list[Any]] = TypeAdapter(list[UncitedTextBlockParam])

_Model = TypeVar("_Model", bound=BaseModel)
Role = Literal["user", "assistant", "system"]


@dataclass(frozen=True, slots=True)
class Turn:
    """One message of the request, its string content turned into one text block."""

    role: Role
    blocks: tuple[Block, ...]


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    """A validated request, in the order the prompt is read: tools, system, then the turns."""

    model: str
    tools: tuple[ToolParam, ...]
    system: tuple[UncitedTextBlockParam, ...]
    turns: tuple[Turn, ...]
    automatic_cache_control: CacheControlParam | None
    max_tokens: int | None
    stop_sequences: tuple[str, ...]
    stream: bool

    @property
    def documents(self) -> list[DocumentBlockParam]:
        """Every document block, in request order: ``document_index`` counts these."""
        return [block for block in self.citable_blocks if isinstance(block, DocumentBlockParam)]

    @property
    def citable_blocks(self) -> list[CitableBlock]:
        """Every document and search result (top level or inside a tool result), in the order
        the prompt reads them: ``document_index`` counts the documents among them and
        ``search_result_index`` the search results."""
        found: list[CitableBlock] = []
        for turn in self.turns:
            for block in turn.blocks:
                if isinstance(block, DocumentBlockParam | SearchResultBlockParam):
                    found.append(block)
                elif isinstance(block, ToolResultBlockParam):
                    found.extend(block.search_results)
        return found

    @property
    def question(self) -> str:
        """The text blocks of the last user turn that has any, one per line (a turn that only
        returns a tool's results answers the question of an earlier one)."""
        for turn in reversed(self.turns):
            if turn.role != "user":
                continue
            texts = [
                block.text
                for block in turn.blocks
                if isinstance(block, TextBlockParam | UncitedTextBlockParam)
            ]
            if texts:
                return "\n".join(texts)
        return ""


def check_version(header: str | None) -> str:
    """The ``anthropic-version`` header, which the upstream requires (so does the engine)."""
    if not header:
        raise InvalidRequestError("anthropic-version: header is required")
    if not _VERSION.fullmatch(header):
        # Wording not confirmed against the upstream.
        raise InvalidRequestError(f"anthropic-version: '{header}' is not a valid version")
    return header


def parse_create_request(body: bytes, version: str) -> ParsedRequest:
    """Validate the body of ``POST /v1/messages`` under an ``anthropic-version``."""
    params = _validate_model(CreateMessageParams, _load_json(body))
    if version >= CURRENT_VERSION:
        for name in _SAMPLING_PARAMS:
            if name in params.model_fields_set:
                raise InvalidRequestError(f"{name}: Extra inputs are not permitted")
    return _parse_prompt(
        params,
        version,
        max_tokens=params.max_tokens,
        stop_sequences=tuple(params.stop_sequences or ()),
        stream=bool(params.stream),
    )


def parse_count_tokens_request(body: bytes, version: str) -> ParsedRequest:
    """Validate the body of ``POST /v1/messages/count_tokens``."""
    params = _validate_model(CountTokensParams, _load_json(body))
    return _parse_prompt(params, version, max_tokens=None, stop_sequences=(), stream=False)


def _load_json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError as exc:  # JSONDecodeError, or bytes that are not UTF-8
        raise InvalidRequestError(f"The request body is not valid JSON: {exc}") from exc


def _validate_model(model: type[_Model], data: Any) -> _Model:
    if not isinstance(data, dict):
        raise InvalidRequestError(
            "Input should be a valid dictionary or object to extract fields from"
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _first_error(exc, ()) from exc


def _validate_list(adapter: TypeAdapter[list[Any]], data: Any, where: tuple[str | int, ...]) -> Any:
    try:
        return adapter.validate_python(data)
    except ValidationError as exc:
        raise _first_error(exc, where) from exc


def _first_error(exc: ValidationError, where: tuple[str | int, ...]) -> InvalidRequestError:
    # The upstream names one problem: the first, with its dotted location.
    error = exc.errors(include_url=False)[0]
    location = ".".join(str(part) for part in (*where, *error["loc"]))
    return InvalidRequestError(f"{location}: {error['msg']}" if location else error["msg"])


def _parse_prompt(
    params: CreateMessageParams | CountTokensParams,
    version: str,
    *,
    max_tokens: int | None,
    stop_sequences: tuple[str, ...],
    stream: bool,
) -> ParsedRequest:
    if not params.messages:
        raise InvalidRequestError("messages: at least one message is required")
    current = version >= CURRENT_VERSION
    system = _parse_system(params.system)
    turns: list[Turn] = []
    last = len(params.messages) - 1
    for number, message in enumerate(params.messages):
        blocks = _parse_content(message.role, message.content, number, current)
        if not blocks and not (number == last and message.role == "assistant"):
            raise InvalidRequestError(
                f"messages.{number}: all messages must have non-empty content except for the "
                "optional final assistant message"
            )
        turns.append(Turn(message.role, tuple(blocks)))
    request = ParsedRequest(
        model=params.model,
        tools=tuple(params.tools or ()),
        system=tuple(system),
        turns=tuple(turns),
        automatic_cache_control=params.cache_control,
        max_tokens=max_tokens,
        stop_sequences=stop_sequences,
        stream=stream,
    )
    _check_documents(request, params.output_config)
    _check_cache_controls(request)
    return request


def _parse_system(system: Any) -> list[UncitedTextBlockParam]:
    if system is None or system == "":
        return []
    if isinstance(system, str):
        return [UncitedTextBlockParam(type="text", text=system)]
    blocks: list[UncitedTextBlockParam] = _validate_list(_SYSTEM_BLOCKS, system, ("system",))
    for block in blocks:
        _check_text(block.text, "system")
    return blocks


def _parse_content(role: Role, content: Any, number: int, current: bool) -> list[Block]:
    if isinstance(content, str):
        if not content:
            return []
        _check_text(content, "messages")
        text_type = UncitedTextBlockParam if role != "assistant" else TextBlockParam
        return [text_type(type="text", text=content)]
    if role == "system":
        adapter: TypeAdapter[list[Any]] = _SYSTEM_BLOCKS
    elif role == "user":
        adapter = _USER_BLOCKS if current else _LEGACY_USER_BLOCKS
    else:
        adapter = _ASSISTANT_BLOCKS if current else _LEGACY_ASSISTANT_BLOCKS
    blocks: list[Block] = _validate_list(adapter, content, ("messages", number, "content"))
    for place, block in enumerate(blocks):
        if isinstance(block, TextBlockParam | UncitedTextBlockParam):
            _check_text(block.text, "messages")
        elif isinstance(block, DocumentBlockParam):
            _check_document_source(block, f"messages.{number}.content.{place}.document.source")
        elif isinstance(block, SearchResultBlockParam):
            _check_search_result(block, f"messages.{number}.content.{place}.search_result")
        elif isinstance(block, ToolResultBlockParam):
            for inner, item in enumerate(block.content):
                if isinstance(item, SearchResultBlockParam):
                    where = f"messages.{number}.content.{place}.tool_result.content.{inner}"
                    _check_search_result(item, f"{where}.search_result")
    return blocks


def _check_text(text: str, where: str) -> None:
    if not text:
        raise InvalidRequestError(f"{where}: text content blocks must be non-empty")
    if text.isspace():
        raise InvalidRequestError(f"{where}: text content blocks must contain non-whitespace text")


def _check_document_source(block: DocumentBlockParam, where: str) -> None:
    source = block.source
    if isinstance(source, UrlPdfSource | FileSource):
        # A limit of the local engine (no network, no file store), not of the upstream.
        raise InvalidRequestError(
            f"{where}: the local engine cannot read '{source.type}' sources; "
            "send the document itself (text, base64 PDF or content)"
        )
    if isinstance(source, ContentSource) and not isinstance(source.content, str):
        if not source.content:
            raise InvalidRequestError(f"{where}.content: List should have at least 1 item")
        _check_citable_blocks(source.content, where, "content source", "document")
    elif isinstance(source, ContentSource) and not source.content:
        raise InvalidRequestError(f"{where}.content: String should have at least 1 character")


def _check_search_result(block: SearchResultBlockParam, where: str) -> None:
    # An empty content list is refused by the model (min_length); here, its blocks.
    _check_citable_blocks(block.content, where, "search result", "search_result")


def _check_citable_blocks(blocks: Sequence[BaseModel], where: str, holder: str, outer: str) -> None:
    last = len(blocks) - 1
    for place, item in enumerate(blocks):
        if isinstance(item, UncitedTextBlockParam):
            _check_text(item.text, "messages")
        if getattr(item, "cache_control", None) is not None and place != last:
            # Wording not confirmed against the upstream.
            raise InvalidRequestError(
                f"{where}.content.{place}.cache_control: cache_control is only allowed on "
                f"the last block of a {holder}; put it on the {outer} block instead"
            )


def _check_documents(request: ParsedRequest, output_config: dict[str, Any] | None) -> None:
    citable = request.citable_blocks
    enabled = {block.citations_enabled for block in citable}
    if len(enabled) > 1:
        # Wording not confirmed: the documented rule, said as the documentation says it.
        if any(isinstance(block, SearchResultBlockParam) for block in citable):
            raise InvalidRequestError(
                "citations must be enabled on all or none of the documents and search results "
                "within a request"
            )
        raise InvalidRequestError(
            "citations must be enabled on all or none of the documents within a request"
        )
    if True in enabled and output_config and output_config.get("format") is not None:
        # Wording not confirmed against the upstream.
        raise InvalidRequestError(
            "citations cannot be enabled together with structured output (output_config.format)"
        )


def cache_controls(request: ParsedRequest) -> Iterator[CacheControlParam]:
    """Every ``cache_control`` of the request in prompt order: tools, system, messages (a
    content source's own blocks right after their document), then the top-level one."""
    for tool in request.tools:
        if tool.cache_control is not None:
            yield tool.cache_control
    for system_block in request.system:
        if system_block.cache_control is not None:
            yield system_block.cache_control
    for turn in request.turns:
        for block in turn.blocks:
            yield from block_cache_controls(block)
    if request.automatic_cache_control is not None:
        yield request.automatic_cache_control


def block_cache_controls(block: Block) -> Iterator[CacheControlParam]:
    """The ``cache_control`` of one message block and of the blocks inside it, in prompt order:
    those of its content source, search result content or tool result content, then its own
    (a block's breakpoint is at its end)."""
    inner: object = ()
    if isinstance(block, DocumentBlockParam) and isinstance(block.source, ContentSource):
        inner = block.source.content
    elif isinstance(block, SearchResultBlockParam | ToolResultBlockParam):
        inner = block.content
    for item in inner if isinstance(inner, list) else ():  # string content has no blocks
        if isinstance(item, SearchResultBlockParam):
            yield from block_cache_controls(item)
        else:
            control: CacheControlParam | None = getattr(item, "cache_control", None)
            if control is not None:
                yield control
    if block.cache_control is not None:
        yield block.cache_control


def _check_cache_controls(request: ParsedRequest) -> None:
    controls = list(cache_controls(request))
    if len(controls) > MAX_CACHE_BREAKPOINTS:
        raise InvalidRequestError(
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {len(controls)}."
        )
    seen_short = False
    for control in controls:
        if control.label == "5m":
            seen_short = True
        elif seen_short:
            raise InvalidRequestError(
                "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block"
            )
