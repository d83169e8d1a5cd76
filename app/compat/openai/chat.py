"""Chat Completions over stored documents: a request parsed into the question the answer
pipeline takes, and its Answer rendered back as a ``chat.completion`` or its chunks. Pure.

The documents are the ``file`` content parts of the user messages (``{"type": "file", "file":
{"file_id": "doc_…"}}``), in the order they first appear; the system and developer messages are
the system prompt; the last user message is the question and the turns before it are replayed
as they were written. Every parameter is accepted, mapped, dropped or refused as the README's
table says: nothing unknown is ignored silently.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
from pydantic import ValidationError

from app.answers.prompt import Turn
from app.answers.schemas import AnswerRequest
from app.compat.openai.errors import invalid, unsupported
from app.compat.openai.shapes import (
    asks_nothing,
    chat_usage,
    finish_reason,
    refuse_parameters,
    title_for,
    titles_of,
    url_citation,
)
from app.errors import CitegateError, ErrorCode

# Parameters with no effect on a cited answer, dropped whatever their value.
_DROPPED = frozenset(
    {
        "user",
        "metadata",
        "store",
        "temperature",  # the Claude models Citegate asks refuse sampling parameters
        "top_p",
        "seed",
        "service_tier",
        "parallel_tool_calls",
        "safety_identifier",
        "prompt_cache_key",
        "prompt_cache_retention",
    }
)


# Parameters accepted only with a value that asks for nothing Claude cannot do.
_HARMLESS_WHEN: dict[str, Callable[[Any], bool]] = {
    "n": lambda value: value in (None, 1),
    "logprobs": asks_nothing,
    "top_logprobs": lambda value: value in (None, 0),
    "tools": asks_nothing,
    "tool_choice": lambda value: value in (None, "none", "auto"),
    "functions": asks_nothing,
    "function_call": lambda value: value in (None, "none", "auto"),
    "response_format": lambda value: value is None or value == {"type": "text"},
    "modalities": lambda value: value in (None, ["text"]),
    "frequency_penalty": lambda value: value in (None, 0),
    "presence_penalty": lambda value: value in (None, 0),
    "logit_bias": asks_nothing,
    "stop": asks_nothing,
    "audio": asks_nothing,
    "prediction": asks_nothing,
    "reasoning_effort": asks_nothing,
    "web_search_options": asks_nothing,
    "verbosity": asks_nothing,
}
_REFUSALS = {
    "n": "Citegate answers with one choice: n must be 1.",
    "logprobs": "Claude does not return log probabilities.",
    "top_logprobs": "Claude does not return log probabilities.",
    "tools": "Citegate answers over documents and calls no tools.",
    "tool_choice": "Citegate answers over documents and calls no tools.",
    "functions": "Citegate answers over documents and calls no functions.",
    "function_call": "Citegate answers over documents and calls no functions.",
    "response_format": "Cited answers are text: structured output cannot carry citations.",
    "modalities": "Citegate answers in text only.",
    "frequency_penalty": "Claude takes no frequency penalty.",
    "presence_penalty": "Claude takes no presence penalty.",
    "logit_bias": "Claude takes no logit bias.",
    "stop": "Citegate does not take stop sequences.",
    "audio": "Citegate answers in text only.",
    "prediction": "Claude takes no predicted output.",
    "reasoning_effort": "Citegate does not take a reasoning effort.",
    "web_search_options": "Citegate answers over stored documents, not the web.",
    "verbosity": "Citegate does not take a verbosity.",
}
_MAPPED = frozenset(
    {"model", "messages", "max_tokens", "max_completion_tokens", "stream", "stream_options"}
)
_SYSTEM_ROLES = ("system", "developer")


@dataclass(frozen=True, slots=True)
class ChatQuestion:
    """A Chat Completions request as the answer pipeline takes it."""

    body: AnswerRequest
    earlier: list[Turn]
    stream: bool
    include_usage: bool


def parse_json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise CitegateError("The body is not valid JSON.", code=ErrorCode.MALFORMED_BODY) from exc
    if not isinstance(body, dict):
        raise CitegateError("The body must be a JSON object.", code=ErrorCode.MALFORMED_BODY)
    return body


def check_parameters(body: dict[str, Any]) -> None:
    """Refuse, naming it, each parameter Citegate does not take or cannot honour."""
    refuse_parameters(
        body,
        _MAPPED | _DROPPED,
        _HARMLESS_WHEN,
        _REFUSALS,
        unknown="Unrecognized request argument supplied: {name}",
    )


def _text_of(content: Any, where: str, *, files: list[str] | None = None) -> str:
    """The text of a message's content: a string, or text parts (and, where ``files`` is
    given, file parts naming stored documents, whose ids are collected there)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(where, "content must be a string or an array of content parts.")
    texts = []
    for index, part in enumerate(content):
        at = f"{where}[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        elif kind == "file" and files is not None:
            file = part.get("file")
            file_id = file.get("file_id") if isinstance(file, dict) else None
            if not isinstance(file_id, str) or not file_id:
                raise unsupported(
                    f"{at}.file",
                    "A file part names a stored file by file_id: upload the file to "
                    "/openai/v1/files first.",
                )
            files.append(file_id)
        elif kind in ("text", "file", "refusal"):
            raise invalid(at, f"This content part is not valid in a {where} message.")
        else:
            raise unsupported(
                f"{at}.type", f"Citegate takes text and file content parts, not {kind!r}."
            )
    return "\n".join(texts)


def _turns(messages: Any) -> tuple[str | None, list[tuple[str, str]], list[str]]:
    """The system prompt, the user and assistant turns (consecutive messages of a role joined),
    and the file ids of the user messages in order."""
    if not isinstance(messages, list) or not messages:
        raise invalid("messages", "messages must be a non-empty array.")
    system: list[str] = []
    turns: list[tuple[str, str]] = []
    files: list[str] = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise invalid(where, "A message must be an object.")
        role = message.get("role")
        if message.get("tool_calls") or message.get("function_call"):
            raise unsupported(f"{where}.tool_calls", "Citegate calls no tools.")
        content = message.get("content")
        if role in _SYSTEM_ROLES:
            system.append(_text_of(content, f"{where}.content"))
        elif role == "user":
            text = _text_of(content, f"{where}.content", files=files)
            turns.append(("user", text))
        elif role == "assistant":
            turns.append(("assistant", _text_of(content or "", f"{where}.content")))
        elif role in ("tool", "function"):
            raise unsupported(f"{where}.role", "Citegate calls no tools: no tool messages.")
        else:
            raise invalid(f"{where}.role", f"Unknown role {role!r}.")
    joined: list[tuple[str, str]] = []
    for role, text in turns:
        if joined and joined[-1][0] == role:
            joined[-1] = (role, f"{joined[-1][1]}\n\n{text}")
        else:
            joined.append((role, text))
    if not joined or joined[-1][0] != "user":
        raise invalid("messages", "The last message (but system messages) must be the user's.")
    if joined[0][0] != "user":
        raise invalid("messages", "The first message (but system messages) must be the user's.")
    return ("\n\n".join(system) if system else None), joined, files


def parse_chat_request(raw: bytes) -> ChatQuestion:
    """The question, its documents and the turns before it; ``CitegateError`` with the
    parameter at fault otherwise."""
    body = parse_json_object(raw)
    check_parameters(body)
    for name in ("model", "messages"):
        if name not in body:
            raise invalid(name, f"Missing required parameter: '{name}'.")
    system, turns, files = _turns(body["messages"])
    if not files:
        raise invalid(
            "messages",
            "Citegate answers over stored documents: give at least one file content part "
            '({"type": "file", "file": {"file_id": …}}) in a user message.',
        )
    stream = body.get("stream")
    if stream not in (None, True, False):
        raise invalid("stream", "stream must be a boolean.")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise invalid("stream_options", "stream_options must be an object.")
    include_usage = bool((options or {}).get("include_usage"))
    earlier = [
        Turn(question, [{"text": answer, "citations": []}])
        for (_, question), (_, answer) in zip(turns[:-1:2], turns[1:-1:2], strict=True)
    ]
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    fields = {
        "question": turns[-1][1],
        "document_ids": list(dict.fromkeys(files)),
        "model": body["model"],
        "max_tokens": max_tokens,
        "system": system,
    }
    try:
        request = AnswerRequest(**fields)
    except ValidationError as exc:
        raise _invalid_field(exc) from exc
    return ChatQuestion(request, earlier, bool(stream), include_usage)


_PARAM_OF_FIELD = {
    "question": "messages",
    "document_ids": "messages",
    "model": "model",
    "max_tokens": "max_completion_tokens",
    "system": "messages",
}


def _invalid_field(exc: ValidationError) -> CitegateError:
    error = exc.errors(include_url=False)[0]
    name = str(error["loc"][0]) if error["loc"] else "messages"
    what = {"question": "the last user message", "system": "the system message"}.get(name, name)
    return invalid(_PARAM_OF_FIELD.get(name, "messages"), f"{what}: {error['msg']}")


def chat_completion(answer: dict[str, Any], base_url: str) -> dict[str, Any]:
    """A stored Answer (``AnswerOut.shown``) as a ``chat.completion``."""
    return {
        "id": answer["id"],
        "object": "chat.completion",
        "created": _created(answer),
        "model": answer["model"],
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": answer["text"],
                    "refusal": None,
                    "annotations": message_annotations(answer, base_url),
                },
                "logprobs": None,
                "finish_reason": finish_reason(answer["stop_reason"]),
            }
        ],
        "usage": chat_usage(answer["usage"]),
        "service_tier": "default",
        "system_fingerprint": None,
    }


def _created(answer: dict[str, Any]) -> int:
    return int(datetime.fromisoformat(answer["created_at"]).timestamp())


def message_annotations(answer: dict[str, Any], base_url: str) -> list[dict[str, Any]]:
    """One ``url_citation`` per citation, over the segment (the sentence) it supports."""
    titles = titles_of(answer)
    return [
        url_citation(
            citation,
            segment["start"],
            segment["end"],
            base_url,
            answer["id"],
            title_for(citation, titles),
        )
        for segment in answer["segments"]
        for citation in segment["citations"]
    ]


@dataclass
class ChatChunks:
    """Citegate's stream events of one answer as ``chat.completion.chunk`` data: text as
    ``delta.content``; a segment's citations, once it is complete (and so the sentence they
    support is known), as ``delta.annotations``; the finish reason; the usage when asked."""

    answer_id: str
    model: str
    base_url: str
    include_usage: bool
    titles: dict[str, str] = field(default_factory=dict)
    created: int = field(default_factory=lambda: int(time.time()))
    _position: int = 0
    _segment_start: int = 0
    _pending: list[dict[str, Any]] = field(default_factory=list)

    def chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        shown: dict[str, Any] = {
            "id": self.answer_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if self.include_usage:
            shown["usage"] = None
        return shown

    def of_event(self, name: str, data: Any) -> list[dict[str, Any]]:
        if name == "answer.started":
            self.titles = titles_of(data)
            self.model = data["model"]
            return [self.chunk({"role": "assistant", "content": "", "refusal": None})]
        if name == "segment.started":
            self._segment_start = self._position
        elif name == "text.delta":
            self._position += len(data["text"])
            return [self.chunk({"content": data["text"]})]
        elif name == "citation":
            self._pending.append(data["citation"])
        elif name == "segment.done" and self._pending:
            made = [
                url_citation(
                    citation,
                    self._segment_start,
                    self._position,
                    self.base_url,
                    self.answer_id,
                    title_for(citation, self.titles),
                )
                for citation in self._pending
            ]
            self._pending = []
            return [self.chunk({"annotations": made})]
        return []

    def end(self, answer: dict[str, Any]) -> list[dict[str, Any]]:
        """The last chunks: the finish reason, then the usage when asked."""
        made = [self.chunk({}, finish_reason(answer["stop_reason"]))]
        if self.include_usage:
            made.append({**self.chunk({}), "choices": [], "usage": chat_usage(answer["usage"])})
        return made


def chunk_lines(chunks: Sequence[dict[str, Any]]) -> bytes:
    """Chunks as server-sent events of data only, as OpenAI streams them."""
    return b"".join(b"data: " + orjson.dumps(chunk) + b"\n\n" for chunk in chunks)


DONE = b"data: [DONE]\n\n"
