"""The local engine answers in the languages the index reads, Chinese and Japanese included,
with verified citations of the sentence that holds what was asked; and the README's example
question about the Amazon letter cites the figure it asks for."""

from __future__ import annotations

import httpx
import pytest

from tests.fixture_files import AMAZON_PDF

CHINESE = (
    "亚马逊公司成立于1994年。2023年，亚马逊的总收入增长了12%，达到5750亿美元。"
    "柯伊伯计划将为偏远地区提供宽带服务。"
)
JAPANESE = (
    "アマゾンは1994年に設立されました。2023年の総収益は12%増加しました。"
    "カイパー計画は遠隔地にブロードバンドを提供します。"
)


def store_text(client: httpx.Client, text: str) -> str:
    response = client.post("/v1/documents", json={"source": {"type": "text", "data": text}})
    assert response.status_code in (200, 201), response.text
    return str(response.json()["id"])


@pytest.mark.parametrize(
    ("text", "question", "expected"),
    [
        (CHINESE, "亚马逊的总收入是多少？", "总收入增长了12%"),
        (CHINESE, "柯伊伯计划提供什么服务？", "宽带服务"),
        (JAPANESE, "総収益はどれくらい増加しましたか？", "総収益は12%増加"),
        (JAPANESE, "カイパー計画は何を提供しますか？", "ブロードバンド"),
    ],
)
def test_a_question_in_chinese_or_japanese_gets_a_verified_citation(
    client: httpx.Client, text: str, question: str, expected: str
) -> None:
    document_id = store_text(client, text)
    answer = client.post("/v1/answers", json={"question": question, "document_ids": [document_id]})
    assert answer.status_code == 200, answer.text
    citations = [c for s in answer.json()["segments"] for c in s["citations"]]
    assert citations, answer.json()["text"]
    assert citations[0]["verified"] is True
    assert expected in citations[0]["cited_text"]
    assert citations[0]["support"]["verdict"] == "supported"


def test_the_readme_question_cites_the_revenue_sentence(client: httpx.Client) -> None:
    upload = client.post(
        "/v1/documents/upload", files={"file": ("letter.pdf", AMAZON_PDF.read_bytes())}
    )
    document_id = upload.json()["id"]
    body = {"question": "What was Amazon's total revenue in 2023?", "document_ids": [document_id]}
    answer = client.post("/v1/answers", json=body).json()
    (citation,) = [c for s in answer["segments"] for c in s["citations"]]
    assert citation["verified"] is True
    assert "$575B" in citation["cited_text"]
    assert answer["support_summary"]["supported"] == 1
