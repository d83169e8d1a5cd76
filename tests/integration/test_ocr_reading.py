"""How a page is read by OCR (real Tesseract, in this process): an upright page of the Latin
script is read without asking OSD; a turned page, or a page of another script, is turned and
read in its script's languages after OSD; a page is read first in the languages of the page
before it, so a German document's pages are read once each, not in English and then again.
The calls are counted on pytesseract, which runs Tesseract for each."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytesseract
import pytest
from PIL import Image

from app.documents.ocr import OcrPage, hint_after, ocr_workers, parse_languages, read_picture
from tests.fixture_files import CORPUS
from tests.scans import GERMAN, RUSSIAN, SERIF, cer, render_page, typed_page

CONFIGURED = parse_languages("eng+deu+fra+spa+ita+por+rus+ara+chi_sim+jpn")


@pytest.fixture
def tesseract_runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """How many times Tesseract was run to read (``data``, by languages) and for OSD."""
    runs: Counter[str] = Counter()

    def counted(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            runs[name if name == "osd" else f"data {kwargs.get('lang')}"] += 1
            return real(*args, **kwargs)

        return run

    monkeypatch.setattr(pytesseract, "image_to_osd", counted("osd", pytesseract.image_to_osd))
    monkeypatch.setattr(pytesseract, "image_to_data", counted("data", pytesseract.image_to_data))
    monkeypatch.setenv("OMP_THREAD_LIMIT", "1")
    yield runs


@pytest.fixture(scope="module")
def typed() -> Callable[[str], Image.Image]:
    if not SERIF.exists():
        pytest.skip("DejaVu Serif (fonts-dejavu-core) is not installed")
    return typed_page


def read(picture: Image.Image, hint: str | None = None) -> OcrPage:
    return read_picture(picture, 1, CONFIGURED, hint=parse_languages(hint) if hint else None)


def test_an_upright_latin_page_is_read_once_without_osd_and_a_turned_one_after_it(
    tesseract_runs: Counter[str],
) -> None:
    picture = render_page((CORPUS / "multicolumn.pdf").read_bytes(), 3)
    upright = read(picture)
    assert tesseract_runs == {"data eng": 1} and upright.runs == 1
    assert upright.rotation == 0 and upright.languages == "eng"
    assert upright.confidence is not None and upright.confidence > 0.9

    tesseract_runs.clear()
    turned = read(picture.rotate(180, expand=True))
    # read as it is, unsure (upside down), then OSD turns it and it is read again
    assert tesseract_runs["osd"] >= 1 and tesseract_runs["data eng"] == 2
    assert turned.rotation == 180 and turned.runs == sum(tesseract_runs.values())
    assert cer(turned.text, upright.text) <= 0.02

    tesseract_runs.clear()
    sideways = read(picture.rotate(90, expand=True))
    assert tesseract_runs["osd"] >= 1 and tesseract_runs["data eng"] == 2
    assert sideways.rotation in (90, 270)
    assert cer(sideways.text, upright.text) <= 0.02


def test_a_german_page_is_read_again_in_german_unless_the_page_before_was_german(
    tesseract_runs: Counter[str], typed: Callable[[str], Image.Image]
) -> None:
    picture = typed(GERMAN)
    first = read(picture)  # the document's first page: English, then German with English
    assert tesseract_runs == {"data eng": 1, "data deu+eng": 1}
    assert first.languages == "deu+eng" and cer(first.text, GERMAN) <= 0.02

    tesseract_runs.clear()
    next_page = read(picture, hint=hint_after(first, None))
    assert tesseract_runs == {"data deu+eng": 1} and next_page.runs == 1
    assert next_page.text == first.text
    for word in ("Größe", "Bäume", "läßt", "Straßen"):
        assert word in next_page.text, (word, next_page.text)


def test_a_page_of_another_script_is_read_in_its_languages_after_osd(
    tesseract_runs: Counter[str], typed: Callable[[str], Image.Image]
) -> None:
    picture = typed(RUSSIAN)
    first = read(picture)  # English is unsure of it: OSD finds Cyrillic
    assert tesseract_runs["osd"] >= 1 and tesseract_runs["data eng"] == 1
    assert tesseract_runs["data rus"] == 1
    assert first.languages == "rus" and cer(first.text, RUSSIAN) <= 0.02

    tesseract_runs.clear()
    next_page = read(picture, hint=first.languages)  # the page before was Russian: OSD first
    assert tesseract_runs["osd"] >= 1 and set(tesseract_runs) == {"osd", "data rus"}
    assert next_page.text == first.text


def test_a_page_with_too_few_words_to_tell_hands_on_the_hint_it_had(
    tesseract_runs: Counter[str],
) -> None:
    blank = read(Image.new("L", (2480, 3508), 255), hint="deu+eng")
    assert blank.words == () and blank.runs == sum(tesseract_runs.values())
    # read in every configured language (OSD found nothing), which is no hint for the next
    assert blank.languages != "deu+eng"
    assert hint_after(blank, "deu+eng") == "deu+eng"


def test_the_workers_leave_a_core_to_the_service_and_its_database() -> None:
    cores = len(os.sched_getaffinity(0))
    assert ocr_workers(0) == max(1, cores - 1)
    assert ocr_workers(3) == 3
