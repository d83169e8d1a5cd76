"""The Anthropic-compatible API through the official TypeScript SDK (``@anthropic-ai/sdk``,
installed from tests/ts_sdk/package-lock.json by ``npm ci``), run by Node.js against the served
app and the local engine: one node run, its findings checked here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.conftest import Served
from tests.e2e.test_anthropic_compat import QUESTION
from tests.e2e.test_auth import bearer, make_key
from tests.fixture_files import AMAZON_PDF
from tests.node_check import run_node_check

TS_SDK = Path(__file__).parents[1] / "ts_sdk"


def run_check(base_url: str, key: str) -> dict[str, Any]:
    return run_node_check(TS_SDK, "@anthropic-ai/sdk", base_url, key, QUESTION)


def test_the_typescript_sdk(client: httpx.Client, served: Served, database_url: str) -> None:
    _, key = make_key(database_url, "typescript")
    found = run_check(served.base_url, key)

    text, pdf = found["files"]
    assert (text["type"], text["filename"], text["mime_type"]) == (
        "file",
        "grass.txt",
        "text/plain",
    )
    assert pdf["size_bytes"] == AMAZON_PDF.stat().st_size
    assert found["listed"] == [pdf["id"], text["id"]]  # newest first, one page at a time

    created = found["created"]
    citations = [c for block in created["content"] for c in block.get("citations") or []]
    assert {c["citegate"]["document_id"] for c in citations} == {text["id"], pdf["id"]}
    assert all(c["citegate"]["verified"] for c in citations)
    assert found["streamed"]["content"] == created["content"]

    stored = httpx.get(
        f"{served.base_url}/v1/answers/{found['answerId']}", headers=bearer(key)
    ).json()
    assert stored["text"] == "".join(b["text"] for b in created["content"] if b["type"] == "text")
    counted = httpx.post(
        f"{served.base_url}/v1/answers/count-tokens",
        json={"question": QUESTION, "document_ids": [text["id"], pdf["id"]]},
        headers=bearer(key),
    ).json()
    assert found["counted"]["input_tokens"] == counted["input_tokens"] > 0

    assert found["errors"] == {
        "badKey": "AuthenticationError",
        "unknownFile": "NotFoundError",
        "invalidBody": "BadRequestError",
    }
