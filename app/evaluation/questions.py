"""The question set: one JSON object a line (API.md, "Claim support").

``{"question", "document_ids" | "collection_id" | "files": [paths], "expected":
{"answer_contains": [...], "cites": [...]}}``; ``files`` are read relative to the set's folder.
A line may also carry an ``id`` and a ``note`` (for the reader; the result repeats the ``id``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

NonBlank = Annotated[str, StringConstraints(min_length=1, pattern=r"\S")]


class QuestionFileError(Exception):
    """A line of the set that cannot be asked, or a set that cannot be read."""

    def __init__(self, path: Path, line: int | None, message: str) -> None:
        self.line = line
        where = f"{path}, line {line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")


class Expected(BaseModel):
    model_config = ConfigDict(extra="forbid")

    answer_contains: list[NonBlank] = Field(default_factory=list)
    cites: list[NonBlank] = Field(default_factory=list)


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: NonBlank | None = None
    note: str | None = None
    question: NonBlank
    document_ids: list[NonBlank] | None = Field(default=None, min_length=1)
    collection_id: NonBlank | None = None
    files: list[NonBlank] | None = Field(default=None, min_length=1)
    expected: Expected = Field(default_factory=Expected)


@dataclass(frozen=True, slots=True)
class Question:
    """One line of the set: what to ask about, and what a good answer holds."""

    line: int
    id: str | None
    question: str
    document_ids: tuple[str, ...] = ()
    collection_id: str | None = None
    files: tuple[Path, ...] = ()  # resolved paths, uploaded before asking
    answer_contains: tuple[str, ...] = ()
    cites: tuple[str, ...] = ()


def _first_error(error: ValidationError) -> str:
    problem = error.errors(include_url=False)[0]
    where = ".".join(str(part) for part in problem["loc"])
    return f"{where}: {problem['msg']}" if where else str(problem["msg"])


def parse_line(text: str, number: int, folder: Path, path: Path) -> Question:
    """One line of the set (``number`` counts from 1), its files resolved against ``folder``."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise QuestionFileError(path, number, f"not JSON ({exc.msg})") from exc
    if not isinstance(value, dict):
        raise QuestionFileError(path, number, "not a JSON object")
    if "question" not in value:
        raise QuestionFileError(path, number, "no question")
    try:
        line = _Line.model_validate(value)
    except ValidationError as exc:
        raise QuestionFileError(path, number, _first_error(exc)) from exc
    targets = [
        name
        for name in ("document_ids", "collection_id", "files")
        if getattr(line, name) is not None
    ]
    if len(targets) != 1:
        raise QuestionFileError(
            path,
            number,
            "give the documents as exactly one of document_ids, collection_id or files"
            + (f" (not {' and '.join(targets)})" if targets else ""),
        )
    files = tuple((folder / name).resolve() for name in line.files or ())
    for name, resolved in zip(line.files or (), files, strict=True):
        if not resolved.is_file():
            raise QuestionFileError(path, number, f"no file {name} (looked for {resolved})")
    return Question(
        line=number,
        id=line.id,
        question=line.question,
        document_ids=tuple(line.document_ids or ()),
        collection_id=line.collection_id,
        files=files,
        answer_contains=tuple(line.expected.answer_contains),
        cites=tuple(line.expected.cites),
    )


def load_questions(path: Path) -> list[Question]:
    """Every question of the set; blank lines are skipped. Raises ``QuestionFileError``."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise QuestionFileError(path, None, f"cannot be read ({exc})") from exc
    folder = path.resolve().parent
    questions = [
        parse_line(line, number, folder, path)
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip()
    ]
    if not questions:
        raise QuestionFileError(path, None, "holds no question")
    return questions
