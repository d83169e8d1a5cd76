"""Build the Messages API request for a question about stored documents. A pure function."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.documents.sources import PromptDocument
from app.search.passages import Passage
from app.upstream.wire import MAX_CACHE_BREAKPOINTS

EPHEMERAL = {"type": "ephemeral"}


@dataclass(frozen=True, slots=True)
class PassageBlock:
    """One text block of a passage's search result: one chunk of the stored document."""

    chunk_index: int
    start_char: int
    end_char: int
    text: str
    locator: dict[str, Any] | None = None


def passage_blocks(passage: Passage) -> list[PassageBlock]:
    """The text blocks a passage is sent as: one per chunk, blank chunks left out (the upstream
    refuses empty text). A ``search_result_location``'s block indices index this list."""
    blocks = []
    start = passage.start_char
    locators = passage.chunk_locators or [None] * len(passage.chunk_texts)
    for chunk_index, text, locator in zip(
        passage.chunk_indices, passage.chunk_texts, locators, strict=True
    ):
        if text.strip():
            blocks.append(PassageBlock(chunk_index, start, start + len(text), text, locator))
        start += len(text)
    return blocks


def search_result_block(passage: Passage) -> dict[str, Any]:
    """A passage as a citable ``search_result`` block."""
    title = passage.title or passage.document_id
    if passage.start_page is not None:
        title = f"{title}, page {passage.start_page}"
    where = f"#chars={passage.start_char}-{passage.end_char}"
    return {
        "type": "search_result",
        "source": f"/v1/documents/{passage.document_id}{where}",
        "title": title,
        "content": [{"type": "text", "text": block.text} for block in passage_blocks(passage)],
        "citations": {"enabled": True},
    }


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


# The fields each citation type takes as a request parameter (an earlier answer sent back).
_CITATION_PARAMS = {
    "char_location": ("document_index", "document_title", "start_char_index", "end_char_index"),
    "page_location": ("document_index", "document_title", "start_page_number", "end_page_number"),
    "content_block_location": (
        "document_index",
        "document_title",
        "start_block_index",
        "end_block_index",
    ),
    "search_result_location": (
        "search_result_index",
        "source",
        "title",
        "start_block_index",
        "end_block_index",
    ),
    "web_search_result_location": ("url", "title", "encrypted_index"),
}


@dataclass(frozen=True, slots=True)
class Turn:
    """An earlier question, the passages retrieved for it, and the segments of its answer."""

    question: str
    segments: Sequence[dict[str, Any]]
    passages: Sequence[Passage] = ()


def citation_param(
    citation: dict[str, Any], documents: Sequence[PromptDocument] = ()
) -> dict[str, Any] | None:
    """A resolved citation in the request-parameter shape (``document_title`` present, no
    ``file_id``, none of our fields); None for a type the API would not take back.

    A resolved citation names its stored document and, for a PDF, the original's pages; it is
    sent back pointing at the block of ``documents`` that holds them (a page window's own
    index and page numbers), or as it was stored when none does."""
    fields = _CITATION_PARAMS.get(str(citation.get("type")))
    if fields is None:
        return None
    param = {
        "type": citation["type"],
        "cited_text": citation.get("cited_text", ""),
        **{field: citation.get(field) for field in fields},
    }
    if "document_index" in param and citation.get("document_id") is not None:
        _place(param, citation["document_id"], documents)
    return param


def _place(param: dict[str, Any], document_id: str, documents: Sequence[PromptDocument]) -> None:
    page = param.get("start_page_number")
    for index, document in enumerate(documents):
        if document.document_id != document_id:
            continue
        window = document.window
        if window is None:
            param["document_index"] = index
            return
        if isinstance(page, int) and window[0] <= page <= window[1]:
            offset = window[0] - 1
            param["document_index"] = index
            param["document_title"] = document.title
            param["start_page_number"] = page - offset
            if isinstance(end := param.get("end_page_number"), int):
                param["end_page_number"] = end - offset
            return


def assistant_blocks(
    segments: Sequence[dict[str, Any]], documents: Sequence[PromptDocument] = ()
) -> list[dict[str, Any]]:
    """An earlier answer as assistant text blocks that carry their citations, pointing at the
    blocks of ``documents`` (the documents of the request it is sent back in)."""
    blocks = []
    for segment in segments:
        if not segment["text"].strip():
            continue  # the API refuses empty and whitespace-only text blocks
        block: dict[str, Any] = {"type": "text", "text": segment["text"]}
        citations = [
            p for c in segment["citations"] if (p := citation_param(c, documents)) is not None
        ]
        if citations:
            block["citations"] = citations
        blocks.append(block)
    return blocks


def build_message_request(
    documents: Sequence[PromptDocument],
    question: str,
    *,
    model: str,
    max_tokens: int,
    system: str | None = None,
    passages: Sequence[Passage] = (),
    history: Sequence[Turn] = (),
) -> dict[str, Any]:
    """The documents in the caller's order, citations on all, in the first user turn; then
    every earlier question (after the passages retrieved for it) and answer; then the passages
    retrieved for this question, as search results, and the question.

    Earlier answers go back as assistant turns whose text blocks carry their citations (the API
    refuses citations on user text); earlier passages go back where they were, so that every
    earlier ``search_result_index`` still points at the same passage. Breakpoints: the
    documents' (see ``cache_breakpoints``); in a follow-up, one at the end of the previous
    answer, so the whole conversation so far is read from the cache; one on the last passage,
    so the same question again is read from it; never more than 4 in all. No ``temperature``,
    ``top_p`` or ``top_k``: the current API version refuses them.
    """
    turns = [(turn, assistant_blocks(turn.segments, documents)) for turn in history]
    turns = [(turn, blocks) for turn, blocks in turns if blocks]
    budget = MAX_CACHE_BREAKPOINTS - (1 if turns else 0) - (1 if passages else 0)
    marked = set(cache_breakpoints(len(documents), budget))
    content: list[dict[str, Any]] = []
    for position, document in enumerate(documents):
        block: dict[str, Any] = {"type": "document", "source": document.source}
        if document.title is not None:
            block["title"] = document.title
        if document.context is not None:
            block["context"] = document.context
        block["citations"] = {"enabled": True}
        if position in marked:
            block["cache_control"] = dict(EPHEMERAL)
        content.append(block)
    messages: list[dict[str, Any]] = [{"role": "user", "content": content}]
    for turn, answer in turns:
        content.extend(search_result_block(passage) for passage in turn.passages)
        content.append({"type": "text", "text": turn.question})
        messages.append({"role": "assistant", "content": answer})
        content = []
        messages.append({"role": "user", "content": content})
    if turns:
        messages[-2]["content"][-1]["cache_control"] = dict(EPHEMERAL)
    if passages:
        content.extend(search_result_block(passage) for passage in passages)
        content[-1]["cache_control"] = dict(EPHEMERAL)
    content.append({"type": "text", "text": question})
    request: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": messages}
    if system is not None:
        request["system"] = system
    return request
