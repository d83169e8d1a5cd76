"""Build the Messages API request for a question about stored documents. A pure function."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MAX_CACHE_BREAKPOINTS = 4  # the upstream refuses a fifth block with cache_control
EPHEMERAL = {"type": "ephemeral"}


@dataclass(frozen=True, slots=True)
class PromptDocument:
    """A stored document as the upstream receives it."""

    kind: str  # "text" | "pdf" | "content"
    title: str | None
    context: str | None
    text: str | None = None  # text documents: the exact stored text
    pdf_base64: str | None = None  # PDFs: the original bytes
    blocks: Sequence[str] = ()  # content documents: the stored blocks

    def source(self) -> dict[str, Any]:
        if self.kind == "pdf":
            return {"type": "base64", "media_type": "application/pdf", "data": self.pdf_base64}
        if self.kind == "content":
            return {
                "type": "content",
                "content": [{"type": "text", "text": b} for b in self.blocks],
            }
        return {"type": "text", "media_type": "text/plain", "data": self.text}


def cache_breakpoints(count: int, budget: int = MAX_CACHE_BREAKPOINTS) -> list[int]:
    """Which of ``count`` document blocks carry ``cache_control``.

    A breakpoint caches the whole prefix up to it, so the one on the last document caches every
    document: a new question about the same documents reads them all from the cache. That one is
    always there. The rest of the budget (the upstream allows 4 in a request) goes to earlier
    documents spread evenly, so that a request on a prefix of the same documents also hits, and
    so that no breakpoint is more than ``count / budget`` blocks from the next one (the cache
    looks back at most 20 blocks from a breakpoint).
    """
    if count <= 0 or budget <= 0:
        return []
    used = min(count, budget)
    return sorted({(count * (n + 1)) // used - 1 for n in range(used)})


def build_message_request(
    documents: Sequence[PromptDocument],
    question: str,
    *,
    model: str,
    max_tokens: int,
    system: str | None = None,
) -> dict[str, Any]:
    """One user turn: the documents in the caller's order, citations on all, then the question.

    No ``temperature``, ``top_p`` or ``top_k``: the current API version refuses them.
    """
    marked = set(cache_breakpoints(len(documents)))
    content: list[dict[str, Any]] = []
    for position, document in enumerate(documents):
        block: dict[str, Any] = {"type": "document", "source": document.source()}
        if document.title is not None:
            block["title"] = document.title
        if document.context is not None:
            block["context"] = document.context
        block["citations"] = {"enabled": True}
        if position in marked:
            block["cache_control"] = dict(EPHEMERAL)
        content.append(block)
    content.append({"type": "text", "text": question})
    request: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": content}],
    }
    if system is not None:
        request["system"] = system
    return request
