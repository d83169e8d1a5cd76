"""What the OpenAI-compatible APIs show of a stored Answer, in OpenAI's names. Pure functions.

A citation keeps Citegate's resolution beside OpenAI's annotation as ``citegate``: the stored
document, the quoted text, its span, whether the stored text at the span is the quote, and the
support verdict when the citation has one.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from app.compat.openai.errors import unsupported

# The citation's own fields that ``citegate`` shows, when the citation has them.
_CITEGATE_FIELDS = ("document_id", "cited_text", "span", "verified")
_OPTIONAL_FIELDS = ("support",)

_FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
    "tool_use": "tool_calls",
}


def asks_nothing(value: Any) -> bool:
    """Whether a parameter's value asks for nothing (absent, false or empty): what a parameter
    Claude cannot honour may be sent with."""
    return value is None or value is False or value == [] or value == {}


def refuse_parameters(
    body: dict[str, Any],
    taken: Collection[str],
    harmless_when: Mapping[str, Callable[[Any], bool]],
    refusals: Mapping[str, str],
    *,
    unknown: str,
) -> None:
    """Refuse, naming it, each parameter of ``body`` that is neither ``taken`` (mapped or
    dropped) nor harmless with its value; ``unknown`` is the API's own wording for a parameter
    it does not know (``{name}`` in it)."""
    for name, value in body.items():
        if name in taken:
            continue
        allowed = harmless_when.get(name)
        if allowed is None:
            raise unsupported(name, unknown.format(name=name))
        if not allowed(value):
            raise unsupported(name, refusals[name])


def citegate_of(citation: dict[str, Any]) -> dict[str, Any]:
    """Citegate's resolution of a citation, as the ``citegate`` object of an annotation."""
    shown = {name: citation.get(name) for name in _CITEGATE_FIELDS}
    shown["verified"] = bool(shown["verified"])
    for name in _OPTIONAL_FIELDS:
        if name in citation:
            shown[name] = citation[name]
    return shown


def document_url(base_url: str, citation: dict[str, Any], answer_id: str) -> str:
    """Where a citation points: the cited span of its stored document
    (``…/v1/documents/{id}#chars=a-b``), the document when it has no span, the answer when it
    names no stored document."""
    base = base_url.rstrip("/")
    document_id = citation.get("document_id")
    if document_id is None:
        return f"{base}/v1/answers/{answer_id}"
    span = citation.get("span")
    where = f"#chars={span['start_char']}-{span['end_char']}" if span else ""
    return f"{base}/v1/documents/{document_id}{where}"


def titles_of(answer: dict[str, Any]) -> dict[str, str]:
    """Each cited document's title as the answer lists it (its id when it has none)."""
    return {
        document["document_id"]: document.get("title") or document["document_id"]
        for document in answer.get("documents") or []
    }


def url_citation(
    citation: dict[str, Any], start: int, end: int, base_url: str, answer_id: str, title: str
) -> dict[str, Any]:
    """A citation as Chat Completions' ``url_citation`` annotation over ``[start, end)`` of
    the message's content, with ``citegate``."""
    return {
        "type": "url_citation",
        "url_citation": {
            "start_index": start,
            "end_index": end,
            "url": document_url(base_url, citation, answer_id),
            "title": title,
        },
        "citegate": citegate_of(citation),
    }


def title_for(citation: dict[str, Any], titles: dict[str, str]) -> str:
    document_id = citation.get("document_id")
    if document_id is None:
        return str(citation.get("document_title") or citation.get("title") or "")
    return titles.get(document_id) or document_id


def finish_reason(stop_reason: str | None) -> str:
    return _FINISH_REASONS.get(stop_reason or "end_turn", "stop")


def chat_usage(usage: dict[str, int]) -> dict[str, Any]:
    """An answer's usage in Chat Completions' names: every input token is a prompt token;
    those read from the prompt cache are ``prompt_tokens_details.cached_tokens``."""
    prompt = (
        usage["input_tokens"]
        + usage["cache_creation_input_tokens"]
        + usage["cache_read_input_tokens"]
    )
    completion = usage["output_tokens"]
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {
            "cached_tokens": usage["cache_read_input_tokens"],
            "cache_write_tokens": usage["cache_creation_input_tokens"],
            "audio_tokens": 0,
        },
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def responses_usage(usage: dict[str, int]) -> dict[str, Any]:
    """An answer's usage in the Responses API's names."""
    chat = chat_usage(usage)
    return {
        "input_tokens": chat["prompt_tokens"],
        "input_tokens_details": {
            "cached_tokens": usage["cache_read_input_tokens"],
            "cache_write_tokens": usage["cache_creation_input_tokens"],
        },
        "output_tokens": chat["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": chat["total_tokens"],
    }
