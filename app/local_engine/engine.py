"""``LocalEngine``: answers validated requests, and owns the prompt cache and the PDF cache.

One engine per process. Its work (PDF parsing, sentence splitting, ranking, hashing the prompt)
is CPU-bound, so the async methods run it in a worker thread; the blocking methods are there for
callers already off the loop, and for tests.
"""

from __future__ import annotations

import json
import secrets
import time

import anyio.to_thread

from app.local_engine.answering import build_answer, limit_answer
from app.local_engine.documents import RequestDocument, chunk_documents
from app.local_engine.pdf_cache import DEFAULT_PDF_CACHE_ENTRIES, ParsedPdfCache
from app.local_engine.prompt_cache import (
    DEFAULT_MIN_CACHEABLE_TOKENS,
    DEFAULT_PROMPT_CACHE_ENTRIES,
    CacheAccount,
    Clock,
    PromptCache,
)
from app.local_engine.request_validation import ParsedRequest
from app.local_engine.tokens import estimate_tokens, input_tokens, prompt_units
from app.local_engine.wire import MODEL_NAME, Message, ToolUseBlock, ToolUseMessage, Usage
from app.support.judge import TOOL_NAME, judged_items
from app.support.lexical import check_support

DEFAULT_PING_INTERVAL = 15.0
_ID_ALPHABET = "0123456789ABCDEFGHIJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def new_upstream_id(prefix: str) -> str:
    """An id shaped like the upstream's (``msg_01…``, ``req_01…``): 24 characters after ``_``."""
    return f"{prefix}_01" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(22))


class LocalEngine:
    """An extractive question-answering engine that answers as the Messages API does.

    ``clock``: monotonic seconds, for the prompt cache's TTLs (injectable for tests).
    ``min_cacheable_tokens``: prefixes shorter than this are not cached (the upstream's minimum;
    1,024 as on Sonnet models; 0 caches everything).
    ``prompt_cache_entries`` / ``pdf_cache_entries``: bounds of the two caches.
    ``ping_interval``: seconds between the keep-alive pings of a stream, after the first one.
    ``fail_streams_after_blocks``: break every stream off with an ``overloaded_error`` event
    after that many content blocks (a fault to test clients against; ``None`` in normal use).
    """

    def __init__(
        self,
        *,
        clock: Clock = time.monotonic,
        min_cacheable_tokens: int = DEFAULT_MIN_CACHEABLE_TOKENS,
        prompt_cache_entries: int = DEFAULT_PROMPT_CACHE_ENTRIES,
        pdf_cache_entries: int = DEFAULT_PDF_CACHE_ENTRIES,
        ping_interval: float = DEFAULT_PING_INTERVAL,
        fail_streams_after_blocks: int | None = None,
    ) -> None:
        self.prompt_cache = PromptCache(
            clock=clock, max_entries=prompt_cache_entries, min_cacheable_tokens=min_cacheable_tokens
        )
        self.pdf_cache = ParsedPdfCache(pdf_cache_entries)
        self.ping_interval = ping_interval
        self.fail_streams_after_blocks = fail_streams_after_blocks

    def documents(self, request: ParsedRequest) -> list[RequestDocument]:
        """The request's documents and search results, chunked (PDFs through the cache).
        Blocking."""
        return chunk_documents(request.citable_blocks, self.pdf_cache.load)

    def create_message_blocking(self, request: ParsedRequest) -> Message | ToolUseMessage:
        """Answer a validated request, and account its usage against the prompt cache."""
        if (judged := judge(request)) is not None:
            return judged
        documents = self.documents(request)
        blocks = build_answer(request.question, documents)
        answer = limit_answer(
            blocks,
            max_tokens=request.max_tokens,
            stop_sequences=request.stop_sequences,
        )
        account = self.account_blocking(request, documents)
        return Message(
            id=new_upstream_id("msg"),
            model=MODEL_NAME,
            content=answer.content,
            stop_reason=answer.stop_reason,
            stop_sequence=answer.stop_sequence,
            usage=account.usage(answer.output_tokens),
        )

    def account_blocking(
        self, request: ParsedRequest, documents: list[RequestDocument]
    ) -> CacheAccount:
        """Split the request's input tokens into cache reads, cache writes and fresh input."""
        units = prompt_units(request, documents)
        return self.prompt_cache.account(_cache_seed(request, documents), units)

    def count_tokens_blocking(self, request: ParsedRequest) -> int:
        """All input tokens of a request, as ``count_tokens`` reports them (no cache involved)."""
        return input_tokens(prompt_units(request, self.documents(request)))

    async def create_message(self, request: ParsedRequest) -> Message | ToolUseMessage:
        """``create_message_blocking`` in a worker thread."""
        return await anyio.to_thread.run_sync(self.create_message_blocking, request)

    async def count_tokens(self, request: ParsedRequest) -> int:
        """``count_tokens_blocking`` in a worker thread."""
        return await anyio.to_thread.run_sync(self.count_tokens_blocking, request)


def judge(request: ParsedRequest) -> ToolUseMessage | None:
    """The answer to a support judge's request (``app.support.judge``): its ``record_support``
    call, each item judged by the lexical check, so that judging is deterministic offline; None
    for any other request. (Never streamed: a judge's request is not.)"""
    offered = {(tool.model_extra or {}).get("name") for tool in request.tools}
    if request.stream or TOOL_NAME not in offered:
        return None
    items = judged_items(request.question)
    if items is None:
        return None
    verdicts = []
    for number, item in enumerate(items):
        support = check_support(item.claim, item.cited)
        verdict = "unsupported" if support.verdict == "unchecked" else support.verdict
        reason = "; ".join(reason.detail for reason in support.reasons) or "The quote says it."
        verdicts.append({"citation": number, "verdict": verdict, "reason": reason})
    call = {"verdicts": verdicts}
    output = estimate_tokens(json.dumps(call))
    prompt = estimate_tokens(request.question)
    return ToolUseMessage(
        id=new_upstream_id("msg"),
        content=[ToolUseBlock(id=new_upstream_id("toolu"), name=TOOL_NAME, input=call)],
        usage=Usage(input_tokens=prompt, output_tokens=output),
    )


def _cache_seed(request: ParsedRequest, documents: list[RequestDocument]) -> bytes:
    # Caches are per model, and turning citations on or off changes the upstream's system prompt.
    citations = any(document.citations_enabled for document in documents)
    return json.dumps({"model": request.model, "citations": citations}).encode()
