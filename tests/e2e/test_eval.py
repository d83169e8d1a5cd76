"""`citegate eval`: a JSONL question set answered in-process (its own SQLite database and the
local engine) or by a running service over HTTP with a key; the figures of `--json` are those of
the answers the service stored; a bad line of the set is exit 2 naming the line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from app.settings import Settings
from tests.conftest import Served, behind, free_port
from tests.e2e.test_auth import bearer, make_key
from tests.fake_upstream import FakeUpstream, Reply, message
from tests.fixture_files import FIXTURES

CITEGATE = shutil.which("citegate", path=str(Path(sys.executable).parent))
HELP_CENTER = FIXTURES / "help_center"
FIGURES = {
    "questions",
    "support",
    "accuracy",
    "citation_precision",
    "citation_recall",
    "verified_rate",
    "cites_rate",
    "latency_p50_ms",
    "latency_p95_ms",
    "tokens",
    "errors",
    "results",
}


def question_set(folder: Path, lines: list[dict[str, Any] | str]) -> Path:
    """A set in ``folder`` (its files copied beside it), one line per item (a string as is)."""
    for name in ("help_center_1.txt", "help_center_6.txt"):
        shutil.copy(HELP_CENTER / name, folder / name)
    path = folder / "questions.jsonl"
    path.write_text(
        "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n",
        encoding="utf-8",
    )
    return path


RETURNS = {
    "question": "How many days do I have to return an item?",
    "files": ["help_center_1.txt"],
    "expected": {
        "answer_contains": ["30   DAYS"],  # case and whitespace ignored
        "cites": ["within 30 days of the delivery date"],
    },
}
SHIPPING = {
    "question": "How long does standard shipping take?",
    "files": ["help_center_1.txt", "help_center_6.txt"],
    "expected": {"answer_contains": ["3-5 business days"], "cites": ["free for orders over $49"]},
}
WRONG = {  # the articles say nothing of it: a wrong answer, and no expected citation
    "question": "How much does standard shipping cost to Canada?",
    "files": ["help_center_6.txt"],
    "expected": {"answer_contains": ["25 Canadian dollars"], "cites": ["Canada"]},
}


def run_eval(
    *args: str | Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    assert CITEGATE, "the console script is installed"
    environment = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    return subprocess.run(
        [CITEGATE, "eval", *map(str, args)],
        env=environment | (env or {}),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def figures(completed: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert completed.returncode == 0, completed.stderr
    summary: dict[str, Any] = json.loads(completed.stdout)
    assert set(summary) == FIGURES
    return summary


def test_in_process_answers_the_set_and_scores_it(tmp_path: Path) -> None:
    path = question_set(tmp_path, [RETURNS, "", SHIPPING, WRONG])
    summary = figures(run_eval(path, "--json"))
    returns, shipping, wrong = summary["results"]
    assert [r["line"] for r in summary["results"]] == [1, 3, 4]  # blank lines are skipped
    assert returns["correct"] and returns["cites_found"] and returns["missing"] == []
    assert "within 30 days of the delivery date" in returns["text"]
    assert shipping["correct"] and "3-5 business days" in shipping["text"]
    # The article's sentence about free shipping is not what the engine quoted, or it is: the
    # result says which, by the cited text it holds.
    assert shipping["cites_found"] == ("free for orders over $49" in shipping["text"])
    assert not wrong["correct"] and wrong["missing"] == ["25 Canadian dollars"]
    assert wrong["missing_cites"] == ["Canada"] and not wrong["cites_found"]
    assert summary["questions"] == 3 and summary["support"] == "lexical"
    assert summary["accuracy"] == pytest.approx(2 / 3)
    # The local engine quotes: each citation supports the segment that quotes it.
    assert summary["citation_precision"] == 1.0 and summary["verified_rate"] == 1.0
    citations = sum(r["citations"] for r in summary["results"])
    assert citations == sum(r["supported"] for r in summary["results"]) >= 2
    assert summary["errors"] == 0
    assert summary["tokens"]["input_tokens"] == sum(
        r["usage"]["input_tokens"] for r in summary["results"]
    )
    assert summary["tokens"]["support_check"] == {"input_tokens": 0, "output_tokens": 0}
    assert 0 < summary["latency_p50_ms"] <= summary["latency_p95_ms"]


def test_the_table_says_the_figures_and_what_was_missing(tmp_path: Path) -> None:
    path = question_set(tmp_path, [RETURNS, WRONG])
    completed = run_eval(path)
    assert completed.returncode == 0, completed.stderr
    assert "1/2, 50.0%" in completed.stdout  # accuracy
    assert "25 Canadian dollars" in completed.stdout  # the wrong answer's missing string
    assert "Answering" in completed.stderr  # the progress bar is on stderr


def test_judge_mode_through_the_local_engine(tmp_path: Path) -> None:
    path = question_set(tmp_path, [RETURNS, SHIPPING])
    judged = figures(run_eval(path, "--support", "judge", "--json"))
    lexical = figures(run_eval(path, "--json"))
    assert judged["support"] == "judge"
    # The local engine's quotes are all supported by the lexical check: nothing is left to judge.
    assert judged["tokens"]["support_check"] == {"input_tokens": 0, "output_tokens": 0}
    for name in ("accuracy", "citation_precision", "citation_recall", "verified_rate"):
        assert judged[name] == lexical[name]


def stored_answer(http: httpx.Client, answer_id: str, key: str) -> dict[str, Any]:
    response = http.get(f"/v1/answers/{answer_id}", headers=bearer(key))
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_against_a_running_service_with_a_key(
    client: httpx.Client, served: Served, database_url: str, tmp_path: Path
) -> None:
    _, key = make_key(database_url, "evaluators")
    stored = client.post(
        "/v1/documents",
        json={"source": {"type": "text", "data": "The ferry leaves at 6:15. Tickets cost $4."}},
        headers=bearer(key),
    ).json()["id"]
    collection = client.post("/v1/collections", json={"name": "Ferries"}, headers=bearer(key))
    collection_id = collection.json()["id"]
    added = client.post(
        f"/v1/collections/{collection_id}/documents",
        json={"document_ids": [stored]},
        headers=bearer(key),
    )
    assert added.status_code == 200, added.text
    by_id = {
        "question": "When does the ferry leave?",
        "document_ids": [stored],
        "expected": {"answer_contains": ["6:15"], "cites": ["The ferry leaves at 6:15."]},
    }
    by_collection = {
        "question": "How much do tickets cost?",
        "collection_id": collection_id,
        "expected": {"answer_contains": ["$4"]},
    }
    unknown = {"question": "When?", "document_ids": ["doc_01jf3k2m4n5pqrstvwxyz0123"]}
    path = question_set(tmp_path, [RETURNS, SHIPPING, WRONG, by_id, by_collection, unknown])
    summary = figures(run_eval(path, "--url", served.base_url, "--api-key", key, "--json"))
    documents = client.get("/v1/documents", headers=bearer(key)).json()["data"]
    assert len(documents) == 3  # each file uploaded once, with the key's tenant
    *answered, failed = summary["results"]
    citations = supported = verified = 0
    for result in answered:
        answer = stored_answer(client, result["answer_id"], key)
        assert result["text"] == answer["text"]
        cited = [c for s in answer["segments"] for c in s["citations"]]
        assert result["citations"] == len(cited)
        assert result["supported"] == answer["support_summary"]["supported"]
        assert result["verified"] == sum(c["verified"] for c in cited)
        assert result["usage"] == {k: v for k, v in answer["usage"].items() if k != "support_check"}
        citations += len(cited)
        supported += answer["support_summary"]["supported"]
        verified += sum(c["verified"] for c in cited)
    assert answered[3]["correct"] and answered[3]["cites_found"]
    assert answered[4]["correct"]
    assert failed["error"]["status"] == 404 and failed["error"]["code"] == "document_not_found"
    assert failed["answer_id"] is None and not failed["correct"]
    assert summary["errors"] == 1
    assert summary["citation_precision"] == supported / citations
    assert summary["verified_rate"] == verified / citations
    assert summary["accuracy"] == pytest.approx(4 / 6)


def test_a_service_that_cannot_be_reached_is_exit_1(tmp_path: Path) -> None:
    path = question_set(tmp_path, [RETURNS])
    completed = run_eval(path, "--url", f"http://127.0.0.1:{free_port()}", "--json")
    assert completed.returncode == 1
    assert "cannot reach" in completed.stderr and completed.stdout == ""


def test_a_refused_key_is_exit_1_and_says_so(
    client: httpx.Client, served: Served, database_url: str, tmp_path: Path
) -> None:
    make_key(database_url, "evaluators")
    path = question_set(tmp_path, [RETURNS])
    completed = run_eval(path, "--url", served.base_url, "--api-key", "not-a-key", "--json")
    assert completed.returncode == 1
    assert "401" in completed.stderr and completed.stdout == ""


LETTER = "Revenue grew 12% to $575B in 2023. AWS revenue grew 13% that year. Kuiper launched."


def cite(sentence: str) -> dict[str, Any]:
    start = LETTER.index(sentence)
    return {
        "type": "char_location",
        "cited_text": sentence,
        "document_index": 0,
        "document_title": None,
        "start_char_index": start,
        "end_char_index": start + len(sentence),
    }


@pytest.fixture
def behind_fake(client: httpx.Client, settings: Settings, fake: FakeUpstream) -> Iterator[Served]:
    with behind(settings, fake, anthropic_api_key=SecretStr("sk-ant-test-eval")) as app:
        yield app


def test_figures_of_a_judged_answer_with_a_misquote(
    behind_fake: Served, fake: FakeUpstream, tmp_path: Path
) -> None:
    """One supported citation, one misquoted figure the judge finds unsupported, one segment
    that cites nothing: precision 1/2, recall 1/3, the judge's tokens reported."""
    (tmp_path / "letter.txt").write_text(LETTER, encoding="utf-8")
    fake.reset(
        Reply(
            body=message(
                [
                    {"type": "text", "text": "Based on the letter:"},
                    {
                        "type": "text",
                        "text": " Revenue grew 12 percent to 575 billion dollars.",
                        "citations": [cite("Revenue grew 12% to $575B in 2023. ")],
                    },
                    {
                        "type": "text",
                        "text": " AWS revenue grew 31% that year.",
                        "citations": [cite("AWS revenue grew 13% that year. ")],
                    },
                    {"type": "text", "text": " Kuiper is a satellite network."},
                ]
            )
        ),
        Reply(
            body=message(
                [
                    {
                        "type": "tool_use",
                        "id": "toolu_eval01",
                        "name": "record_support",
                        "input": {
                            "verdicts": [
                                {"citation": 0, "verdict": "unsupported", "reason": "31% != 13%"}
                            ]
                        },
                    }
                ],
                stop_reason="tool_use",
                usage={"input_tokens": 321, "output_tokens": 45},
            )
        ),
    )
    line = {
        "question": "How did revenue grow?",
        "files": ["letter.txt"],
        "expected": {"answer_contains": ["575 billion"], "cites": ["$575B", "AWS revenue"]},
    }
    path = tmp_path / "questions.jsonl"
    path.write_text(json.dumps(line) + "\n", encoding="utf-8")
    summary = figures(run_eval(path, "--url", behind_fake.base_url, "--support", "judge", "--json"))
    assert fake.paths() == ["/v1/messages", "/v1/messages"]  # the answer, then the judge
    (result,) = summary["results"]
    assert summary["accuracy"] == 1.0
    assert summary["citation_precision"] == 0.5
    # The lead-in makes no claim; the uncited last sentence does.
    assert (result["supported_segments"], result["claim_segments"]) == (1, 3)
    assert summary["citation_recall"] == pytest.approx(1 / 3)
    assert summary["verified_rate"] == 1.0
    # "AWS revenue" is cited, but by a citation that does not support its segment.
    assert result["missing_cites"] == ["AWS revenue"] and summary["cites_rate"] == 0.0
    assert summary["tokens"]["support_check"] == {"input_tokens": 321, "output_tokens": 45}
    assert result["support_check"] == {"input_tokens": 321, "output_tokens": 45}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"question": "How?", "files": ["help_center_1.txt"]', "not JSON"),
        ('["How?"]', "not a JSON object"),
        ('{"files": ["help_center_1.txt"]}', "no question"),
        ('{"question": "   ", "files": ["help_center_1.txt"]}', "question"),
        ('{"question": "How?"}', "exactly one of document_ids, collection_id or files"),
        (
            '{"question": "How?", "files": ["help_center_1.txt"], "collection_id": "col_1"}',
            "not collection_id and files",
        ),
        ('{"question": "How?", "files": ["nowhere.pdf"]}', "no file nowhere.pdf"),
        ('{"question": "How?", "files": ["help_center_1.txt"], "expect": {}}', "expect"),
    ],
)
def test_a_bad_line_is_exit_2_naming_the_line(tmp_path: Path, line: str, message: str) -> None:
    path = question_set(tmp_path, [RETURNS, "", line, SHIPPING])
    completed = run_eval(path, "--json")
    assert completed.returncode == 2
    assert "line 3: " in completed.stderr and message in completed.stderr
    assert completed.stdout == ""
