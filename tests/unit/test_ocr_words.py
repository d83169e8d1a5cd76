"""The pure parts of reading a page by OCR: languages, Tesseract's words made into page text
with boxes in fractions of the page as displayed (turned back when the page was turned), and
salt-and-pepper noise found and cleaned."""

from __future__ import annotations

import random

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont

from app.documents.ocr import (
    NOISY,
    _page,
    despeckled,
    first_language,
    languages_for,
    parse_languages,
    speckle,
    told_language,
)

CONFIGURED = parse_languages("eng+deu+fra+spa+ita+por+rus+ara+chi_sim+jpn")


def test_languages_are_tesseracts_codes_joined_by_plus() -> None:
    assert CONFIGURED[:2] == ["eng", "deu"] and "chi_sim" in CONFIGURED
    for bad in ("", "eng+", "en", "eng;rm -rf", "ENG", "eng+../x"):
        with pytest.raises(ValueError):
            parse_languages(bad)


def test_a_page_is_read_in_the_configured_languages_of_its_script() -> None:
    assert languages_for("Latin", CONFIGURED) == ["eng", "deu", "fra", "spa", "ita", "por"]
    assert languages_for("Cyrillic", CONFIGURED) == ["rus"]
    assert languages_for("Arabic", CONFIGURED) == ["ara"]
    assert languages_for("Japanese", CONFIGURED) == ["jpn"]
    assert languages_for("Han", CONFIGURED) == ["chi_sim", "jpn"]
    assert languages_for(None, CONFIGURED) == CONFIGURED  # OSD found too little text
    assert languages_for("Cyrillic", ["eng"]) == ["eng"]  # none of its script configured


LATIN = languages_for("Latin", CONFIGURED)


def test_a_latin_page_is_read_in_english_first_and_again_in_the_language_its_words_are_in() -> None:
    assert first_language(LATIN) == "eng"
    assert first_language(["deu", "fra"]) == "deu"  # no English configured: the first one
    assert first_language(["deu"]) is None  # one language: read in it at once
    assert first_language(["eng", "pol"]) is None  # Polish not told apart: read with both
    assert first_language(languages_for(None, CONFIGURED)) is None  # the script unknown
    # as English reads them: umlauts and accents lost, the common words kept
    german = "Die Menge der Punkte ist nicht leer, und sie wird von einer Kurve begrenzt."
    french = "La limite des suites est unique dans un espace separe et elle ne depend pas du choix."
    spanish = "El conjunto de los puntos es cerrado para la topologia que se define con una norma."
    english = "The set of points is not empty, and it is bounded by a curve that was drawn."
    assert told_language(german, LATIN, "eng") == "deu"
    assert told_language(french, LATIN, "eng") == "fra"
    assert told_language(spanish, LATIN, "eng") == "spa"
    assert told_language(english, LATIN, "eng") is None
    assert told_language("Der Satz: the proof of the lemma.", LATIN, "eng") is None  # too few
    assert told_language("", LATIN, "eng") is None


Word = tuple[str, int, int, int, int, int, int, int, float]


def _data(*words: Word) -> dict[str, list[object]]:
    keys = ("text", "block_num", "par_num", "line_num", "left", "top", "width", "height", "conf")
    return {key: [word[i] for word in words] for i, key in enumerate(keys)}


WORDS = _data(
    ("Lorem", 1, 1, 1, 100, 100, 200, 50, 96.0),
    ("ipsum", 1, 1, 1, 320, 100, 180, 50, 90.0),
    ("dolor", 1, 1, 2, 100, 170, 190, 50, 88.0),
    ("", 1, 1, 2, 0, 0, 1000, 1000, -1.0),  # Tesseract's block and line rows carry no word
    ("Sit", 2, 1, 1, 100, 400, 120, 50, 70.0),
)


def test_words_make_lines_and_paragraphs_with_their_offsets_and_mean_confidence() -> None:
    page = _page(3, WORDS, (1000, 2000), 0, "eng")
    assert page.text == "Lorem ipsum\ndolor\n\nSit"
    assert [page.text[start:end] for start, end, *_ in page.words] == [
        "Lorem",
        "ipsum",
        "dolor",
        "Sit",
    ]
    assert page.words[0][2:] == (0.1, 0.05, 0.3, 0.075)  # left, top, right, bottom
    assert page.confidence == pytest.approx((96 + 90 + 88 + 70) / 4 / 100)


@pytest.mark.parametrize(
    ("rotation", "expected"),
    [
        # The upright picture's box (0.1, 0.05)-(0.3, 0.075), on the page as displayed.
        (90, (0.05, 0.7, 0.075, 0.9)),
        (180, (0.7, 0.925, 0.9, 0.95)),
        (270, (0.925, 0.1, 0.95, 0.3)),
    ],
)
def test_boxes_on_a_turned_page_are_turned_back(
    rotation: int, expected: tuple[float, float, float, float]
) -> None:
    page = _page(1, WORDS, (1000, 2000), rotation, "eng")
    assert page.words[0][2:] == pytest.approx(expected)


def _page_of_text() -> Image.Image:
    """A page of text drawn at about 300 dpi (Pillow's own font, scaled up)."""
    picture = Image.new("L", (1200, 900), 255)
    draw = ImageDraw.Draw(picture)
    font = ImageFont.load_default(size=40)
    for line in range(12):
        draw.text(
            (60, 40 + line * 70), "Lorem ipsum dolor sit amet, i.e. j; 1.2", font=font, fill=0
        )
    return picture


def _salt_and_pepper(picture: Image.Image, amount: float) -> Image.Image:
    noisy = picture.copy()
    generator = random.Random(3)
    for _ in range(int(picture.width * picture.height * amount)):
        x, y = generator.randrange(picture.width), generator.randrange(picture.height)
        noisy.putpixel((x, y), 0 if generator.random() < 0.5 else 255)
    return noisy


def test_a_clean_page_is_not_touched_by_the_noise_cleaning() -> None:
    page = _page_of_text()
    assert speckle(page) < NOISY
    assert despeckled(page) is page


def test_a_noisy_page_loses_its_specks_and_keeps_its_letters() -> None:
    page = _page_of_text()
    noisy = _salt_and_pepper(page, 0.01)
    assert speckle(noisy) > NOISY
    cleaned = np.asarray(despeckled(noisy)) < 128
    letters = np.asarray(page) < 128
    # Every speck away from the letters is gone; the letters' pixels (dots and full stops
    # among them) are kept, but for a few the whitening of specks touching them takes.
    assert np.count_nonzero(cleaned & ~letters) < 0.01 * np.count_nonzero(letters)
    assert np.count_nonzero(cleaned & letters) > 0.97 * np.count_nonzero(letters)
