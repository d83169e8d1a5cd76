"""The support judge: the one upstream request that asks a model whether cited texts support
their claims, and reading its answer. Pure functions.

The request sends no document (so no citations), one tool, ``record_support``, and asks for it
(``tool_choice``): the verdicts come back as the tool's JSON input. The claims and quotes go as
one JSON object in the user turn, so that any model (and the local engine) reads them alike.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.support.lexical import Reason, Support

TOOL_NAME = "record_support"
JUDGE_FAILED = "judge_failed"
_VERDICTS = ("supported", "partial", "unsupported")
_JUDGED_CODES = {"partial": "judge_partial", "unsupported": "judge_unsupported"}
# The instructions' last line, which the local engine looks for to tell a judge call.
MARKER = "Judge each item with the record_support tool."

SYSTEM = (
    "You check citations. For each item, decide whether the quoted source text supports the "
    "claim: supported (everything the claim states is in the quote, figures, dates, names and "
    "negation included), partial (some of it is, or a detail differs), or unsupported (the "
    "quote does not say it, or says otherwise). Judge only from the quote."
)

TOOL: dict[str, Any] = {
    "name": TOOL_NAME,
    "description": "Record whether each quoted source supports its claim.",
    "input_schema": {
        "type": "object",
        "properties": {
            "verdicts": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "citation": {"type": "integer", "minimum": 0},
                        "verdict": {"type": "string", "enum": list(_VERDICTS)},
                        "reason": {"type": "string"},
                    },
                    "required": ["citation", "verdict", "reason"],
                },
            }
        },
        "required": ["verdicts"],
    },
}


@dataclass(frozen=True, slots=True)
class Item:
    """A citation to judge: the claim (its segment's text) and its cited text."""

    claim: str
    cited: str


def judge_request(model: str, items: Sequence[Item], max_tokens: int = 1024) -> dict[str, Any]:
    """The Messages API request that asks for the items' verdicts (numbered from 0)."""
    payload = {
        "items": [
            {"citation": number, "claim": item.claim, "quote": item.cited}
            for number, item in enumerate(items)
        ]
    }
    prompt = json.dumps(payload, ensure_ascii=False, indent=1) + "\n\n" + MARKER
    return {
        "model": model,
        "max_tokens": max_tokens,
        "system": SYSTEM,
        "tools": [TOOL],
        "tool_choice": {"type": "tool", "name": TOOL_NAME},
        "messages": [{"role": "user", "content": prompt}],
    }


def judged_items(prompt: str) -> list[Item] | None:
    """The items of a judge request's user turn, or None when it is no judge request."""
    if not prompt.rstrip().endswith(MARKER):
        return None
    try:
        payload = json.loads(prompt.rstrip()[: -len(MARKER)])
        return [Item(str(item["claim"]), str(item["quote"])) for item in payload["items"]]
    except (ValueError, KeyError, TypeError):
        return None


def read_verdicts(content: Sequence[Mapping[str, Any]], count: int) -> list[Support] | None:
    """The judge's verdicts on the ``count`` items, from its answer's content blocks; None when
    it gave no usable ``record_support`` call (not every item judged once, a verdict unknown)."""
    for block in content:
        if block.get("type") != "tool_use" or block.get("name") != TOOL_NAME:
            continue
        given = block.get("input")
        verdicts = given.get("verdicts") if isinstance(given, Mapping) else None
        if not isinstance(verdicts, list):
            return None
        found: dict[int, Support] = {}
        for entry in verdicts:
            if not isinstance(entry, Mapping):
                return None
            number, verdict = entry.get("citation"), entry.get("verdict")
            if not isinstance(number, int) or not 0 <= number < count or number in found:
                return None
            if verdict not in _VERDICTS:
                return None
            found[number] = _support(verdict, str(entry.get("reason") or ""))
        if len(found) != count:
            return None
        return [found[number] for number in range(count)]
    return None


def _support(verdict: str, reason: str) -> Support:
    score = {"supported": 1.0, "partial": 0.5, "unsupported": 0.0}[verdict]
    reasons: tuple[Reason, ...] = ()
    if verdict != "supported":
        detail = reason or f"The judge found the claim {verdict}."
        reasons = (Reason(_JUDGED_CODES[verdict], "", detail),)
    return Support(verdict, score, reasons, method="judge")  # type: ignore[arg-type]


def failed(lexical: Mapping[str, Any], why: str) -> dict[str, Any]:
    """A citation's lexical support, kept when the judge failed, with the reason why."""
    reasons = [*lexical.get("reasons", []), Reason(JUDGE_FAILED, "", why).as_dict()]
    return {**lexical, "reasons": reasons}
