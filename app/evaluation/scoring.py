"""Scoring: pure functions from a question and its Answer (as the API returns it) to a result,
and from results to the set's figures, as API.md ("Claim support") defines them.

- ``accuracy``: answers that contain every ``answer_contains`` string (case and whitespace
  ignored) / questions.
- ``citation_precision``: citations whose support verdict is ``supported`` / citations.
- ``citation_recall``: segments with a ``supported`` citation / segments that make a claim. A
  segment makes a claim when it cites something, or when it has a letter or digit and is not a
  lead-in (text ending with a colon, such as "Based on the documents:").
- ``verified_rate``: verified citations / citations.
- ``cites_rate`` (beside them): questions whose every ``cites`` string is in the ``cited_text``
  of a supporting citation (case and whitespace ignored) / questions that expect citations.

A ratio whose denominator is 0 is ``None``. A question whose answer failed is a result with an
``error``: wrong, with no citations.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from app.evaluation.questions import Question

USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


def loose(text: str) -> str:
    """Text compared with case and whitespace ignored."""
    return "".join(text.casefold().split())


def contains(text: str, wanted: str) -> bool:
    return loose(wanted) in loose(text)


def _citations(segment: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in segment.get("citations") or [] if isinstance(c, Mapping)]


def verdict(citation: Mapping[str, Any]) -> str:
    """A citation's support verdict; ``unchecked`` when it has none."""
    support = citation.get("support")
    if isinstance(support, Mapping) and isinstance(support.get("verdict"), str):
        return str(support["verdict"])
    return "unchecked"


def makes_claim(segment: Mapping[str, Any]) -> bool:
    """Whether a segment states something a citation should support (see the module doc)."""
    if _citations(segment):
        return True
    text = str(segment.get("text") or "").strip()
    return any(ch.isalnum() for ch in text) and not text.endswith(":")


@dataclass(slots=True)
class Result:
    """One question's outcome."""

    line: int
    id: str | None
    question: str
    answer_id: str | None = None
    status: str | None = None
    text: str = ""
    answer_contains: list[str] = field(default_factory=list)
    cites: list[str] = field(default_factory=list)
    correct: bool = False
    missing: list[str] = field(default_factory=list)  # answer_contains strings not found
    cites_found: bool = False
    missing_cites: list[str] = field(default_factory=list)
    citations: int = 0
    supported: int = 0
    verified: int = 0
    claim_segments: int = 0
    supported_segments: int = 0
    latency_ms: float = 0.0
    usage: dict[str, int] = field(default_factory=dict)
    support_check: dict[str, int] | None = None
    error: dict[str, Any] | None = None

    def shown(self) -> dict[str, Any]:
        return asdict(self)


def score(question: Question, answer: Mapping[str, Any], latency_ms: float) -> Result:
    """The result of one question from its Answer."""
    segments = [s for s in answer.get("segments") or [] if isinstance(s, Mapping)]
    citations = [c for s in segments for c in _citations(s)]
    supporting = [c for c in citations if verdict(c) == "supported"]
    text = str(answer.get("text") or "")
    missing = [wanted for wanted in question.answer_contains if not contains(text, wanted)]
    missing_cites = [
        wanted
        for wanted in question.cites
        if not any(contains(str(c.get("cited_text") or ""), wanted) for c in supporting)
    ]
    claims = [s for s in segments if makes_claim(s)]
    usage = answer.get("usage") or {}
    judge = usage.get("support_check")
    return Result(
        line=question.line,
        id=question.id,
        question=question.question,
        answer_id=answer.get("id"),
        status=answer.get("status"),
        text=text,
        answer_contains=list(question.answer_contains),
        cites=list(question.cites),
        correct=not missing,
        missing=missing,
        cites_found=not missing_cites,
        missing_cites=missing_cites,
        citations=len(citations),
        supported=len(supporting),
        verified=sum(1 for c in citations if c.get("verified") is True),
        claim_segments=len(claims),
        supported_segments=sum(
            1 for s in claims if any(verdict(c) == "supported" for c in _citations(s))
        ),
        latency_ms=latency_ms,
        usage={name: int(usage.get(name) or 0) for name in USAGE_FIELDS},
        support_check=(
            {name: int(judge.get(name) or 0) for name in ("input_tokens", "output_tokens")}
            if isinstance(judge, Mapping)
            else None
        ),
    )


def failed(question: Question, error: Mapping[str, Any], latency_ms: float) -> Result:
    """The result of a question whose answer failed (``error``: status, code, detail)."""
    return Result(
        line=question.line,
        id=question.id,
        question=question.question,
        answer_contains=list(question.answer_contains),
        cites=list(question.cites),
        missing=list(question.answer_contains),
        cites_found=not question.cites,
        missing_cites=list(question.cites),
        latency_ms=latency_ms,
        usage=dict.fromkeys(USAGE_FIELDS, 0),
        error=dict(error),
    )


def ratio(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """Linear interpolation between the closest ranks (numpy's default); ``None`` if empty."""
    if not values:
        return None
    ordered = sorted(values)
    place = (len(ordered) - 1) * fraction
    low, high = math.floor(place), math.ceil(place)
    return ordered[low] + (ordered[high] - ordered[low]) * (place - low)


def summarize(results: Sequence[Result], *, support: str) -> dict[str, Any]:
    """The set's figures and every result: the JSON object ``citegate eval --json`` prints."""
    citations = sum(r.citations for r in results)
    with_cites = [r for r in results if r.cites]
    latencies = [r.latency_ms for r in results]
    judged = [r.support_check for r in results if r.support_check is not None]
    tokens: dict[str, Any] = {
        name: sum(r.usage.get(name, 0) for r in results) for name in USAGE_FIELDS
    }
    tokens["support_check"] = {
        name: sum(j[name] for j in judged) for name in ("input_tokens", "output_tokens")
    }
    return {
        "questions": len(results),
        "support": support,
        "accuracy": ratio(sum(r.correct for r in results), len(results)),
        "citation_precision": ratio(sum(r.supported for r in results), citations),
        "citation_recall": ratio(
            sum(r.supported_segments for r in results), sum(r.claim_segments for r in results)
        ),
        "verified_rate": ratio(sum(r.verified for r in results), citations),
        "cites_rate": ratio(sum(r.cites_found for r in with_cites), len(with_cites)),
        "latency_p50_ms": percentile(latencies, 0.5),
        "latency_p95_ms": percentile(latencies, 0.95),
        "tokens": tokens,
        "errors": sum(1 for r in results if r.error is not None),
        "results": [r.shown() for r in results],
    }
