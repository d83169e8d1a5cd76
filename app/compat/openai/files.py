"""Files and vector stores in OpenAI's shapes. A file is a Citegate document and a vector
store a collection, with the same ids: what is stored through one API is usable through every
other. Pure functions but ``filenames``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.collections.service import CountedCollection
from app.compat.openai.errors import invalid, unsupported
from app.db.models import Document
from app.search.passages import Passage

# The purposes of a file Citegate keeps: a document serves both, as an input file and in a
# vector store. Every file is shown with the first.
PURPOSES = ("user_data", "assistants")


def seconds(moment: datetime) -> int:
    return int(moment.timestamp())


# A document's status as OpenAI shows a file's (the SDK's ``files.wait_for_processing`` waits
# while it is ``uploaded``) and a vector store file's (``create_and_poll`` waits while it is
# ``in_progress``): read by OCR in the background, ready, or not readable.
FILE_STATUS = {"processing": "uploaded", "ready": "processed", "failed": "error"}
VECTOR_STORE_FILE_STATUS = {"processing": "in_progress", "ready": "completed", "failed": "failed"}


def _failure(document: Document) -> str | None:
    if document.status != "failed":
        return None
    return document.error_detail or "The file could not be read."


def file_object(document: Document) -> dict[str, Any]:
    """A document as OpenAI shows a file."""
    return {
        "id": document.id,
        "object": "file",
        "bytes": document.size_bytes,
        "created_at": seconds(document.created_at),
        "filename": document.filename or document.title or document.id,
        "purpose": PURPOSES[0],
        "status": FILE_STATUS.get(document.status, "processed"),
        "expires_at": None,
        "status_details": _failure(document),
    }


def check_purpose(purpose: str) -> None:
    if purpose not in PURPOSES:
        raise invalid(
            "purpose",
            f"Citegate keeps files for answers: purpose is one of {', '.join(PURPOSES)}, "
            f"not {purpose!r}.",
        )


def vector_store_object(counted: CountedCollection) -> dict[str, Any]:
    """A collection as OpenAI shows a vector store: its documents are its files, completed
    once indexed (when stored, or once their pages are read by OCR)."""
    collection, count = counted.collection, counted.document_count
    return {
        "id": collection.id,
        "object": "vector_store",
        "created_at": seconds(collection.created_at),
        "name": collection.name,
        "description": collection.description,
        "usage_bytes": 0,
        "file_counts": {
            "in_progress": counted.processing,
            "completed": count - counted.processing - counted.failed,
            "failed": counted.failed,
            "cancelled": 0,
            "total": count,
        },
        "status": "in_progress" if counted.processing else "completed",
        "expires_after": None,
        "expires_at": None,
        "last_active_at": seconds(collection.created_at),
        "metadata": collection.user_metadata or {},
    }


def vector_store_file_object(
    document: Document, vector_store_id: str, added_at: datetime | None = None
) -> dict[str, Any]:
    """A document in a collection as OpenAI shows a vector store file: ``in_progress`` while
    its pages are read by OCR, then ``completed`` (or ``failed``, with why)."""
    failure = _failure(document)
    return {
        "id": document.id,
        "object": "vector_store.file",
        "created_at": seconds(added_at or document.created_at),
        "vector_store_id": vector_store_id,
        "status": VECTOR_STORE_FILE_STATUS.get(document.status, "completed"),
        "usage_bytes": document.size_bytes,
        "last_error": None if failure is None else {"code": "server_error", "message": failure},
        "attributes": {},
        "chunking_strategy": {"type": "static", "static": _CHUNKS},
    }


# What Citegate's chunking is closest to in OpenAI's terms; shown, never taken.
_CHUNKS = {"max_chunk_size_tokens": 800, "chunk_overlap_tokens": 0}


def list_object(
    data: Sequence[dict[str, Any]], has_more: bool, *, first_and_last: bool = True
) -> dict[str, Any]:
    shown: dict[str, Any] = {"object": "list", "data": list(data), "has_more": has_more}
    if first_and_last:
        shown["first_id"] = data[0]["id"] if data else None
        shown["last_id"] = data[-1]["id"] if data else None
    return shown


def _text(value: Any, param: str, *, required: bool = False) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or "\x00" in value or (required and not value.strip()):
        raise invalid(param, f"{param} must be a string.")
    return value


def vector_store_request(body: dict[str, Any]) -> tuple[str, str | None, dict[str, Any], list[str]]:
    """Create a vector store: its name (``Untitled`` when none), description, metadata and
    first files."""
    for name, value in body.items():
        if name in ("name", "description", "metadata", "file_ids"):
            continue
        if name == "chunking_strategy" and value in (None, {"type": "auto"}):
            continue
        if name == "expires_after" and value is None:
            continue
        if name in ("chunking_strategy", "expires_after"):
            raise unsupported(
                name, f"Citegate chunks and keeps every document its own way: {name}."
            )
        raise unsupported(name, f"Unrecognized request argument supplied: {name}")
    label = _text(body.get("name"), "name") or "Untitled"
    if len(label) > 200:
        raise invalid("name", "name is 200 characters at most.")
    description = _text(body.get("description"), "description") or None
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise invalid("metadata", "metadata must be an object.")
    return label, description, metadata, _file_ids(body.get("file_ids"), "file_ids")


def _file_ids(value: Any, param: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(
        isinstance(item, str) and item and "\x00" not in item and len(item) <= 100 for item in value
    ):
        raise invalid(param, f"{param} must be an array of file ids.")
    return value


def vector_store_file_request(body: dict[str, Any]) -> str:
    """Add a file to a vector store: the file's id."""
    for name, value in body.items():
        if name == "file_id":
            continue
        if name in ("attributes", "chunking_strategy") and value in (None, {}, {"type": "auto"}):
            continue
        if name in ("attributes", "chunking_strategy"):
            raise unsupported(name, f"Citegate keeps no {name} of a file in a vector store.")
        raise unsupported(name, f"Unrecognized request argument supplied: {name}")
    file_id = _text(body.get("file_id"), "file_id", required=True)
    assert file_id is not None
    return _file_ids([file_id], "file_id")[0]


def search_request(body: dict[str, Any]) -> tuple[str, int]:
    """Search a vector store: the query (several are joined) and how many results at most."""
    for name, value in body.items():
        if name in ("query", "max_num_results"):
            continue
        if name in ("rewrite_query", "filters", "ranking_options") and value in (
            None,
            False,
            {},
            {"ranker": "auto"},
        ):
            continue
        if name in ("rewrite_query", "filters", "ranking_options"):
            raise unsupported(name, f"Citegate ranks passages its own way and takes no {name}.")
        raise unsupported(name, f"Unrecognized request argument supplied: {name}")
    query = body.get("query")
    if isinstance(query, list) and query and all(isinstance(q, str) for q in query):
        query = " ".join(query)
    text = _text(query, "query", required=True)
    assert text is not None
    limit = body.get("max_num_results", 10)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 50:
        raise invalid("max_num_results", "max_num_results is an integer from 1 to 50.")
    return text, limit


def passage_result(passage: Passage, filename: str) -> dict[str, Any]:
    """A passage as a vector store's search result, with where it stands in its document."""
    return {
        "file_id": passage.document_id,
        "filename": filename,
        "score": passage.score,
        "attributes": {},
        "content": [{"type": "text", "text": passage.text}],
        "citegate": {
            "start_char": passage.start_char,
            "end_char": passage.end_char,
            "start_page": passage.start_page,
            "end_page": passage.end_page,
            "chunk_indices": passage.chunk_indices,
        },
    }


async def filenames(session: AsyncSession, tenant_id: str, ids: Sequence[str]) -> dict[str, str]:
    """The file name each of the tenant's documents is shown with."""
    if not ids:
        return {}
    rows = await session.execute(
        select(Document.id, Document.filename, Document.title).where(
            Document.tenant_id == tenant_id, Document.id.in_(set(ids))
        )
    )
    return {id_: filename or title or id_ for id_, filename, title in rows.all()}
