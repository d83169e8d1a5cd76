"""The pure parts of reading a page by OCR: languages, and Tesseract's words made into page
text with boxes in fractions of the page as displayed (turned back when the page was turned)."""

from __future__ import annotations

import pytest

from app.documents.ocr import _page, languages_for, parse_languages

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
