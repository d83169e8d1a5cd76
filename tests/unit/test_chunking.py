"""Sentence chunks tile their text exactly, whatever the text, and end where sentences end."""

from __future__ import annotations

import ctypes
import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.documents import chunking
from app.documents.chunking import split_sentences


def sentences(text: str) -> list[str]:
    return [text[start:end] for start, end in split_sentences(text)]


def assert_tiles(text: str, spans: list[tuple[int, int]]) -> None:
    if not text:
        assert spans == []
        return
    assert spans[0][0] == 0
    assert spans[-1][1] == len(text)
    assert all(start < end for start, end in spans)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    assert "".join(text[start:end] for start, end in spans) == text
    # Whitespace stays with the sentence before it: no chunk but the first starts with any, and
    # none is only whitespace, unless the text is.
    assert not any(text[start].isspace() for start, _ in spans[1:])
    assert text.isspace() or not any(text[start:end].isspace() for start, end in spans)


# --- examples ----------------------------------------------------------------------------------


def test_the_messages_api_example_keeps_the_space_with_the_first_sentence() -> None:
    assert split_sentences("The grass is green. The sky is blue.") == [(0, 20), (20, 36)]


def test_empty_text_has_no_chunk() -> None:
    assert split_sentences("") == []


@pytest.mark.parametrize("text", [" ", "   ", "\n", "\r\n\t \u3000", "\xa0\u200b"])
def test_blank_text_is_one_chunk(text: str) -> None:
    assert split_sentences(text) == [(0, len(text))]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # whitespace: leading goes to the first sentence, trailing to the sentence before it
        ("  Leading. Next.  ", ["  Leading. ", "Next.  "]),
        ("Ein Satz.\xa0Zwei Sätze.", ["Ein Satz.\xa0", "Zwei Sätze."]),
        # line breaks inside a sentence, LF and CRLF
        ("Next line\nwraps here.", ["Next line\nwraps here."]),
        ("First one.\nNext line\nwraps here.", ["First one.\n", "Next line\nwraps here."]),
        (
            "Next line\r\nwraps here.\r\nSecond line.\r\n",
            ["Next line\r\nwraps here.\r\n", "Second line.\r\n"],
        ),
        ("He left.\n\nShe stayed.", ["He left.\n\n", "She stayed."]),
        # abbreviations
        (
            "Dr. Smith met Mr. Jones at 5 p.m. today. They talked.",
            ["Dr. Smith met Mr. Jones at 5 p.m. today. ", "They talked."],
        ),
        (
            "The U.S. Army is big. The U.K. is small.",
            ["The U.S. Army is big. ", "The U.K. is small."],
        ),
        (
            "Bring tools, e.g. hammers, i.e. heavy ones. Then rest.",
            ["Bring tools, e.g. hammers, i.e. heavy ones. ", "Then rest."],
        ),
        (
            "Apples, pears etc. are fruit. We eat them.",
            ["Apples, pears etc. are fruit. ", "We eat them."],
        ),
        (
            "See Fig. 3 for details. It shows the data.",
            ["See Fig. 3 for details. ", "It shows the data."],
        ),
        # decimals and amounts
        (
            "It costs $3.50 today. Pi is about 3.14 or so.",
            ["It costs $3.50 today. ", "Pi is about 3.14 or so."],
        ),
        # quotations
        ('"Is that so?" she asked.', ['"Is that so?" she asked.']),
        ('"Stop!" he yelled. Then he left.', ['"Stop!" he yelled. ', "Then he left."]),
        ("He said “Hi.” Then left.", ["He said “Hi.” ", "Then left."]),
        ('He said "Go." "No," she said.', ['He said "Go." ', '"No," she said.']),
        ("“Stop!” “Why?”", ["“Stop!” ", "“Why?”"]),
        ("(One here.) (Two here.)", ["(One here.) ", "(Two here.)"]),
        ("Wait... What? Yes!", ["Wait... ", "What? ", "Yes!"]),
        # German
        (
            "Das ist z.B. ein Haus. Wir gehen jetzt.",
            ["Das ist z.B. ein Haus. ", "Wir gehen jetzt."],
        ),
        (
            "Prof. Dr. Müller kam am 3. Oktober. Er lebte im 19. Jahrhundert. Über uns.",
            ["Prof. Dr. Müller kam am 3. Oktober. ", "Er lebte im 19. Jahrhundert. ", "Über uns."],
        ),
        # Spanish and French
        ("Das ist gut. ¿Qué tal? Bien.", ["Das ist gut. ", "¿Qué tal? ", "Bien."]),
        ("Es ist z.B. gut. ¿Qué tal?", ["Es ist z.B. gut. ", "¿Qué tal?"]),
        ("“Hola.” ¡Vamos!", ["“Hola.” ", "¡Vamos!"]),
        (
            "Llegó tarde. Él dijo algo. À bientôt!",
            ["Llegó tarde. ", "Él dijo algo. ", "À bientôt!"],
        ),
        ("Vino el Dr. Álvaro García. Él no.", ["Vino el Dr. Álvaro García. ", "Él no."]),
        # Russian
        ("Т.е. это так. Он ушёл.", ["Т.е. это так. ", "Он ушёл."]),
        ("Д-р Иванов пришёл. Он устал.", ["Д-р Иванов пришёл. ", "Он устал."]),
        ("Мы пришли, т.е. опоздали. Ты тоже.", ["Мы пришли, т.е. опоздали. ", "Ты тоже."]),
        # CJK full stops, with and without a space after them
        ("本当？はい！そうです。", ["本当？", "はい！", "そうです。"]),
        ("这是第一句。 这是第二句。", ["这是第一句。 ", "这是第二句。"]),
        ("Okay.\u3000次の文。", ["Okay.\u3000", "次の文。"]),
        # numbered lists start a chunk at their number
        ("1. Feed the cat.\n2. Walk the dog.\n", ["1. Feed the cat.\n", "2. Walk the dog.\n"]),
        ("1. First item\n  2. Second item", ["1. First item\n  ", "2. Second item"]),
    ],
)
def test_sentences(text: str, expected: list[str]) -> None:
    assert sentences(text) == expected


def test_cjk_full_stops_split_without_a_space() -> None:
    assert split_sentences("今日は晴れです。明日は雨です。") == [(0, 8), (8, 15)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # an ideographic full stop ends a sentence whatever follows it: Latin in lowercase, digits
        (
            "我们很开心。iPhone很好用。2024年很好。",
            ["我们很开心。", "iPhone很好用。", "2024年很好。"],
        ),
        ("本当？iPhoneです！ok了。", ["本当？", "iPhoneです！", "ok了。"]),
        ("我们很开心。 iPhone很好用。", ["我们很开心。 ", "iPhone很好用。"]),
        # ... and the closing brackets and quotes after it go with it
        ("他说：「好。」然后走了。", ["他说：「好。」", "然后走了。"]),
        ("他说：“好！”然后走了。", ["他说：“好！”", "然后走了。"]),
        ("『はい。』（そうです。）次。", ["『はい。』", "（そうです。）", "次。"]),
        # but a straight quote after it opens the next sentence
        ('今日は晴れです。"Yes," he said.', ["今日は晴れです。", '"Yes," he said.']),
    ],
)
def test_ideographic_full_stops_end_a_sentence(text: str, expected: list[str]) -> None:
    assert sentences(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Sales rose. 2024 was good.", ["Sales rose. ", "2024 was good."]),
        ("Really? 5 people came! 10 left.", ["Really? ", "5 people came! ", "10 left."]),
        ('It fell. "2024 was bad," he said.', ["It fell. ", '"2024 was bad," he said.']),
        ("Die Zahl stieg. 2024 war gut.", ["Die Zahl stieg. ", "2024 war gut."]),
        ("Он ушёл. 2024 год был хорошим.", ["Он ушёл. ", "2024 год был хорошим."]),
        # a number after an abbreviation, an initial or another number goes on the sentence
        ("See Fig. 3 and vol. 2 for details.", ["See Fig. 3 and vol. 2 for details."]),
        ("Max. 5 Personen, inkl. 2 Kinder, ab Jan. 2024 hier.", None),
        ("Smith et al. 2019 showed it.", None),
        ("At 5 p.m. 3 people left.", None),
        ("The total was 3. 4 more came.", None),
        ("It rose by 3 pct. 2024 was better.", None),
    ],
)
def test_a_sentence_may_start_with_a_number(text: str, expected: list[str] | None) -> None:
    assert sentences(text) == (expected or [text])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Heading\n\nBody text. More.", ["Heading\n\n", "Body text. ", "More."]),
        ("Heading\r\n\r\nBody text.", ["Heading\r\n\r\n", "Body text."]),
        ("Heading\r\rBody text.", ["Heading\r\r", "Body text."]),
        ("Heading \n \t\n\nBody text.", ["Heading \n \t\n\n", "Body text."]),
        ("1 Introduction\n\nWe show it.", ["1 Introduction\n\n", "We show it."]),
        ("Title:\n\nbody in lowercase.", ["Title:\n\n", "body in lowercase."]),
        # blank lines at the start are the first sentence's; one line break ends no heading
        ("\n\nHeading\n\nBody.", ["\n\nHeading\n\n", "Body."]),
        ("Heading\nBody text.", ["Heading\nBody text."]),
        ("Heading\r\nBody text.", ["Heading\r\nBody text."]),
        ("Heading\n\n\n", ["Heading\n\n\n"]),
    ],
)
def test_a_blank_line_ends_a_heading(text: str, expected: list[str]) -> None:
    assert sentences(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Das ist z.B. gut. Ja.", ["Das ist z.B. gut. ", "Ja."]),
        ("Er kam d.h. spät. Dann ging er.", ["Er kam d.h. spät. ", "Dann ging er."]),
        ("Er sagte z. B. nein. Dann ging er.", ["Er sagte z. B. nein. ", "Dann ging er."]),
        ("Es ist u.a.m. schön. Wir gehen.", ["Es ist u.a.m. schön. ", "Wir gehen."]),
        # an abbreviation after it, a capital or a second word: no new sentence, or blingfire's
        ("Das ist z.B. bzw. Häuser.", ["Das ist z.B. bzw. Häuser."]),
        ("Das ist z.B. gut. und schön.", ["Das ist z.B. gut. und schön."]),
        ("Das ist z.B. sehr gut. Ja.", ["Das ist z.B. sehr gut. ", "Ja."]),
        ("Das Haus.B. gut. Ja.", None),
    ],
)
def test_a_word_after_a_dotted_abbreviation_may_end_a_sentence(
    text: str, expected: list[str] | None
) -> None:
    assert sentences(text) == (expected or [text])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # offsets count code points, also outside the BMP
        ("Emoji 😀 here. Next 😀 one.", [(0, 14), (14, 25)]),
        ("😀😀. Ab 😀.", [(0, 4), (4, 9)]),
        # what PDFium puts in page text: U+0002 or U+FFFE at a hyphenated line break
        ("The experi\x02\r\nment worked. Then we left.", [(0, 26), (26, 39)]),
        ("The experi\ufffe\r\nment worked. Then we left.", [(0, 26), (26, 39)]),
        ("a\x00b. Cd.", [(0, 5), (5, 8)]),
        # blanks that blingfire does not count as blank
        ("Hi there.\u2028\u2028Next one.", [(0, 11), (11, 20)]),
        ("Hi there. \x85Next one.", [(0, 11), (11, 20)]),
        ("\x02. Ab.", [(0, 3), (3, 6)]),
        # lone surrogates cannot be UTF-8 encoded
        ("a\ud800b. Cd.", [(0, 5), (5, 8)]),
        ("\udcff", [(0, 1)]),
        # a byte order mark: blingfire skips one at the start, and refuses a text of only that
        ("\ufeffHello. World.", [(0, 8), (8, 14)]),
        ("\ufeff", [(0, 1)]),
    ],
)
def test_odd_characters_keep_offsets_exact(text: str, expected: list[tuple[int, int]]) -> None:
    assert split_sentences(text) == expected


# --- blingfire is checked, not trusted ---------------------------------------------------------


def test_falls_back_to_punctuation_when_blingfire_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunking, "_TEXT_TO_SENTENCES", lambda *args: -1)
    text = "One here. “Two?”  three!\nFour.今日は。明日"
    assert sentences(text) == ["One here. ", "“Two?”  three!\n", "Four.今日は。", "明日"]


def _claiming(*starts: int) -> Any:
    """A stand-in for blingfire that reports sentences at the given byte offsets."""

    def fake(data: bytes, size: int, out: Any, first: Any, last: None, cap: int) -> int:
        text = b"\n".join(b"s" for _ in starts) + b"\0"
        ctypes.memmove(out, text, len(text))
        for index, start in enumerate(starts):
            first[index] = start
        return len(text)

    return fake


@pytest.mark.parametrize(
    "starts",
    [
        (0, 1),  # the middle of "é"
        (0, 5, 5),  # a sentence that starts where the previous one starts
        (0, 6, 5),  # going backwards
        (0, 99),  # past the end
        (0, -1),
    ],
)
def test_offsets_that_do_not_check_out_are_not_used(
    monkeypatch: pytest.MonkeyPatch, starts: tuple[int, ...]
) -> None:
    monkeypatch.setattr(chunking, "_TEXT_TO_SENTENCES", _claiming(*starts))
    assert sentences("éa. Bb. Cc.") == ["éa. ", "Bb. ", "Cc."]


def test_checked_offsets_are_mapped_from_bytes_to_code_points(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # bytes: é=0-1 A=2 😀=3-6 space=7 B=8 b=9 space=10 C=11
    monkeypatch.setattr(chunking, "_TEXT_TO_SENTENCES", _claiming(0, 2, 8, 11))
    assert split_sentences("éA😀 Bb Cc") == [(0, 1), (1, 4), (4, 7), (7, 9)]


# --- properties --------------------------------------------------------------------------------

ODD = ["\x00", "\x02", "\x7f", "\x85", "\ufffe", "\uffff", "\ufeff", "\u200b", "\u2028", "\ud800"]
ODD += ["\udfff", "😀", "\U0010ffff", "\u0301", "\xa0", "\u3000", "\t", "\x0b", "\x0c"]
WORDS = ["the", "Grass", "is", "green", "Dr.", "Mr.", "e.g.", "i.e.", "U.S.", "z.B.", "etc."]
WORDS += ["$3.50", "3.14", "Él", "über", "Это", "т.е.", "今日は", "晴れです", "1.", "2)"]
WORDS += ["2024", "5", "iPhone", "d. h.", "vol.", "Heading", "gut"]
MARKS = [".", "!", "?", "...", "。", "！", "？", "¿", "¡", '"', "“", "”", "«", "»", "(", ")", ","]
MARKS += ["」", "『", "』", "（", "）", "。」", "？”"]
SPACES = [" ", "  ", "\n", "\r\n", "\r", "\n\n", " \r\n", "\t", "\r\n\r\n", "\r\r", "\n \n"]

messy_text = st.lists(
    st.one_of(
        st.sampled_from(WORDS),
        st.sampled_from(MARKS),
        st.sampled_from(SPACES),
        st.sampled_from(ODD),
    ),
    max_size=40,
).map("".join)


@settings(max_examples=300)
@given(st.text())
def test_any_text_is_tiled(text: str) -> None:
    assert_tiles(text, split_sentences(text))


@settings(max_examples=300)
@given(messy_text)
def test_sentence_like_text_is_tiled(text: str) -> None:
    assert_tiles(text, split_sentences(text))


# Sentences that are unambiguous: a capitalised first word, words that are no abbreviation before
# the final mark (blingfire keeps "z.B. gut. Wir" together: a short word after an abbreviation
# may itself be one), a full stop, question or exclamation mark.
FIRST = ["The", "Every", "Our", "Yesterday", "Anna", "Über", "Él", "École", "Ñandú", "2024", "5"]
MIDDLE = ["grass", "river", "is", "a", "of", "and", "niño", "café", "straße", "😀", "😀😀"]
MIDDLE += ["Dr. Smith", "Mr. Jones", "e.g. apples", "i.e. pears", "$3.50", "3.14", "the U.S. Army"]
MIDDLE += ["z.B. Häuser", "experi\x02ment", "x\ufffey", "a\x00b", "q\udc00r"]
LAST = ["garden", "window", "yellow", "morning", "people", "slowly", "bright", "quiet", "niños"]
WORD_GAPS = [" ", " ", "  ", "\n", "\r\n"]
SENTENCE_GAPS = [" ", "  ", "\n", "\r\n", " \n", "\n\n", "\t"]
QUOTES = [("", ""), ('"', '"'), ("“", "”"), ("«", "»"), ("(", ")")]


@st.composite
def latin_sentence(draw: st.DrawFn) -> str:
    words = [draw(st.sampled_from(FIRST))]
    words += draw(st.lists(st.sampled_from(MIDDLE), min_size=1, max_size=6))
    words.append(draw(st.sampled_from(LAST)))
    body = words[0] + "".join(draw(st.sampled_from(WORD_GAPS)) + word for word in words[1:])
    opening, closing = draw(st.sampled_from(QUOTES))
    mark = draw(st.sampled_from([".", "!", "?"]))
    if draw(st.booleans()) and mark != ".":
        opening, closing = "¿" if mark == "?" else "¡", ""  # Spanish
    return opening + body + mark + closing + draw(st.sampled_from(SENTENCE_GAPS))


@st.composite
def russian_sentence(draw: st.DrawFn) -> str:
    words = [draw(st.sampled_from(["Это", "Мы", "Сегодня"]))]
    words += draw(st.lists(st.sampled_from(["дом", "река", "тихо", "т.е. сад"]), max_size=4))
    words.append(draw(st.sampled_from(["большой", "дорога", "солнце"])))
    return " ".join(words) + draw(st.sampled_from([".", "!", "?"])) + draw(st.sampled_from(" \n"))


@st.composite
def cjk_sentence(draw: st.DrawFn) -> str:
    body = draw(
        st.sampled_from(["今日は晴れです", "明日は雨です", "这是第一句", "我们走了", "2024年很好"])
    )
    closing = draw(st.sampled_from(["", "", "」", "）", "”"]))
    return body + draw(st.sampled_from("。！？")) + closing + draw(st.sampled_from(["", "", " "]))


@st.composite
def heading(draw: st.DrawFn) -> str:
    words = [draw(st.sampled_from([*FIRST, "1", "2.3"]))]
    words += draw(st.lists(st.sampled_from([*FIRST, *LAST, "and", "of"]), max_size=4))
    return " ".join(words) + draw(st.sampled_from(["\n\n", "\r\n\r\n", "\n \n", "\n\n\n"]))


@settings(max_examples=200)
@given(
    st.lists(
        st.one_of(latin_sentence(), russian_sentence(), cjk_sentence(), heading()),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from(["", " ", "\n"]),
)
def test_each_clear_sentence_is_one_chunk(parts: list[str], lead: str) -> None:
    parts[0] = lead + parts[0]
    text = "".join(parts)
    assert sentences(text) == parts


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                ["我们很开心", "iPhone很好用", "2024年很好", "ok了", "本当", "「はい", "x"]
            ),
            st.sampled_from(["。", "！", "？", "。」", "！”", "。）", "。。"]),
            st.sampled_from(["", "", " ", "\n"]),
        ).map("".join),
        min_size=1,
        max_size=8,
    )
)
def test_each_ideographic_sentence_is_one_chunk_whatever_starts_the_next(parts: list[str]) -> None:
    assert sentences("".join(parts)) == parts
