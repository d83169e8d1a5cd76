"""The page a share link opens: the answer with numbered citation markers, server-rendered.

Choosing a marker shows the cited page with the passage's boxes highlighted (PDF) or the
document text with the passage marked (text and content); ``assets/viewer.js`` does that from
the citations embedded as JSON. Without JavaScript the markers still lead to the list of
citations. Nothing is loaded from another origin, and the Content-Security-Policy says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

import orjson

from app.db.models import Document
from app.documents.kinds import kind_named

PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'",
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",  # the token is in the URL
    "X-Content-Type-Options": "nosniff",
    "X-Robots-Tag": "noindex",
}

_HEAD = (
    '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
    '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
    '<meta name="referrer" content="no-referrer">\n<title>{title}</title>\n'
    '<link rel="stylesheet" href="../assets/viewer.css">\n{script}</head>\n'
)

NOT_FOUND_PAGE = (
    _HEAD.format(title="Not found", script="")
    + "<body>\n<main>\n<h1>Not found</h1>\n<p>There is nothing at this address. A shared link "
    "works until it expires.</p>\n</main>\n</body>\n</html>\n"
)


def _citation_data(
    number: int, citation: dict[str, Any], documents: Mapping[str, Document]
) -> dict[str, Any]:
    document = documents.get(citation.get("document_id") or "")
    span = citation.get("span") if document is not None else None
    return {
        "n": number,
        "document_id": document.id if document else None,
        "title": _title(citation, document),
        "pages": kind_named(document.kind).has_page_images if document else False,
        "verified": bool(citation.get("verified")),
        "cited_text": str(citation.get("cited_text") or ""),
        "span": None
        if span is None
        else {
            key: span.get(key)
            for key in ("start_char", "end_char", "start_page", "end_page", "boxes")
        },
    }


def _title(citation: dict[str, Any], document: Document | None) -> str:
    if document is not None:
        return document.title or document.filename or "Untitled document"
    return str(citation.get("document_title") or citation.get("title") or "A source")


def _where(data: dict[str, Any]) -> str:
    span = data["span"]
    if span is None or span["start_page"] is None:
        return ""
    first, last = span["start_page"], span["end_page"]
    return f", page {first}" if first == last else f", pages {first}–{last}"


def render_answer(answer: dict[str, Any], documents: Mapping[str, Document], token: str) -> str:
    """The page of one answer (as ``answer_out`` gives it), for the token's own URL."""
    citations: list[dict[str, Any]] = []
    body: list[str] = []
    for segment in answer["segments"]:
        body.append(escape(segment["text"]))
        for citation in segment["citations"]:
            data = _citation_data(len(citations) + 1, citation, documents)
            citations.append(data)
            n = data["n"]
            state = "" if data["verified"] else " unverified"
            label = f"Citation {n}" + ("" if data["verified"] else ", unverified")
            body.append(
                f'<a class="cite{state}" href="#c{n}" data-n="{n}" aria-label="{label}">[{n}]</a>'
            )
    items = []
    for data in citations:
        status = (
            ""
            if data["verified"]
            else ' <span class="badge">unverified: not found at this place</span>'
        )
        items.append(
            f'<li id="c{data["n"]}"><cite>{escape(data["title"])}{escape(_where(data))}</cite>'
            f"{status}<blockquote>{escape(data['cited_text'])}</blockquote></li>"
        )
    # "<" as \u003c: the JSON can never close its script element.
    embedded = orjson.dumps(citations).decode().replace("<", "\\u003c")
    script = '<script src="../assets/viewer.js" defer></script>\n'
    return (
        _HEAD.format(title="A cited answer", script=script)
        + f'<body data-token="{escape(token)}">\n<main>\n'
        + f'<p class="question"><span>Question</span> {escape(answer["question"])}</p>\n'
        + f'<section class="answer" aria-label="Answer"><p>{"".join(body)}</p></section>\n'
        + '<section id="viewer" class="viewer" tabindex="-1" aria-live="polite" hidden></section>\n'
        + '<section class="citations"><h2>Citations</h2>\n<ol>'
        + "".join(items)
        + "</ol></section>\n"
        + f'<script type="application/json" id="citations">{embedded}</script>\n'
        + "</main>\n</body>\n</html>\n"
    )
