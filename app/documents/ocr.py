"""Reading a PDF page by OCR: PDFium renders it, Tesseract (through pytesseract) reads it.

Each page is one task for a pool of worker processes (``OcrPool``), never the event loop's
process: Tesseract takes seconds a page, and PDFium does one call at a time in a process. A
worker opens the PDF from a file the caller wrote (not bytes sent with every task), renders the
page as displayed, whitens salt-and-pepper specks when the page has many (a clean page is left
as it is), and reads it as it is in the languages of the page before it. When Tesseract is
unsure of those words, it asks Tesseract's orientation and script detection (OSD) how the page
is turned and which script it is in, turns it upright, and reads it with the configured
languages of that script (``read_picture``). Its words keep their boxes, mapped back to
fractions of the page as displayed (the same fractions as PDFium's character boxes), and their
confidences.

This module imports nothing of the service, so a worker process starts light.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import dataclasses
import logging
import multiprocessing
import os
import re
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from typing import TYPE_CHECKING

import pypdfium2 as pdfium

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import numpy as np
    import numpy.typing as npt
    from PIL import Image

# pytesseract (and Pillow, which it imports) are imported where a page is read, in the workers:
# the service's own process never needs them (see LAZY_LIBRARIES).

log = logging.getLogger(__name__)

DPI = 300
# OSD needs far fewer pixels than reading does: a half-size picture is read faster, as well.
_OSD_REDUCE = 2
# OSD's confidence in the script below which it is asked again on the whole picture, and below
# which (again) the script is not believed: a clean 150 dpi scan of a LaTeX page halved is
# "Cyrillic" at 0.14, and read in Russian alone it is lost (CER 80 %).
_SCRIPT_CONFIDENCE = 1.0
# Salt-and-pepper noise: a dark speck is a dark pixel whose 5x5 square holds every dark pixel
# of its 9x9 one (nothing dark around it: not a part of a letter). Clean pages at 150 and 300
# dpi have at most 0.07 % of their pixels in specks (full stops, dots, rules' ends), a scan
# with 1 % salt-and-pepper noise 0.3 %: above NOISY, the specks are whitened (with the grey
# fringe JPEG gives them) before OSD and reading. A clean page is never touched.
_DARK = 128
_FRINGE_DARK = 200
NOISY = 0.0015
_STRIP = 256  # rows at a time: the masks of a strip, not of a page, are in memory
# Tesseract's language codes by the script its OSD names: a page is read with the configured
# languages of its script (all configured ones when none is, or the script is unknown).
_SCRIPT_LANGUAGES = {
    "Latin": set(
        "eng deu fra spa ita por nld pol ces slk swe dan nor fin hun ron tur cat hrv slv lit "
        "lav est vie ind msa lat gle".split()
    ),
    "Cyrillic": {"rus", "ukr", "bel", "bul", "srp", "mkd", "kaz"},
    "Arabic": {"ara", "fas", "urd", "pus"},
    "Han": {"chi_sim", "chi_tra", "jpn", "kor"},
    "Japanese": {"jpn"},
    "Katakana": {"jpn"},
    "Hiragana": {"jpn"},
    "Hangul": {"kor"},
    "Greek": {"ell", "grc"},
    "Hebrew": {"heb"},
    "Devanagari": {"hin", "mar", "nep", "san"},
    "Thai": {"tha"},
}
_LANGUAGE_CODE = re.compile(r"^[a-z]{3}(_[a-z]{3,4})?$")


class OcrError(Exception):
    """A page could not be read: Tesseract is missing, or failed on it."""


@dataclass(frozen=True, slots=True)
class OcrPage:
    """A page read by OCR: its text (words joined by spaces, lines by ``\\n``, paragraphs by a
    blank line), each word's place in that text and its box (fractions of the page as
    displayed, origin top left), Tesseract's mean word confidence (0 to 1), how far the page
    was turned (degrees clockwise that made it upright), the languages it was read with, and
    how many times Tesseract ran for it (readings and OSD)."""

    number: int
    text: str
    words: tuple[tuple[int, int, float, float, float, float], ...]
    confidence: float | None
    rotation: int
    languages: str
    runs: int = 0


def parse_languages(value: str) -> list[str]:
    """Tesseract's ``eng+deu+fra`` as a list; ValueError on anything else."""
    languages = [code.strip() for code in value.split("+")]
    if not languages or not all(_LANGUAGE_CODE.match(code) for code in languages):
        raise ValueError(f"not Tesseract languages joined by '+': {value!r}")
    return languages


def languages_for(script: str | None, configured: list[str]) -> list[str]:
    """The configured languages of ``script``, or all configured ones."""
    of_script = _SCRIPT_LANGUAGES.get(script or "", set())
    chosen = [code for code in configured if code in of_script]
    return chosen or configured


# Common words of the Latin-script languages a page is told apart in: a page is read in one
# language first (English when configured), and again with another when its words say so.
_COMMON_WORDS = {
    code: frozenset(words.split())
    for code, words in {
        "eng": "the and of to is that with for this are was be by from which not have has were",
        "deu": "der die das und ist nicht mit von den dem ein eine sich auf für wird werden auch",
        "fra": "le les et est des une du dans pour que qui sur pas au avec ce sont",
        "spa": "el los las del que por una para con es se su como más pero al",
        "ita": "il di che della per una con non sono gli del le nel alla è",
        "por": "os das dos que uma para com não são do da em ao pelo é",
    }.items()
}
_WORD = re.compile(r"[^\W\d_]+")
# A language is told from the first reading's words only when at least this many of its common
# words are in it (and more than of the language read first).
_TOLD = 3


def first_language(candidates: list[str]) -> str | None:
    """The language to read a page in first, when the page's language can be told from the
    words read (every candidate has common words here and there are several); else None: the
    page is read with all candidates at once."""
    if len(candidates) < 2 or not all(code in _COMMON_WORDS for code in candidates):
        return None
    return "eng" if "eng" in candidates else candidates[0]


def told_language(text: str, candidates: list[str], first: str) -> str | None:
    """The candidate whose common words ``text`` (read in ``first``) holds most, when that is
    not ``first`` and its words are clearly there; else None."""
    words = set(_WORD.findall(text.lower()))
    counts = {code: len(_COMMON_WORDS[code] & words) for code in candidates}
    best = max(candidates, key=lambda code: counts[code])
    if best == first or counts[best] < _TOLD or counts[best] <= counts[first]:
        return None
    return best


def render(path: str, number: int, dpi: int = DPI) -> Image.Image:
    """Page ``number`` (1-based) of the PDF at ``path`` as displayed, greyscale, at ``dpi``.

    The PDF is opened for the page and closed after it: PDFium keeps what it read of a
    document's pages (their images' data) until the document is closed, so a worker that kept
    a long scan open grew page by page, while opening one costs little (docs/PERFORMANCE.md,
    "The OCR job's memory")."""
    with pdfium.PdfDocument(path) as document:
        page = document[number - 1]
        try:
            bitmap = page.render(scale=dpi / 72, grayscale=True, may_draw_forms=False)
            try:
                picture: Image.Image = bitmap.to_pil().convert("L")
            finally:
                bitmap.close()
        finally:
            page.close()
    return picture


def read_page(
    path: str, number: int, languages: str, hint: str | None = None, dpi: int = DPI
) -> OcrPage:
    """Read page ``number`` of the PDF at ``path`` (in a worker process); ``hint``: the
    languages the page before it was read in (see ``read_picture``)."""
    picture = render(path, number, dpi)
    give_back_freed_memory()
    return read_picture(
        picture, number, parse_languages(languages), dpi, parse_languages(hint) if hint else None
    )


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS)."""
    try:
        trim: Callable[[int], int] = ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    return trim


_MALLOC_TRIM = _malloc_trim()


def give_back_freed_memory() -> None:
    """Return to the system what the process freed: glibc keeps the memory of a page's render
    (PDFium decoding the scan's picture) for reuse, so a worker stayed at its render's peak all
    the while Tesseract, a process of its own, read the page (docs/PERFORMANCE.md)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def read_picture(
    picture: Image.Image,
    number: int,
    configured: list[str],
    dpi: int = DPI,
    hint: list[str] | None = None,
) -> OcrPage:
    """Read a page's picture (``dpi`` dots an inch), cleaned of salt-and-pepper noise when it
    has some.

    A page is first read as it is, without OSD, in the languages of the page before it
    (``hint``: a document is mostly in one language), or in English (or the first configured
    Latin language) when there is no page before. When Tesseract is sure of what it read, the
    page was upright and of the Latin script: OSD, a good part of a page's time, is not
    asked (docs/PERFORMANCE.md). Otherwise, or when the page before was of another script, OSD says
    how the page is turned and its script, and the page is read upright in that script's
    languages: a Latin page in English alone first. Either way, a Latin page whose words are
    those of another configured language is read again with it. Tesseract is told the
    resolution: a picture carries none, and Tesseract's guess from the text's height reads
    small print worse."""
    before = _tesseract_runs
    page = _read_picture(picture, number, configured, dpi, hint)
    return dataclasses.replace(page, runs=_tesseract_runs - before)


def _read_picture(
    picture: Image.Image,
    number: int,
    configured: list[str],
    dpi: int,
    hint: list[str] | None,
) -> OcrPage:
    cleaned = despeckled(picture)
    whole = cleaned is not picture
    del picture  # the page as rendered goes as soon as it is not the one read
    latin = [code for code in configured if code in _SCRIPT_LANGUAGES["Latin"]]
    guess = _guess(latin, hint)
    tried = None
    if guess is not None:
        tried = _recognised(cleaned, number, guess, 0, dpi)
        if _sure(tried):
            return _in_its_language(cleaned, tried, latin, 0, dpi)
    # OSD on a cleaned scan's half-size picture is unsure and wrong (a LaTeX page at 150 dpi
    # "Cyrillic" at confidence 3.3): such a page is shown to OSD whole.
    rotation, script = _orientation(cleaned, dpi, whole=whole)
    upright = cleaned.rotate(-rotation, expand=True) if rotation else cleaned
    del cleaned
    candidates = languages_for(script, configured)
    # Each language more makes Tesseract slower and larger (docs/PERFORMANCE.md): a page of a
    # script with several is read in one first, and again with the language its words are in
    # when that is another.
    first = first_language(candidates)
    # The first reading stands when OSD finds the page upright and read in its languages.
    as_read = tried if rotation == 0 else None
    if first is None:
        if as_read is not None and as_read.languages == "+".join(candidates):
            return as_read
        return _recognised(upright, number, candidates, rotation, dpi)
    if as_read is not None and set(as_read.languages.split("+")) <= set(candidates):
        page = as_read
    else:
        page = _recognised(upright, number, [first], rotation, dpi)
    return _in_its_language(upright, page, candidates, rotation, dpi)


def hint_after(page: OcrPage, hint: str | None) -> str | None:
    """The languages to read the next page of a document in first: this page's, when it had
    words enough to tell (a blank page's, read with every language, would send the next page
    to OSD); else the hint this page had. An English page of a German document keeps
    ``deu+eng``: it was read with English as well."""
    return page.languages if len(page.words) >= _SURE_WORDS else hint


# A page read without OSD is taken as upright and of the Latin script when Tesseract's mean
# confidence in its words is at least this, over at least _SURE_WORDS words: the bench's upright
# pages read far above it, the same pages turned 90 or 180 degrees far below (docs/PERFORMANCE.md).
_SURE_CONFIDENCE = 0.6
_SURE_WORDS = 10


def _guess(latin: list[str], hint: list[str] | None) -> list[str] | None:
    """The languages to read a page in before asking OSD: those of the page before when they
    are all configured Latin languages, English (or the first Latin language) when there was
    no page before; None (OSD first) when the page before was of another script, or no Latin
    language is configured."""
    if hint:
        return hint if all(code in latin for code in hint) else None
    if not latin:
        return None
    first = first_language(latin)
    return latin if first is None else [first]


def _sure(page: OcrPage) -> bool:
    return (
        page.confidence is not None
        and page.confidence >= _SURE_CONFIDENCE
        and len(page.words) >= _SURE_WORDS
    )


def _in_its_language(
    upright: Image.Image, page: OcrPage, candidates: list[str], rotation: int, dpi: int
) -> OcrPage:
    """``page`` read again with the candidate language its words are in, when that is not
    one it was read in; else ``page``."""
    first = first_language(candidates)
    if first is None:
        return page
    read_in = page.languages.split("+")
    told = told_language(page.text, candidates, read_in[0])
    if told is None or told in read_in:
        return page
    return _recognised(upright, page.number, [told, first], rotation, dpi)


# Tesseract's runs in this process (readings and OSD), counted for OcrPage.runs: a worker
# reads one page at a time.
_tesseract_runs = 0


def _recognised(
    upright: Image.Image, number: int, languages: list[str], rotation: int, dpi: int
) -> OcrPage:
    """The upright picture read by Tesseract in ``languages`` (the first one foremost)."""
    import pytesseract

    global _tesseract_runs
    _tesseract_runs += 1
    lang = "+".join(languages)
    try:
        with _picture_file(upright) as path:
            data = pytesseract.image_to_data(
                path,
                lang=lang,
                config=f"--psm 3 --dpi {dpi} -c tessedit_do_invert=0",
                output_type=pytesseract.Output.DICT,
            )
    except pytesseract.TesseractNotFoundError as exc:
        raise OcrError("Tesseract is not installed (apt-get install tesseract-ocr).") from exc
    except pytesseract.TesseractError as exc:
        raise OcrError(f"Tesseract failed on page {number}: {exc.message}") from exc
    return _page(number, data, upright.size, rotation, lang)


@contextmanager
def _picture_file(picture: Image.Image) -> Iterator[str]:
    """The picture as an uncompressed PGM file, for Tesseract to read: given a picture,
    pytesseract writes a PNG for each call, and compressing it cost more than a PGM's
    writing and reading (docs/PERFORMANCE.md)."""
    with tempfile.NamedTemporaryFile(prefix="citegate-ocr-", suffix=".pgm") as file:
        picture.save(file, format="PPM")
        file.flush()
        yield file.name


def _orientation(picture: Image.Image, dpi: int, *, whole: bool = False) -> tuple[int, str | None]:
    """Degrees clockwise that turn the page upright, and its script; (0, None) when OSD finds
    too little text to tell. OSD sees the picture at half size unless ``whole``, and whole
    when it is unsure of the script at half size; the script is None when OSD is unsure of it
    even then."""
    osd = _osd(picture, dpi) if whole else _osd(picture.reduce(_OSD_REDUCE), dpi // _OSD_REDUCE)
    if not whole and osd is not None and _number(osd.get("script_conf", 0)) < _SCRIPT_CONFIDENCE:
        osd = _osd(picture, dpi) or osd
    if osd is None:
        return 0, None  # "Too few characters": nothing to turn
    rotate = int(_number(osd.get("rotate", 0))) % 360
    sure = _number(osd.get("script_conf", 0)) >= _SCRIPT_CONFIDENCE
    return (rotate if rotate in (90, 180, 270) else 0), str(osd["script"]) if sure else None


def _osd(picture: Image.Image, dpi: int) -> dict[str, object] | None:
    import pytesseract

    global _tesseract_runs
    _tesseract_runs += 1
    try:
        with _picture_file(picture) as path:
            osd: dict[str, object] = pytesseract.image_to_osd(
                path, config=f"--psm 0 --dpi {dpi}", output_type=pytesseract.Output.DICT
            )
    except pytesseract.TesseractNotFoundError as exc:
        raise OcrError("Tesseract is not installed (apt-get install tesseract-ocr).") from exc
    except pytesseract.TesseractError:
        return None
    return osd


def speckle(picture: Image.Image) -> float:
    """The share of the picture's pixels in dark specks (see NOISY)."""
    import numpy as np

    pixels = np.asarray(picture)
    specks = sum(int(np.count_nonzero(mask)) for _, mask in _speck_strips(pixels, _DARK))
    return specks / max(1, pixels.size)


def despeckled(picture: Image.Image) -> Image.Image:
    """The picture with its dark specks and their fringes whitened when it is noisy (above
    NOISY); the picture itself when it is not."""
    import numpy as np
    from PIL import Image, ImageFilter

    if speckle(picture) <= NOISY:
        return picture
    pixels = np.array(picture)
    for start, mask in _speck_strips(pixels, _FRINGE_DARK, near_text=True):
        # the fringe: two pixels around each speck (the grey a blur or JPEG leaves)
        grown = Image.fromarray(mask.view(np.uint8) * 255).filter(ImageFilter.MaxFilter(5))
        rows = pixels[start : start + mask.shape[0]]
        rows[np.asarray(grown) > 0] = 255
    return Image.fromarray(pixels)


def _speck_strips(
    pixels: npt.NDArray[np.uint8], dark: int, *, near_text: bool = False
) -> Iterator[tuple[int, npt.NDArray[np.bool_]]]:
    """Each strip's first row and its specks' mask, strip by strip (strips of _STRIP rows,
    each seen with 4 rows more on both sides). ``near_text``: specks a pixel or two from a
    letter too (a 3x3 square holding every dark pixel of its 5x5 one): on a noisy page they
    are most of what whitening specks alone leaves (CER 5.5 % against 2.5 % with them)."""
    import numpy as np

    height = pixels.shape[0]
    for start in range(0, height, _STRIP):
        top, bottom = max(0, start - 4), min(height, start + _STRIP + 4)
        black = (pixels[top:bottom] < dark).view(np.uint8)
        five = _box(black, 5)
        alone = five == _box(black, 9)
        if near_text:
            alone |= _box(black, 3) == five
        specks = (black == 1) & alone
        yield start, specks[start - top : start - top + min(_STRIP, height - start)]


def _box(black: npt.NDArray[np.uint8], size: int) -> npt.NDArray[np.uint8]:
    """How many of the ``size`` x ``size`` pixels around each pixel are 1 (outside: 0)."""
    import numpy as np

    half = size // 2
    height, width = black.shape
    padded = np.zeros((height + 2 * half, width + 2 * half), np.uint8)
    padded[half : half + height, half : half + width] = black
    rows = np.zeros((height + 2 * half, width), np.uint8)
    for shift in range(size):
        rows += padded[:, shift : shift + width]
    total = np.zeros((height, width), np.uint8)
    for shift in range(size):
        total += rows[shift : shift + height]
    return total


def _page(
    number: int,
    data: dict[str, list[object]],
    size: tuple[int, int],
    rotation: int,
    languages: str,
) -> OcrPage:
    width, height = size
    parts: list[str] = []
    length = 0
    words: list[tuple[int, int, float, float, float, float]] = []
    confidences: list[float] = []
    last_line: tuple[object, ...] | None = None
    last_paragraph: tuple[object, ...] | None = None
    for index, raw in enumerate(data["text"]):
        word = str(raw).strip()
        if not word:
            continue
        paragraph = (data["block_num"][index], data["par_num"][index])
        line = (*paragraph, data["line_num"][index])
        if last_line is not None:
            separator = (
                " " if line == last_line else "\n" if paragraph == last_paragraph else "\n\n"
            )
            parts.append(separator)
            length += len(separator)
        last_line, last_paragraph = line, paragraph
        left, top = _number(data["left"][index]), _number(data["top"][index])
        right, bottom = left + _number(data["width"][index]), top + _number(data["height"][index])
        box = _displayed(left / width, top / height, right / width, bottom / height, rotation)
        words.append((length, length + len(word), *box))
        parts.append(word)
        length += len(word)
        if (confidence := _number(data["conf"][index])) >= 0:
            confidences.append(confidence)
    mean = round(sum(confidences) / len(confidences) / 100, 4) if confidences else None
    return OcrPage(number, "".join(parts), tuple(words), mean, rotation, languages)


def _number(value: object) -> float:
    return float(value)  # type: ignore[arg-type]


def _displayed(
    x0: float, y0: float, x1: float, y1: float, rotation: int
) -> tuple[float, float, float, float]:
    """A box on the upright picture as a box on the page as displayed, which the upright
    picture is turned ``rotation`` degrees clockwise from."""
    corners = [_back((x0, y0), rotation), _back((x1, y1), rotation)]
    xs, ys = [x for x, _ in corners], [y for _, y in corners]
    return (
        round(min(xs), 5),
        round(min(ys), 5),
        round(max(xs), 5),
        round(max(ys), 5),
    )


def _back(point: tuple[float, float], rotation: int) -> tuple[float, float]:
    x, y = point
    if rotation == 90:  # turned clockwise: upright (x, y) was displayed (y, 1 - x)
        return y, 1 - x
    if rotation == 180:
        return 1 - x, 1 - y
    if rotation == 270:
        return 1 - y, x
    return x, y


def ocr_workers(configured: int) -> int:
    """How many worker processes read pages: ``configured``, or when 0 one for each CPU core
    this process may run on but one, and at least one. The core left over is for the service
    and its database: SCHED_IDLE yields the CPU only to the processes of the workers' own
    scheduling group (their session's autogroup, or their container's cgroup), and a database
    in another group competes with them as an equal, waiting up to a scheduler tick for a
    core Tesseract holds (docs/PERFORMANCE.md, "OCR beside PostgreSQL")."""
    if configured:
        return configured
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


def run_below_service() -> None:
    """Make this process (an OCR worker) and the Tesseract processes it starts run only on the
    CPU the service leaves: Linux's SCHED_IDLE, which any runnable process of the service
    preempts at once (a niced process only weighs less: it keeps a share of a core the
    service wants, and other requests' p95 grew with the workers at nice 10). Where SCHED_IDLE
    is not there (not Linux), nice 19. Tesseract's OpenMP threads would contend with the other
    workers: one thread a process."""
    os.environ["OMP_THREAD_LIMIT"] = "1"
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)


def _main_not_rerun() -> None:
    """A process multiprocessing starts (spawn or fork server) first runs the parent's main
    module again, when that is a file: the ``citegate`` console script, which imports the whole
    service (83 MiB more in each worker, 1,232 modules, every time one starts). A main module
    named ``__main__`` is not run again (as under ``python -m``): the script's is named so."""
    main = sys.modules.get("__main__")
    if main is not None and getattr(main, "__spec__", None) is None:
        main.__spec__ = ModuleSpec("__main__", None)


class OcrPool:
    """Worker processes that read pages, one page a task. Started when first used. Not
    replaced after N pages (``max_tasks_per_child``): on Python 3.11 the pool then stops
    taking work once a worker has left (CPython gh-115634; 100 pages hung after the first 20).
    A worker's memory does not grow with the pages it reads (the PDF is opened for each page:
    see ``render``; docs/PERFORMANCE.md)."""

    def __init__(self, workers: int) -> None:
        self._workers = max(1, workers)
        self._executor: ProcessPoolExecutor | None = None

    def _pool(self) -> ProcessPoolExecutor:
        if self._executor is None:
            # forkserver: the service's process has threads (and an event loop) a fork would
            # copy; a fork server started afresh forks workers that import this module alone,
            # not the service (with the main module not run again: _main_not_rerun).
            _main_not_rerun()
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload([__name__])
            self._executor = ProcessPoolExecutor(
                self._workers,
                mp_context=context,
                initializer=run_below_service,
            )
        return self._executor

    @property
    def workers(self) -> int:
        return self._workers

    async def read(
        self, path: str, number: int, languages: str, hint: str | None = None
    ) -> OcrPage:
        """Page ``number`` of the PDF at ``path`` read in a worker (``hint``: see
        ``read_picture``)."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(
                self._pool(), read_page, path, number, languages, hint
            )
        except BrokenProcessPool as exc:
            self._executor = None  # a worker died (killed, out of memory): start afresh
            raise OcrError(f"The OCR worker reading page {number} died.") from exc

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
