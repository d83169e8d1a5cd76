"""The local engine cites what was asked, over real HTTP: the README's questions about the Amazon
letter cite the passage they ask about; a question about a table's value cites the row that
holds it, not the header; a question about a named thing cites the sentence naming it, not its
heading; a question asking two things cites an answer to each; a sentence repeated in the
documents is quoted once."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.fixture_files import AMAZON_PDF

FIGURES = (
    "# Quarterly figures\n\n"
    "The table below gives revenue and margin by quarter.\n\n"
    "| Quarter | Revenue | Margin |\n"
    "|---|---|---|\n"
    "| Q1 | $120M | 12% |\n"
    "| Q2 | $135M | 14% |\n"
    "| Q3 | $150M | 15% |\n"
    "| Q4 | $171M | 17% |\n\n"
    "Revenue grew every quarter of the year.\n"
)
SALES = "Team results\n\nregion,quarter,sales\nNorth,Q1,100\nSouth,Q1,250\nEast,Q2,75\n"
HANDBOOK = (
    "# Project Kuiper\n"
    "Project Kuiper is a satellite network. Its antennas deliver speeds up to 400 Mbps.\n\n"
    "## Kuiper launch\n"
    "The first launch was in October.\n\n"
    "## Parental leave\n"
    "Parental leave is 16 weeks at full pay.\n"
)


def store_text(client: httpx.Client, text: str) -> str:
    response = client.post("/v1/documents", json={"source": {"type": "text", "data": text}})
    assert response.status_code in (200, 201), response.text
    return str(response.json()["id"])


def ask(client: httpx.Client, question: str, document_ids: list[str]) -> dict[str, Any]:
    body = {
        "question": question,
        "document_ids": document_ids,
        "retrieval": {"mode": "documents"},
    }
    response = client.post("/v1/answers", json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def citations(answer: dict[str, Any]) -> list[dict[str, Any]]:
    found = [c for segment in answer["segments"] for c in segment["citations"]]
    assert found, answer["text"]
    assert all(c["verified"] is True for c in found), found
    return found


@pytest.fixture
def letter(client: httpx.Client) -> str:
    upload = client.post(
        "/v1/documents/upload", files={"file": ("letter.pdf", AMAZON_PDF.read_bytes())}
    )
    assert upload.status_code in (200, 201), upload.text
    return str(upload.json()["id"])


def test_how_fast_is_kuiper_over_the_letter_cites_the_kuiper_passage(
    client: httpx.Client, letter: str
) -> None:
    found = citations(ask(client, "How fast is Kuiper?", [letter]))
    # The Kuiper passage (page 2) comes first, ahead of the sentences that only say "fast";
    # at most one of those follows it.
    texts = [c["cited_text"] for c in found]
    assert "Project Kuiper" in texts[0] and found[0]["span"]["start_page"] == 2, texts
    assert any("Kuiper is our low Earth orbit satellite initiative" in t for t in texts), texts
    assert sum("Kuiper" not in t for t in texts) <= 1, texts


def test_the_revenue_question_cites_the_revenue_sentence_alone(
    client: httpx.Client, letter: str
) -> None:
    (citation,) = citations(ask(client, "What was Amazon's total revenue in 2023?", [letter]))
    assert "total revenue grew 12%" in citation["cited_text"]
    assert "$575B" in citation["cited_text"]


def test_a_question_asking_two_things_cites_an_answer_to_each(
    client: httpx.Client, letter: str
) -> None:
    question = "What is Project Kuiper, and how is advertising growing?"
    found = citations(ask(client, question, [letter]))
    texts = [c["cited_text"] for c in found]
    assert len(found) == 2, texts
    assert "Kuiper" in texts[0]
    assert "advertising" in texts[1].casefold() and "grow" in texts[1].casefold()


@pytest.mark.parametrize(
    ("question", "row"),
    [
        ("What was the revenue in Q3?", "| Q3 | $150M | 15% |"),
        ("What is the margin of Q4?", "| Q4 | $171M | 17% |"),
        ("Which quarter had $135M revenue?", "| Q2 | $135M | 14% |"),
    ],
)
def test_a_question_about_a_table_value_cites_its_row(
    client: httpx.Client, question: str, row: str
) -> None:
    document_id = store_text(client, FIGURES)
    (citation,) = citations(ask(client, question, [document_id]))
    assert citation["cited_text"].strip() == row
    start = FIGURES.index(row)
    assert citation["span"]["start_char"] == start
    assert "Quarter" not in citation["cited_text"] and "---" not in citation["cited_text"]


def test_a_question_about_a_csv_value_cites_its_row(client: httpx.Client) -> None:
    document_id = store_text(client, SALES)
    (citation,) = citations(ask(client, "What were the sales of South?", [document_id]))
    assert citation["cited_text"].strip() == "South,Q1,250"


@pytest.mark.parametrize(
    ("question", "sentence"),
    [
        ("What is Project Kuiper?", "Project Kuiper is a satellite network."),
        ("When was the Kuiper launch?", "The first launch was in October."),
        ("How long is parental leave?", "Parental leave is 16 weeks at full pay."),
    ],
)
def test_an_entity_question_cites_the_sentence_naming_it_not_the_heading(
    client: httpx.Client, question: str, sentence: str
) -> None:
    document_id = store_text(client, HANDBOOK)
    found = citations(ask(client, question, [document_id]))
    assert sentence in found[0]["cited_text"]
    assert not any(c["cited_text"].lstrip().startswith("#") for c in found), found


def test_a_sentence_repeated_in_the_documents_is_quoted_once(client: httpx.Client) -> None:
    policy = "Refunds are paid within 14 days of a return. "
    first = store_text(client, "Returns policy. " + policy + "Shipping is free.")
    second = store_text(client, policy + "Gift cards are not refunded.")
    answer = ask(client, "When are refunds paid?", [first, second])
    texts = [c["cited_text"].strip() for c in citations(answer)]
    assert texts.count(policy.strip()) == 1, texts
    assert answer["text"].count("within 14 days") == 1
