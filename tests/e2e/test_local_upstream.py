"""The whole flow with no API key and no network: Citegate answers through its local engine,
and every citation verifies against the stored PDF text."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from tests.conftest import free_port
from tests.fixture_files import CORPUS, FIXTURES

# Each corpus PDF with text, a question, and a phrase that must be cited from a known page.
QUESTIONS = [
    ("002-trivial-libre-office-writer.pdf", "What does lorem ipsum dolor sit amet say?", 1),
    ("crazyones-pdfa.pdf", "Who are the crazy ones, the misfits and rebels?", 1),
    ("pdflatex-4-pages.pdf", "Is the text different from nonsense like Huardest gefburn?", None),
    ("multicolumn.pdf", "What is the capital of Austria and its population?", 3),
    ("GeoTopo-komprimiert.pdf", "Was ist ein topologischer Raum?", None),
    ("habibi.pdf", "يبيبَح", 1),
]


def ask(client: httpx.Client, question: str, ids: list[str]) -> dict[str, Any]:
    # Whole documents, cited by page (tests/e2e/test_retrieval_answers.py asks by passages).
    body = {"question": question, "document_ids": ids, "retrieval": {"mode": "documents"}}
    response = client.post("/v1/answers", json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    assert answer["model"] == "citegate-local-1" and answer["status"] == "completed"
    return answer


def citations(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for segment in answer["segments"] for c in segment["citations"]]


@pytest.mark.parametrize(("name", "question", "page"), QUESTIONS)
def test_corpus_pdfs_answer_with_verified_citations(
    client: httpx.Client, name: str, question: str, page: int | None
) -> None:
    upload = client.post(
        "/v1/documents/upload", files={"file": (name, (CORPUS / name).read_bytes())}
    )
    assert upload.status_code == 201, upload.text
    document = upload.json()
    answer = ask(client, question, [document["id"]])
    cited = citations(answer)
    assert cited, answer["text"]
    for citation in cited:
        assert citation["type"] == "page_location"
        assert citation["document_id"] == document["id"]
        assert citation["verified"] is True, citation
        span = citation["span"]
        assert citation["start_page_number"] <= span["start_page"] < citation["end_page_number"]
        if page is not None:
            assert span["start_page"] == page
    assert client.get(f"/v1/answers/{answer['id']}").json() == answer


def test_amazon_revenue_is_cited_from_page_one(client: httpx.Client) -> None:
    raw = (FIXTURES / "amazon_2023_letter.pdf").read_bytes()
    document = client.post("/v1/documents/upload", files={"file": ("letter.pdf", raw)}).json()
    answer = ask(
        client,
        "What was Amazon's total revenue in 2023 and how much did it grow year-over-year?",
        [document["id"]],
    )
    first = citations(answer)[0]
    assert first["span"]["start_page"] == 1 and first["verified"]
    assert "total revenue grew 12%" in first["cited_text"]


def test_text_and_content_documents(client: httpx.Client) -> None:
    text = client.post(
        "/v1/documents",
        json={"source": {"type": "text", "data": "The grass is green. The sky is blue."}},
    ).json()
    blocks = [(FIXTURES / "help_center" / f"help_center_{n}.txt").read_text() for n in range(10)]
    content = client.post(
        "/v1/documents",
        json={
            "source": {"type": "content", "content": [{"type": "text", "text": b} for b in blocks]}
        },
    ).json()
    answer = ask(
        client, "What color is the grass? How do I track my order?", [text["id"], content["id"]]
    )
    kinds = {c["type"] for c in citations(answer)}
    assert kinds == {"char_location", "content_block_location"}
    assert all(c["verified"] for c in citations(answer))


def test_count_tokens_and_prompt_cache_through_citegate(client: httpx.Client) -> None:
    raw = (FIXTURES / "amazon_2023_letter.pdf").read_bytes()
    document = client.post("/v1/documents/upload", files={"file": ("letter.pdf", raw)}).json()
    counted = client.post(
        "/v1/answers/count-tokens", json={"question": "Revenue?", "document_ids": [document["id"]]}
    ).json()
    assert counted["input_tokens"] > 1000
    first = ask(client, "What was the revenue?", [document["id"]])
    second = ask(client, "What was the operating income?", [document["id"]])
    assert first["usage"]["cache_creation_input_tokens"] > 1000 or (
        first["usage"]["cache_read_input_tokens"] > 1000
    )
    assert second["usage"]["cache_read_input_tokens"] > 1000


def test_local_engine_command_serves_the_messages_api() -> None:
    port = free_port()
    citegate = Path(sys.executable).parent / "citegate"
    process = subprocess.Popen(
        [str(citegate), "local-engine", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key="unused") as sdk:
            # A loaded machine can take many seconds to start a Python process.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and process.poll() is None:
                try:
                    httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                    break
                except httpx.TransportError:
                    time.sleep(0.1)
            message = sdk.messages.create(
                model="citegate-local-1",
                max_tokens=200,
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "document",
                                "source": {
                                    "type": "text",
                                    "media_type": "text/plain",
                                    "data": "The grass is green. The sky is blue.",
                                },
                                "citations": {"enabled": True},
                            },
                            {"type": "text", "text": "What color is the sky?"},
                        ],
                    }
                ],
            )
            cited = [
                c
                for block in message.content
                if block.type == "text"
                for c in block.citations or []
            ]
            assert cited and cited[0].cited_text == "The sky is blue."
    finally:
        process.terminate()
        process.wait(timeout=20)
