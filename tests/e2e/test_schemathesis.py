"""Schemathesis against the served app and its own /openapi.json: generated requests, valid and
invalid, must never get a 5xx, and every response must be documented (status, content type,
headers) and match its schema, streamed answers event by event included.

Seeded and bounded: the same requests every run, about 20 seconds. The app is served with the
per-key request limit off, or the limit would answer most requests 429 and test nothing else.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.auth.scopes import ALL_SCOPES
from app.settings import Settings
from tests.conftest import ServedApp
from tests.e2e.test_auth import make_key

CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "response_headers_conformance",
    "negative_data_rejection",  # what the schema calls invalid is refused with a 4xx
    "ignored_auth",  # every operation that declares the API key refuses a request without it
    "use_after_free",  # a deleted document or conversation is gone
)
# Not "ensure_resource_availability": once addCollectionDocuments had links from createCollection,
# its 404 document_not_found for unknown ids in the body read as the new collection missing, and
# a per-operation exception in the config is not applied to checks named on the command line.
# That a created document, conversation, collection or answer is readable at once is tested
# over HTTP by the e2e tests of each.
PHASES = ("examples", "coverage", "fuzzing", "stateful")
MAX_EXAMPLES = 25
SEED = 20250101
TIMEOUT = 600  # seconds: a guard against a hang (the run takes about 20-60 s on an idle machine)


@pytest.fixture
def unlimited(settings: Settings, client: httpx.Client) -> Iterator[ServedApp]:
    """Citegate served over the same (emptied) database, without the per-key request limit."""
    with ServedApp(settings.model_copy(update={"rate_limit_per_minute": 0})) as app:
        yield app


def schemathesis(base_url: str, key: str, config: Path, *options: str) -> str:
    """Run `schemathesis run` on the served document; its report, which must be clean."""
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--config-file",
        str(config),
        "run",
        f"{base_url}/openapi.json",
        "--header",
        f"Authorization: Bearer {key}",
        "--checks",
        ",".join(CHECKS),
        "--phases",
        ",".join(PHASES),
        "--max-examples",
        str(MAX_EXAMPLES),
        "--generation-deterministic",  # the same cases every run; no example database
        "--workers",
        "1",
        "--request-timeout",
        "30",
        "--no-color",
        *options,
    ]
    result = subprocess.run(
        command, cwd=config.parent, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    assert "Tested: " in report and "failures" not in report.split("SUMMARY")[-1], report
    return report


def test_schemathesis_finds_no_errors(
    unlimited: ServedApp, database_url: str, tmp_path: Path
) -> None:
    # Every scope, so that the administration routes are reached too.
    _, key = make_key(database_url, "schemathesis", scopes=ALL_SCOPES)
    auth = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=unlimited.base_url, headers=auth, timeout=30) as http:
        # Not the text of createDocument's example, which schemathesis creates and deletes.
        created = http.post(
            "/v1/documents",
            json={"source": {"type": "text", "data": "The sea is deep. It is blue."}},
        )
        assert created.status_code == 201, created.text
    document_id = created.json()["id"]

    # First every operation but the deletes, with questions about that document, so that
    # generated questions reach the answering code and its streams.
    config = tmp_path / "schemathesis.toml"
    config.write_text(
        "[cache]\nenabled = false\n\n"
        "[[operations]]\n"
        'include-operation-id = ["createAnswer", "countAnswerTokens", "createConversation"]\n'
        f"parameters = {{ {json.dumps('body.document_ids')} = {json.dumps([document_id])} }}\n"
    )
    report = schemathesis(unlimited.base_url, key, config, "--exclude-method", "DELETE")
    assert "Selected: 40/46" in report, report
    answered = httpx.get(f"{unlimited.base_url}/v1/documents/{document_id}", headers=auth)
    assert answered.status_code == 200  # the document was there all along

    # Then every operation; ids of created documents, answers and conversations come by links.
    config.write_text("[cache]\nenabled = false\n")
    report = schemathesis(unlimited.base_url, key, config)
    assert "Selected: 46/46" in report, report


NUL = "a\x00b"


@pytest.mark.parametrize(
    ("method", "path", "request_args"),
    [
        (
            "POST",
            "/v1/documents",
            {"json": {"source": {"type": "text", "data": "x."}, "title": NUL}},
        ),
        (
            "POST",
            "/v1/documents",
            {"json": {"source": {"type": "text", "data": "x."}, "context": NUL}},
        ),
        (
            "POST",
            "/v1/documents/upload",
            {"files": {"file": ("a.txt", b"x.")}, "data": {"title": NUL}},
        ),
        ("GET", "/v1/documents/a%00b", {}),
        ("GET", "/v1/documents/a%00b/content", {}),
        ("GET", "/v1/documents/a%00b/chunks", {}),
        ("DELETE", "/v1/documents/a%00b", {}),
        ("GET", "/v1/answers/a%00b", {}),
        ("GET", "/v1/conversations/a%00b", {}),
        ("DELETE", "/v1/conversations/a%00b", {}),
        ("POST", "/v1/answers", {"json": {"question": "Q?", "document_ids": [NUL]}}),
        ("POST", "/v1/answers", {"json": {"question": "Q?", "conversation_id": NUL}}),
        ("POST", "/v1/answers", {"json": {"question": NUL, "document_ids": ["doc_a"]}}),
        ("POST", "/v1/answers", {"json": {"question": "Q?", "document_ids": ["d"], "system": NUL}}),
        ("POST", "/v1/answers", {"json": {"question": "Q?", "document_ids": ["d"], "model": NUL}}),
        ("POST", "/v1/answers/count-tokens", {"json": {"question": "Q?", "document_ids": [NUL]}}),
        ("POST", "/v1/conversations", {"json": {"document_ids": [NUL]}}),
        ("POST", "/v1/conversations", {"json": {"document_ids": ["doc_a"], "title": NUL}}),
        ("POST", "/v1/conversations", {"json": {"document_ids": ["doc_a"], "system": NUL}}),
        ("POST", "/v1/conversations", {"json": {"document_ids": ["doc_a"], "model": NUL}}),
        ("POST", "/v1/collections", {"json": {"name": NUL}}),
        ("POST", "/v1/collections", {"json": {"name": "n", "description": NUL}}),
        ("GET", "/v1/collections/a%00b", {}),
        ("GET", "/v1/collections/a%00b/documents", {}),
        ("POST", "/v1/collections/a%00b/documents", {"json": {"document_ids": ["doc_a"]}}),
        ("POST", "/v1/collections/col_a/documents", {"json": {"document_ids": [NUL]}}),
        ("DELETE", "/v1/collections/a%00b", {}),
        ("DELETE", "/v1/collections/col_a/documents/a%00b", {}),
        ("POST", "/v1/search", {"json": {"query": NUL, "document_ids": ["doc_a"]}}),
        ("POST", "/v1/search", {"json": {"query": "q", "document_ids": [NUL]}}),
        ("POST", "/v1/search", {"json": {"query": "q", "collection_id": NUL}}),
    ],
)
def test_a_nul_character_is_a_validation_error(
    client: httpx.Client, method: str, path: str, request_args: dict[str, Any]
) -> None:
    """Found by schemathesis on PostgreSQL, whose text cannot hold NUL: these were 500s, and a
    NUL in a question failed only after the upstream had answered (and was paid)."""
    response = client.request(method, path, **request_args)
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "validation_error"
