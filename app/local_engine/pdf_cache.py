"""Parsed PDFs by content hash, so that repeated questions on one PDF parse it once.

Called from worker threads (parsing is CPU work and never runs on the event loop), hence the
lock: cachetools' caches leave locking to their caller. Two requests that bring the same new
PDF at the same moment may both parse it; the cache stays correct, only the work is doubled.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import threading

from cachetools import LRUCache

from app.documents.pdf import PdfError, extract_pdf_text
from app.local_engine.api_error import InvalidRequestError
from app.local_engine.documents import ChunkedPdf, chunk_pdf_pages

DEFAULT_PDF_CACHE_ENTRIES = 32


class ParsedPdfCache:
    """A bounded LRU of chunked PDFs keyed by the SHA-256 of their bytes."""

    def __init__(self, max_entries: int = DEFAULT_PDF_CACHE_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._entries: LRUCache[bytes, ChunkedPdf] = LRUCache(max_entries)
        self._lock = threading.Lock()
        self.parses = 0  # how many PDFs were really parsed (for tests and logs)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def load(self, data_base64: str) -> ChunkedPdf:
        """Decode, parse and chunk a base64 PDF, or return it from the cache. Blocking."""
        try:
            data = base64.b64decode(data_base64, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InvalidRequestError("The PDF specified was not valid.") from exc
        key = hashlib.sha256(data).digest()
        with self._lock:
            cached = self._entries.get(key)  # and now the most recently used
            if cached is not None:
                return cached
        try:
            text = extract_pdf_text(data, as_pdfium_gives=True)
        except PdfError as exc:
            message = (
                "The PDF specified is password protected."
                if exc.code == "pdf_encrypted"
                else "The PDF specified was not valid."
            )
            raise InvalidRequestError(message) from exc
        chunked = chunk_pdf_pages(text.pages)
        with self._lock:
            self.parses += 1
            self._entries[key] = chunked  # the least recently used goes when it is full
        return chunked
