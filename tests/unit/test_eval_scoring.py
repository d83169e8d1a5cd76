"""The scoring of `citegate eval` on hand-made answers: accuracy (case and whitespace ignored),
citation precision and recall by support verdict, the verified rate, percentiles; and the
question set's lines, each refused with its line number."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.evaluation.questions import Question, QuestionFileError, load_questions
from app.evaluation.scoring import makes_claim, percentile, score, summarize


def citation(cited_text: str, verdict: str | None, verified: bool = True) -> dict[str, Any]:
    value: dict[str, Any] = {"type": "char_location", "cited_text": cited_text}
    value["verified"] = verified
    if verdict is not None:
        value["support"] = {"verdict": verdict, "score": 1.0, "method": "lexical", "reasons": []}
    return value


def segment(text: str, *citations: dict[str, Any]) -> dict[str, Any]:
    return {"text": text, "citations": list(citations)}


def answer(*segments: dict[str, Any], **usage: int) -> dict[str, Any]:
    return {
        "id": "ans_1",
        "status": "completed",
        "text": "".join(s["text"] for s in segments),
        "segments": list(segments),
        "usage": {"input_tokens": 10, "output_tokens": 5} | usage,
    }


def asked(*, answer_contains: tuple[str, ...] = (), cites: tuple[str, ...] = ()) -> Question:
    return Question(line=1, id=None, question="?", answer_contains=answer_contains, cites=cites)


def test_accuracy_ignores_case_and_whitespace() -> None:
    reply = answer(segment("Revenue grew to\n$575 B in 2023."))
    assert score(asked(answer_contains=("revenue GREW", "$575B")), reply, 1.0).correct
    wrong = score(asked(answer_contains=("$575B", "13%")), reply, 1.0)
    assert not wrong.correct and wrong.missing == ["13%"]


def test_precision_and_recall_count_supported_citations_and_segments() -> None:
    first = answer(
        segment("Based on the documents: "),  # a lead-in: no claim
        segment(
            "Revenue grew 12%.",
            citation("Revenue grew 12%.", "supported"),
            citation("Revenue grew.", "partial"),
        ),
        segment(" AWS grew 31%.", citation("AWS grew 13%.", "unsupported", verified=False)),
        segment(" That is all."),  # a claim that cites nothing
    )
    second = answer(
        segment("Kuiper launched.", citation("Kuiper launched.", "supported")),
        segment(" It is fast.", citation("It is fast.", None)),  # no verdict: unchecked
        input_tokens=7,
        output_tokens=3,
    )
    results = [score(asked(), first, 10.0), score(asked(), second, 30.0)]
    assert [(r.citations, r.supported, r.verified) for r in results] == [(3, 1, 2), (2, 1, 2)]
    assert [(r.supported_segments, r.claim_segments) for r in results] == [(1, 3), (1, 2)]
    summary = summarize(results, support="lexical")
    assert summary["citation_precision"] == 2 / 5
    assert summary["citation_recall"] == 2 / 5
    assert summary["verified_rate"] == 4 / 5
    assert summary["accuracy"] == 1.0  # nothing was expected
    assert summary["tokens"]["input_tokens"] == 17 and summary["tokens"]["output_tokens"] == 8
    assert summary["latency_p50_ms"] == 20.0
    assert summary["cites_rate"] is None  # no question expected citations


def test_cites_must_be_in_a_supporting_citation() -> None:
    reply = answer(
        segment("Revenue grew 12%.", citation("Revenue  grew 12% to $575B.", "supported")),
        segment(" AWS grew 31%.", citation("AWS grew 13%.", "partial")),
    )
    result = score(asked(cites=("REVENUE GREW 12%", "AWS grew 13%")), reply, 1.0)
    assert result.missing_cites == ["AWS grew 13%"] and not result.cites_found
    found = score(asked(cites=("to $575B",)), reply, 1.0)
    assert found.cites_found
    assert summarize([result, found], support="lexical")["cites_rate"] == 0.5


def test_an_answer_without_citations_has_no_precision() -> None:
    summary = summarize([score(asked(), answer(segment("No idea.")), 1.0)], support="judge")
    assert summary["citation_precision"] is None and summary["verified_rate"] is None
    assert summary["citation_recall"] == 0.0  # one claim, unsupported


def test_judge_tokens_are_added_up_apart() -> None:
    judged = answer(segment("x"))
    judged["usage"]["support_check"] = {"input_tokens": 300, "output_tokens": 40}
    results = [score(asked(), judged, 1.0), score(asked(), answer(segment("y")), 1.0)]
    tokens = summarize(results, support="judge")["tokens"]
    assert tokens["support_check"] == {"input_tokens": 300, "output_tokens": 40}
    assert tokens["input_tokens"] == 20


@pytest.mark.parametrize(
    ("text", "claim"),
    [("Based on the documents: ", False), ("\n\n", False), (". ", False), ("It is 5.", True)],
)
def test_which_uncited_segments_make_a_claim(text: str, claim: bool) -> None:
    assert makes_claim(segment(text)) is claim


def test_percentiles_interpolate() -> None:
    assert percentile([], 0.5) is None
    assert percentile([5.0], 0.95) == 5.0
    assert percentile([40.0, 10.0, 20.0, 30.0], 0.5) == 25.0
    assert percentile(list(map(float, range(1, 101))), 0.95) == pytest.approx(95.05)


def test_a_set_is_read_with_its_files_relative_to_its_folder(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("A.")
    path = tmp_path / "set.jsonl"
    path.write_text(
        '{"id": "q1", "question": "A?", "files": ["docs/a.txt"], '
        '"expected": {"answer_contains": ["A"], "cites": ["A."]}}\n'
        "\n"
        '{"question": "B?", "document_ids": ["doc_1"]}\n'
    )
    first, second = load_questions(path)
    assert first.files == ((tmp_path / "docs" / "a.txt").resolve(),)
    assert (first.id, first.answer_contains, first.cites) == ("q1", ("A",), ("A.",))
    assert (second.line, second.document_ids, second.answer_contains) == (3, ("doc_1",), ())


def test_an_empty_set_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "set.jsonl"
    path.write_text("\n\n")
    with pytest.raises(QuestionFileError, match="holds no question") as raised:
        load_questions(path)
    assert raised.value.line is None


def test_a_bad_line_names_its_number(tmp_path: Path) -> None:
    path = tmp_path / "set.jsonl"
    path.write_text('{"question": "A?", "document_ids": ["doc_1"]}\n{"question": 3}\n')
    with pytest.raises(QuestionFileError, match=r"line 2: question") as raised:
        load_questions(path)
    assert raised.value.line == 2
