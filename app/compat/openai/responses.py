"""The Responses API over stored documents and collections: a request parsed into the question
the answer pipeline takes, and its Answer rendered back as a ``response`` or its stream of
events. Pure.

``input_file`` parts name the documents; a ``file_search`` tool names one vector store (a
collection), whose passages are retrieved for the question; ``instructions`` (and system or
developer input messages) are the system prompt. Every response is the first turn of a
conversation, so that ``previous_response_id`` asks a follow-up in it through the
conversations machinery of ``/v1``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from app.answers.prompt import Turn
from app.answers.schemas import AnswerRequest, Retrieval
from app.compat.openai.chat import parse_json_object
from app.compat.openai.errors import invalid, unsupported
from app.compat.openai.shapes import asks_nothing, citegate_of, refuse_parameters, responses_usage
from app.errors import CitegateError

INCLUDE_RESULTS = "file_search_call.results"
_DROPPED = frozenset(
    {
        "user",
        "metadata",
        "store",
        "temperature",
        "top_p",
        "parallel_tool_calls",
        "service_tier",
        "safety_identifier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "max_tool_calls",
        "stream_options",
    }
)


_HARMLESS_WHEN: dict[str, Callable[[Any], bool]] = {
    "tool_choice": lambda value: (
        value in (None, "auto", "required") or value == {"type": "file_search"}
    ),
    "text": lambda value: value is None or value in ({}, {"format": {"type": "text"}}),
    "truncation": lambda value: value in (None, "disabled", "auto"),
    "reasoning": lambda value: asks_nothing(value) or value == {"effort": None, "summary": None},
    "background": asks_nothing,
    "top_logprobs": lambda value: value in (None, 0),
    "conversation": asks_nothing,
    "prompt": asks_nothing,
}
_REFUSALS = {
    "tool_choice": "Citegate answers over documents and calls no other tool.",
    "text": "Cited answers are text: structured output cannot carry citations.",
    "truncation": "truncation is auto or disabled.",
    "reasoning": "Citegate does not take reasoning options.",
    "background": "Citegate answers in the foreground: stream for a long answer.",
    "top_logprobs": "Claude does not return log probabilities.",
    "conversation": "Continue a response with previous_response_id.",
    "prompt": "Citegate keeps no prompt templates.",
}
_MAPPED = frozenset(
    {
        "model",
        "input",
        "instructions",
        "tools",
        "include",
        "previous_response_id",
        "max_output_tokens",
        "stream",
    }
)


@dataclass(frozen=True, slots=True)
class ResponseQuestion:
    """A Responses request as the answer pipeline takes it, and what its response echoes."""

    question: str
    document_ids: list[str]
    vector_store_id: str | None
    max_passages: int | None
    earlier: list[Turn]
    system: str | None
    model: str
    max_tokens: int | None
    previous_response_id: str | None
    stream: bool
    include_results: bool
    tools: list[dict[str, Any]]

    def answer_request(self) -> AnswerRequest:
        """The question of a new response (not a follow-up)."""
        retrieval = None
        if self.vector_store_id is not None:
            retrieval = Retrieval(mode="passages", max_passages=self.max_passages or 20)
        fields = {
            "question": self.question,
            "document_ids": self.document_ids or None,
            "collection_id": self.vector_store_id,
            "retrieval": retrieval,
            "model": self.model,
            "max_tokens": self.max_tokens,
            "system": self.system,
        }
        try:
            return AnswerRequest(**fields)
        except ValidationError as exc:
            raise _invalid_field(exc) from exc

    def follow_up(self, conversation_id: str) -> AnswerRequest:
        try:
            return AnswerRequest(
                question=self.question, conversation_id=conversation_id, max_tokens=self.max_tokens
            )
        except ValidationError as exc:
            raise _invalid_field(exc) from exc


def _invalid_field(exc: ValidationError) -> CitegateError:
    error = exc.errors(include_url=False)[0]
    name = str(error["loc"][0]) if error["loc"] else "input"
    param = {"max_tokens": "max_output_tokens", "system": "instructions", "model": "model"}.get(
        name, "input"
    )
    return invalid(param, f"{param}: {error['msg']}")


def _check_parameters(body: dict[str, Any]) -> None:
    refuse_parameters(
        body, _MAPPED | _DROPPED, _HARMLESS_WHEN, _REFUSALS, unknown="Unknown parameter: '{name}'."
    )


def _tools(value: Any) -> tuple[str | None, int | None]:
    """The vector store of the one ``file_search`` tool, and its ``max_num_results``."""
    if value is None or value == []:
        return None, None
    if not isinstance(value, list):
        raise invalid("tools", "tools must be an array.")
    store, limit = None, None
    for index, tool in enumerate(value):
        where = f"tools[{index}]"
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "file_search":
            raise unsupported(
                f"{where}.type", f"Citegate takes the file_search tool, not {kind!r}."
            )
        if store is not None:
            raise unsupported(where, "Give one file_search tool.")
        assert isinstance(tool, dict)
        for name, setting in tool.items():
            if name in ("type", "vector_store_ids", "max_num_results"):
                continue
            if name in ("ranking_options", "filters") and asks_nothing(setting):
                continue
            raise unsupported(f"{where}.{name}", f"Citegate's file_search takes no {name}.")
        ids = tool.get("vector_store_ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) and i for i in ids):
            raise invalid(f"{where}.vector_store_ids", "vector_store_ids must be an array of ids.")
        if len(ids) != 1:
            raise unsupported(
                f"{where}.vector_store_ids", "Citegate's file_search searches one vector store."
            )
        store = ids[0]
        limit = tool.get("max_num_results")
        if limit is not None and (
            not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 50
        ):
            raise invalid(f"{where}.max_num_results", "max_num_results is from 1 to 50.")
    return store, limit


def _text_of(content: Any, where: str, files: list[str] | None) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(where, "content must be a string or an array of content parts.")
    texts = []
    for index, part in enumerate(content):
        at = f"{where}[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text") and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        elif kind == "input_file" and files is not None:
            file_id = part.get("file_id")
            if not isinstance(file_id, str) or not file_id:
                raise unsupported(
                    f"{at}.file_id",
                    "An input_file names a stored file by file_id: upload the file to "
                    "/openai/v1/files first.",
                )
            files.append(file_id)
        else:
            raise unsupported(f"{at}.type", f"Citegate takes text and file parts, not {kind!r}.")
    return "\n".join(texts)


def _input(value: Any) -> tuple[list[str], list[tuple[str, str]], list[str]]:
    """The system texts, the user and assistant turns (a role's consecutive messages joined)
    and the files of the user messages."""
    if isinstance(value, str):
        return [], [("user", value)], []
    if not isinstance(value, list) or not value:
        raise invalid("input", "input must be a string or a non-empty array of messages.")
    system: list[str] = []
    turns: list[tuple[str, str]] = []
    files: list[str] = []
    for index, item in enumerate(value):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise invalid(where, "An input item must be an object.")
        kind = item.get("type", "message")
        if kind != "message":
            raise unsupported(f"{where}.type", f"Citegate takes message input items, not {kind!r}.")
        role = item.get("role")
        content = item.get("content")
        if role in ("system", "developer"):
            system.append(_text_of(content, f"{where}.content", None))
        elif role in ("user", "assistant"):
            text = _text_of(content, f"{where}.content", files if role == "user" else None)
            if turns and turns[-1][0] == role:
                turns[-1] = (role, f"{turns[-1][1]}\n\n{text}")
            else:
                turns.append((role, text))
        else:
            raise invalid(f"{where}.role", f"Unknown role {role!r}.")
    if not turns or turns[0][0] != "user" or turns[-1][0] != "user":
        raise invalid("input", "The input's first and last messages (but system) are the user's.")
    return system, turns, files


def parse_responses_request(raw: bytes) -> ResponseQuestion:
    body = parse_json_object(raw)
    _check_parameters(body)
    for name in ("model", "input"):
        if name not in body:
            raise invalid(name, f"Missing required parameter: '{name}'.")
    if not isinstance(body["model"], str):
        raise invalid("model", "model must be a string.")
    system_parts, turns, files = _input(body["input"])
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise invalid("instructions", "instructions must be a string.")
    system = "\n\n".join([*([instructions] if instructions else []), *system_parts]) or None
    store, limit = _tools(body.get("tools"))
    include = body.get("include") or []
    if not isinstance(include, list):
        raise invalid("include", "include must be an array.")
    for index, entry in enumerate(include):
        if entry != INCLUDE_RESULTS:
            raise unsupported(f"include[{index}]", f"Citegate can include {INCLUDE_RESULTS} only.")
    previous = body.get("previous_response_id")
    if previous is not None and (not isinstance(previous, str) or not previous):
        raise invalid("previous_response_id", "previous_response_id must be a response id.")
    if store is not None and files:
        raise unsupported(
            "input", "Give input_file parts or a file_search tool, not both: one or the other."
        )
    if store is None and not files and previous is None:
        raise invalid(
            "input",
            "Citegate answers over stored documents: give input_file parts or a file_search "
            "tool over a vector store.",
        )
    stream = body.get("stream")
    if stream not in (None, True, False):
        raise invalid("stream", "stream must be a boolean.")
    earlier = [
        Turn(question, [{"text": answer, "citations": []}])
        for (_, question), (_, answer) in zip(turns[:-1:2], turns[1:-1:2], strict=True)
    ]
    return ResponseQuestion(
        question=turns[-1][1],
        document_ids=list(dict.fromkeys(files)),
        vector_store_id=store,
        max_passages=limit,
        earlier=earlier,
        system=system,
        model=body["model"],
        max_tokens=body.get("max_output_tokens"),
        previous_response_id=previous,
        stream=bool(stream),
        include_results=INCLUDE_RESULTS in include,
        tools=body.get("tools") or [],
    )


@dataclass(frozen=True, slots=True)
class Echo:
    """What a response shows of its request besides the answer."""

    instructions: str | None
    tools: list[dict[str, Any]]
    previous_response_id: str | None
    include_results: bool
    max_output_tokens: int | None
    filenames: dict[str, str] = field(default_factory=dict)


def _suffix(answer_id: str) -> str:
    return answer_id.partition("_")[2] or answer_id


def message_item_id(answer_id: str) -> str:
    return f"msg_{_suffix(answer_id)}"


def search_item_id(answer_id: str) -> str:
    return f"fs_{_suffix(answer_id)}"


def _filename(document_id: str | None, echo: Echo) -> str | None:
    if document_id is None:
        return None
    return echo.filenames.get(document_id, document_id)


def file_citation(citation: dict[str, Any], index: int, echo: Echo) -> dict[str, Any]:
    """A citation as a ``file_citation`` annotation at the end of the segment it supports."""
    document_id = citation.get("document_id")
    return {
        "type": "file_citation",
        "file_id": document_id,
        "filename": _filename(document_id, echo),
        "index": index,
        "citegate": citegate_of(citation),
    }


def search_results(passages: Sequence[dict[str, Any]], echo: Echo) -> list[dict[str, Any]]:
    return [
        {
            "file_id": passage["document_id"],
            "filename": _filename(passage["document_id"], echo),
            "score": passage["score"],
            "text": passage["text"],
            "attributes": {},
        }
        for passage in passages
    ]


def search_call(
    answer_id: str, question: str, passages: Sequence[dict[str, Any]], echo: Echo, status: str
) -> dict[str, Any]:
    return {
        "id": search_item_id(answer_id),
        "type": "file_search_call",
        "status": status,
        "queries": [question],
        "results": search_results(passages, echo)
        if echo.include_results and status == "completed"
        else None,
    }


def _output_text(answer: dict[str, Any], echo: Echo) -> dict[str, Any]:
    return {
        "type": "output_text",
        "text": answer["text"],
        "annotations": [
            file_citation(citation, segment["end"], echo)
            for segment in answer["segments"]
            for citation in segment["citations"]
        ],
        "logprobs": [],
    }


def message_item(answer_id: str, content: list[dict[str, Any]], status: str) -> dict[str, Any]:
    return {
        "id": message_item_id(answer_id),
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": content,
    }


_STATUS = {
    "completed": "completed",
    "failed": "failed",
    "cancelled": "cancelled",
    "in_progress": "in_progress",
    "interrupted": "incomplete",
}


def _searched(answer: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The passages retrieved for this question, when it searched a vector store."""
    retrieval = answer.get("retrieval") or {}
    if retrieval.get("mode") != "passages":
        return None
    return list(retrieval["passages"][retrieval.get("first_new_passage", 0) :])


def response_object(answer: dict[str, Any], echo: Echo) -> dict[str, Any]:
    """A stored Answer (``AnswerOut.shown``) as a ``response``."""
    status = _STATUS.get(answer["status"], "completed")
    incomplete = None
    if answer["status"] == "interrupted":
        incomplete = {"reason": "interrupted"}
    elif status == "completed" and answer.get("stop_reason") == "max_tokens":
        status, incomplete = "incomplete", {"reason": "max_output_tokens"}
    item_status = "completed" if status == "completed" else "incomplete"
    output = []
    passages = _searched(answer)
    if passages is not None:
        output.append(search_call(answer["id"], answer["question"], passages, echo, "completed"))
    output.append(message_item(answer["id"], [_output_text(answer, echo)], item_status))
    error = None
    if status == "failed":
        error = {"code": "server_error", "message": "The answer failed; see getAnswer."}
    return _envelope(answer["id"], answer["model"], _created(answer), echo) | {
        "status": status,
        "error": error,
        "incomplete_details": incomplete,
        "output": output,
        "usage": responses_usage(answer["usage"]),
    }


def _created(answer: dict[str, Any]) -> int:
    return int(datetime.fromisoformat(answer["created_at"]).timestamp())


def _envelope(answer_id: str, model: str, created: int, echo: Echo) -> dict[str, Any]:
    return {
        "id": answer_id,
        "object": "response",
        "created_at": created,
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "instructions": echo.instructions,
        "max_output_tokens": echo.max_output_tokens,
        "model": model,
        "output": [],
        "parallel_tool_calls": True,
        "previous_response_id": echo.previous_response_id,
        "reasoning": {"effort": None, "summary": None},
        "store": True,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": echo.tools,
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": None,
        "user": None,
        "metadata": {},
    }


@dataclass
class ResponseEvents:
    """Citegate's stream events of one answer as the Responses API's events, in its order:
    ``response.created``, ``response.in_progress``; the ``file_search_call`` item (added, in
    progress, searching, completed, done) when passages were retrieved; the message item
    added, its ``output_text`` part added, ``response.output_text.delta`` as text arrives,
    ``response.output_text.annotation.added`` for each citation once its segment is complete,
    then the text, part and item done; ``response.completed`` (or ``response.failed``,
    ``response.incomplete``) with the whole response."""

    answer_id: str
    model: str
    created: int
    question: str
    passages: list[dict[str, Any]] | None
    echo: Echo
    _sequence: int = 0
    _position: int = 0
    _texts: list[str] = field(default_factory=list)
    _annotations: list[dict[str, Any]] = field(default_factory=list)
    _pending: list[dict[str, Any]] = field(default_factory=list)

    @property
    def _message_index(self) -> int:
        return 0 if self.passages is None else 1

    def _event(self, kind: str, **data: Any) -> tuple[str, dict[str, Any]]:
        made = {"type": kind, "sequence_number": self._sequence, **data}
        self._sequence += 1
        return kind, made

    def _text_event(self, kind: str, **data: Any) -> tuple[str, dict[str, Any]]:
        return self._event(
            kind,
            item_id=message_item_id(self.answer_id),
            output_index=self._message_index,
            content_index=0,
            **data,
        )

    def start(self) -> list[tuple[str, dict[str, Any]]]:
        shell = _envelope(self.answer_id, self.model, self.created, self.echo)
        made = [
            self._event("response.created", response=shell),
            self._event("response.in_progress", response=shell),
        ]
        if self.passages is not None:
            item_id = search_item_id(self.answer_id)
            searching = search_call(self.answer_id, self.question, [], self.echo, "in_progress")
            done = search_call(self.answer_id, self.question, self.passages, self.echo, "completed")
            made += [
                self._event("response.output_item.added", output_index=0, item=searching),
                self._event(
                    "response.file_search_call.in_progress", output_index=0, item_id=item_id
                ),
                self._event("response.file_search_call.searching", output_index=0, item_id=item_id),
                self._event("response.file_search_call.completed", output_index=0, item_id=item_id),
                self._event("response.output_item.done", output_index=0, item=done),
            ]
        made += [
            self._event(
                "response.output_item.added",
                output_index=self._message_index,
                item=message_item(self.answer_id, [], "in_progress"),
            ),
            self._text_event("response.content_part.added", part=self._part("")),
        ]
        return made

    def _part(self, text: str) -> dict[str, Any]:
        return {
            "type": "output_text",
            "text": text,
            "annotations": list(self._annotations),
            "logprobs": [],
        }

    def of_event(self, name: str, data: Any) -> list[tuple[str, dict[str, Any]]]:
        if name == "text.delta":
            self._position += len(data["text"])
            self._texts.append(data["text"])
            return [self._text_event("response.output_text.delta", delta=data["text"], logprobs=[])]
        if name == "citation":
            self._pending.append(data["citation"])
        elif name == "segment.done" and self._pending:
            made = []
            for citation in self._pending:
                annotation = file_citation(citation, self._position, self.echo)
                made.append(
                    self._text_event(
                        "response.output_text.annotation.added",
                        annotation_index=len(self._annotations),
                        annotation=annotation,
                    )
                )
                self._annotations.append(annotation)
            self._pending = []
            return made
        return []

    def end(self, answer: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """The text, part and item done, then the whole response."""
        shown = response_object(answer, self.echo)
        message = shown["output"][-1]
        part = message["content"][0]
        text = "".join(self._texts)
        kind = {"completed": "response.completed", "failed": "response.failed"}.get(
            shown["status"], "response.incomplete"
        )
        return [
            self._text_event("response.output_text.done", text=text, logprobs=[]),
            self._text_event("response.content_part.done", part=part),
            self._event(
                "response.output_item.done", output_index=self._message_index, item=message
            ),
            self._event(kind, response=shown),
        ]

    def failed(self, code: str, message: str) -> list[tuple[str, dict[str, Any]]]:
        """The end of a stream that broke: ``response.failed`` with what arrived."""
        shell = _envelope(self.answer_id, self.model, self.created, self.echo)
        text = "".join(self._texts)
        shell |= {
            "status": "failed",
            "error": {"code": code, "message": message},
            "output": [message_item(self.answer_id, [self._part(text)], "incomplete")],
        }
        return [self._event("response.failed", response=shell)]
