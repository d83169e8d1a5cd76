"""The verdict on a PDF page's text layer: every page of the repository's good PDFs is text
(Arabic, Chinese and two columns included), real text in other scripts is text, and the garbage real
PDFs carry (control characters, private-use glyphs, glyph soup, one glyph for all) is caught."""

from __future__ import annotations

import pypdfium2 as pdfium
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.documents.pdf import init_forms, read_page
from app.documents.text_layer import Verdict, text_layer_verdict
from tests.fixture_files import AMAZON_PDF, CORPUS

GOOD_PDFS = sorted(
    path for path in [*CORPUS.glob("*.pdf"), AMAZON_PDF] if "password" not in path.name
)
# imagemagick-images.pdf's pages 4 and 5 are pictures with no text at all.
NO_TEXT = {("imagemagick-images.pdf", 4), ("imagemagick-images.pdf", 5)}


@pytest.mark.parametrize("path", GOOD_PDFS, ids=lambda path: path.name)
def test_no_page_of_a_good_pdf_is_flagged(path: object) -> None:
    with pdfium.PdfDocument(path) as document:  # and its pages
        init_forms(document)
        for number, page in enumerate(document, start=1):
            _, text = read_page(document, page)
            expected = Verdict.NONE if (document_name(path), number) in NO_TEXT else Verdict.TEXT
            assert text_layer_verdict(text.text).verdict is expected, (path, number)


def test_a_chinese_text_pdf_is_among_the_good_ones_and_is_text() -> None:
    """scripts/make_chinese_pdf.py's two pages of Simplified Chinese (tests/fixtures/pdf)."""
    path = CORPUS / "chinese-report.pdf"
    assert path in GOOD_PDFS
    with pdfium.PdfDocument(path) as document:  # and its pages
        texts = [read_page(document, page)[1].text for page in document]
    assert "城市雨水收集试点项目年度报告" in texts[0] and "降雨量（毫米）" in texts[1]
    assert all(text_layer_verdict(text).verdict is Verdict.TEXT for text in texts)


def document_name(path: object) -> str:
    return str(getattr(path, "name", path))


REAL_TEXT = {
    "chinese": "第一章 总则\r\n第一条 为了规范合同行为，保护当事人的合法权益，维护社会经济秩序，"
    "促进社会主义现代化建设，制定本法。\r\n第二条 本法所称合同是平等主体的自然人、法人、"
    "其他组织之间设立、变更、终止民事权利义务关系的协议。",
    "japanese": "PDFファイルのテキストを抽出します。\r\nイーハトーヴォのすきとおった風、"
    "夏でも底に冷たさをもつ青いそら、うつくしい森で飾られたモリーオ市。",
    "arabic": "بسم الله الرحمن الرحيم\r\nهذا نص عربي عادي يحتوي على كلمات كثيرة ومفهومة "
    "للقارئ، وفيه أرقام مثل ٢٠٢٣ و 45 بالمئة.",
    "russian": "Статья 1. Основные начала гражданского законодательства\r\nГражданское "
    "законодательство основывается на признании равенства участников регулируемых им отношений.",
    "contents": "Table of Contents\r\nChapter 1 Introduction . . . . . . . . . . . . . . . 1\r\n"
    "Chapter 2 Methods .................................... 14\r\n"
    "Chapter 3 Results …………………………………… 27",
    "figures": "Revenue 2023 2022 Change\r\n$ 574,785 $ 513,983 11.8 %\r\n"
    "Operating income 36,852 12,248 200.9 %\r\nNet income (loss) 30,425 (2,722) n/m",
    "names": "McDonald's iPhone LaTeX GmbH eBay PowerPoint McKinsey YouTube JavaScript "
    "iOS macOS OpenAI DeepMind LinkedIn WordPress GitHub PayPal",
    "emoji and symbols": "Weather ☀️ 🌧 ❄️ → ✓ done ✗ failed ★★★☆☆ © ® ™ ± ≤ ≥ ∞ ∑ √ π",
}


@pytest.mark.parametrize("name", sorted(REAL_TEXT))
def test_real_text_in_any_script_is_text(name: str) -> None:
    assert text_layer_verdict(REAL_TEXT[name]).verdict is Verdict.TEXT


GARBAGE = {
    # pdf.js's TAMReview.pdf, pages 2-22: a font with no Unicode map gives its glyph codes.
    "control characters": "\x04\x05\x06\x04\x07\x08\t\n\x08\x0b\x0c\x04\x08\r\x04\x0e\x0c"
    "\x0f\t\x10\t\x11\x12\x08\x13\x0e\x0e\x04\x14\x0b\x15\x0f\x0e\x04\x08\x16\t\x17\r\n3",
    "private use": "\uf76f\uf770\uf765\uf76e\uf76d\uf761\uf767\uf761\uf77a\uf769\uf76e "
    "\uf76f\uf770\uf765\uf76e\uf76d\uf761\uf767\uf761\uf77a\uf769\uf76e",
    "replacement characters": "\ufffd" * 14,
    # pdf.js's ThuluthFeatures.pdf: letters of many scripts jumbled inside each word.
    "glyph soup": "¢һӍΉʽী¢Ǌ\u0a52ඥഀဍ\u0cc5Ϣiͳ\r\n¢һӍΉʽী¢ರ͟ȥ܅,\r\nRହຏഀƹΉటҧ¢ȥǂ࣎ʤ̦˵ƹϕŊ"
    "\u0af3һαฝ\u0cd7ϕࢼஎ̼ഗੜ̿ɢ\u0e60ࠨźȥ¢ˮʷ\u0cfc්͟ǬȈȥౖ͵¢˖̮̓ဍΰചʽ, \nԵ'˸ߓ˺'ࠌ'ۉĪ'ۈī'ۉī'ࠒ\r\n"
    "ȥࠨ˖¨ಮӆ˨ΗƹΉటӇ¢ȥǂ࣎ϞƘ ѓȐæǧȥ౾̼ϥ˖ำ¢͟ک¢ʷ\u0cfcϕࣦਯ\r\nSиʽ͟ю¢ȥǂ࣎ʤ̦˵ƹϕŊఓ̼ဍರŊҧȥҧ"
    "\u0a58ඟഀ྅ʱҧผʵ-۴̼Ƃ;ʣ̮и͟ਯэ\u0eeb\u0a50¢ਯငʻȥ¢˖Ή࣎ूʒ̫ဍ,\nϳĄƏɴt٫ηϦ Ԡϳƌ\r\nTହຏഀƹΉటҧ¢һƂǂ"
    "ʤ̦˵ƹϕŊ\u05ceਫ਼̼ൄһ\u0cd7̼ဍഝɣʵ̮̓ဍல˭̼ఓ̼ဍರŊҧ\u0cdaή¢ຌ˖ਫ਼̼ൄһŊ¢ʮ\u0eebȥ¢໙ʷूʒ̫ဍ,\nˁt֙ϙϭʵ çϣƐϋ",
    "jumbled scripts": "⤶اِ㩈 19\r\nٱĴǎƶơǎƹŎķຊا࠘᧽䋔ٱ˄Ⱊاور ǎƼǎƹƃơŃ او䆀ឮᑽٱĴ ǎƶơǎƹŎķຊا "
    "ٱĴǎƶơ ǎƹŎķຊ ا࠘᧽䋔 ٱ˄Ⱊاور ǎƼǎ ƹƃơŃ اوĴ ǎƶơǎƹŎ ķຊا࠘ ᧽䋔ٱ˄Ⱊ اورǎƼ ǎƹƃơŃا",
    "one glyph for all": "ÿÿÿÿÿÿÿÿÿÿ" * 10,
    "punctuation": "?@''/ ?/&'3 ?&'@ ;#%$ !!** ()[] {}<> ;;:: ,,.. ''\"\" ##$$ %%^^ &&** @@!!",
}


@pytest.mark.parametrize("name", sorted(GARBAGE))
def test_unreadable_layers_are_garbage(name: str) -> None:
    verdict = text_layer_verdict(GARBAGE[name])
    assert verdict.verdict is Verdict.GARBAGE and verdict.reason


def test_no_text_or_a_label_on_a_scan_is_none() -> None:
    assert text_layer_verdict("").verdict is Verdict.NONE
    assert text_layer_verdict(" \r\n \t").verdict is Verdict.NONE
    assert text_layer_verdict("Scan 0042", covered_by_image=True).verdict is Verdict.NONE
    assert text_layer_verdict("Page 3").verdict is Verdict.TEXT  # little text, but text


@given(st.text(alphabet=st.characters(categories=["L", "N", "Zs"]), min_size=1, max_size=300))
def test_the_verdict_is_a_function_of_the_text(text: str) -> None:
    assert text_layer_verdict(text) == text_layer_verdict(text)
    assert text_layer_verdict(text).verdict is not Verdict.NONE or not text.strip()
