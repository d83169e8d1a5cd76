"""The repository stands alone: no tracked file reaches for a directory beside the checkout.

A clone with nothing next to it must run its tests, benchmarks and README examples, so code,
tests, bench, scripts, CI and docs read their inputs from inside the repository
(tests/fixture_files.py names the fixtures)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# A path to a "shared" directory outside the checkout, written as a string (a parent's or an
# absolute "shared" folder) or built with pathlib (a parent joined with "shared").
OUTSIDE_SHARED = re.compile(
    rb"""\.\./shared\b|/work/shared\b|/\s*["']shared["']|["']shared["']\s*/"""
)
SKIPPED_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}


def tracked_files() -> list[Path]:
    """The files git tracks; outside a git checkout (an unpacked archive), every file."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=False)
    if listed.returncode == 0:
        return [ROOT / name for name in listed.stdout.decode().split("\0") if name]
    return [
        path
        for path in ROOT.rglob("*")
        if path.is_file() and not SKIPPED_DIRS.intersection(path.relative_to(ROOT).parts)
    ]


def test_the_guard_recognises_each_way_of_writing_the_path() -> None:
    for line in (
        # Built in pieces, so that this file holds no such path itself.
        b"curl -F file=@.." + b"/shared/fixtures/anthropic/a.pdf",
        b'SHARED = Path("/work/shared")',
        b"Path(__file__).resolve().parents[2] / " + b'"shared" / "corpus"',
        b"ROOT.parent / 'shared'",
    ):
        assert OUTSIDE_SHARED.search(line), line
    for line in (b"rate-limit counters shared by replicas", b'"shared_key": 1'):
        assert not OUTSIDE_SHARED.search(line), line


def test_no_tracked_file_refers_to_a_directory_beside_the_checkout() -> None:
    files = [path for path in tracked_files() if path != Path(__file__).resolve()]
    assert any(path.name == "conftest.py" for path in files)  # the listing found the tests
    offending = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in files
        if path.is_file()
        for number, line in enumerate(path.read_bytes().splitlines(), start=1)
        if OUTSIDE_SHARED.search(line)
    ]
    assert not offending, (
        "these lines reach outside the repository; copy what they need into it "
        f"(fixtures under tests/fixtures/, prose under docs/): {offending}"
    )
