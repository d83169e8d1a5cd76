"""The OpenAI-compatible API through the official OpenAI TypeScript SDK (``openai`` from npm,
installed from tests/ts_openai/package-lock.json by ``npm ci``), run by Node.js against the
served app and the local engine: one node run, its findings checked here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.conftest import Served
from tests.e2e.test_auth import bearer, make_key
from tests.e2e.test_openai_chat import QUESTION
from tests.fake_upstream import GRASS
from tests.fixture_files import AMAZON_PDF
from tests.node_check import run_node_check

TS_OPENAI = Path(__file__).parents[1] / "ts_openai"


def run_check(base_url: str, key: str) -> dict[str, Any]:
    return run_node_check(TS_OPENAI, "openai", base_url, key, QUESTION)


def _quoted(base_url: str, key: str, citegate: dict[str, Any]) -> str:
    chunks = httpx.get(
        f"{base_url}/v1/documents/{citegate['document_id']}/chunks",
        params={"limit": 100},
        headers=bearer(key),
    ).json()
    text = "".join(chunk["text"] for chunk in chunks["data"])
    return text[citegate["span"]["start_char"] : citegate["span"]["end_char"]]


def test_the_typescript_openai_sdk(client: httpx.Client, served: Served, database_url: str) -> None:
    _, key = make_key(database_url, "typescript-openai")
    found = run_check(served.base_url, key)

    text, pdf = found["files"]
    assert (text["object"], text["filename"], text["bytes"]) == ("file", "grass.txt", len(GRASS))
    assert pdf["bytes"] == AMAZON_PDF.stat().st_size
    assert found["listed"] == [pdf["id"], text["id"]]  # newest first, one page at a time
    assert found["store"]["object"] == "vector_store"
    assert found["storeFiles"] == [pdf["id"], text["id"]]
    assert found["searched"][0]["file_id"] == text["id"]

    message = found["completion"]["choices"][0]["message"]
    assert found["completion"]["id"] == found["answerId"]
    annotations = message["annotations"]
    assert {a["citegate"]["document_id"] for a in annotations} == {text["id"], pdf["id"]}
    for annotation in annotations:
        where, citegate = annotation["url_citation"], annotation["citegate"]
        assert citegate["verified"] is True
        assert " ".join(_quoted(served.base_url, key, citegate).split()) == " ".join(
            citegate["cited_text"].split()
        )
        assert message["content"][where["start_index"] : where["end_index"]]
    chunks = found["chunks"]
    streamed = "".join(
        c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]
    )
    assert streamed == message["content"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0

    answered = found["answered"]
    search, reply = answered["output"]
    assert search["type"] == "file_search_call" and search["results"][0]["file_id"] == text["id"]
    (part,) = reply["content"]
    assert "green" in part["text"]
    for annotation in part["annotations"]:
        assert annotation["type"] == "file_citation"
        citegate = annotation["citegate"]
        assert _quoted(served.base_url, key, citegate) == citegate["cited_text"]
    kinds = [event["type"] for event in found["events"]]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.output_text.annotation.added" in kinds
    assert found["events"][-1]["response"]["output"][1]["content"][0]["text"] == part["text"]
    assert found["followUp"]["previous_response_id"] == answered["id"]
    assert found["retrieved"]["output"] == found["followUp"]["output"]

    assert found["errors"] == {
        "badKey": {"class": "AuthenticationError", "param": None, "code": "invalid_api_key"},
        "unknownFile": {"class": "NotFoundError", "param": None, "code": "document_not_found"},
        "severalChoices": {
            "class": "BadRequestError",
            "param": "n",
            "code": "unsupported_parameter",
        },
        "otherTool": {
            "class": "BadRequestError",
            "param": "tools[0].type",
            "code": "unsupported_parameter",
        },
    }
