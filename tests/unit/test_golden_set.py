"""The golden set (eval/golden.jsonl) parses, names only files inside the repository that exist,
and says what each answer must hold and cite."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from app.evaluation.questions import load_questions
from app.evaluation.scoring import loose

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "eval" / "golden.jsonl"


def test_the_golden_set_parses_and_its_files_are_in_the_repository() -> None:
    questions = load_questions(GOLDEN)  # refuses a line whose file does not exist
    assert len(questions) >= 100
    ids = Counter(q.id for q in questions)
    assert None not in ids and max(ids.values()) == 1  # each has its own id
    for question in questions:
        assert question.files and not question.document_ids and question.collection_id is None
        assert question.answer_contains and question.cites, question.id
        for path in question.files:
            assert path.is_file() and path.is_relative_to(ROOT), (question.id, path)


def test_every_expected_string_is_in_one_of_the_question_s_files_as_bytes_or_text() -> None:
    """Catches a typo in an expectation of a text document (PDFs and Office files are checked by
    the engine's answers: their text is not their bytes)."""
    for question in load_questions(GOLDEN):
        texts = [p for p in question.files if p.suffix in (".txt", ".md", ".csv")]
        if len(texts) != len(question.files):
            continue
        corpus = loose("".join(p.read_text(encoding="utf-8") for p in texts))
        for wanted in question.answer_contains + question.cites:
            assert loose(wanted) in corpus, (question.id, wanted)
