"""A fence around blingfire: chunking calls its C function TextToSentencesWithOffsets through
ctypes, past the Python wrapper, so nothing but these tests notices when the library changes the
function's arguments, its output or the meaning of its offsets.

When one fails, read TextToSentencesWithOffsets in blingfire's blingfiretokdll.cpp for the
release installed, fix _TEXT_TO_SENTENCES_SIGNATURE and _blingfire_cuts in
app/documents/chunking.py to match, run tests/unit/test_chunking.py, and then move CHECKED_VERSION.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.metadata
from collections.abc import Callable
from pathlib import Path
from typing import Any

import blingfire
import pytest

# The release whose C function app/documents/chunking.py was checked against.
CHECKED_VERSION = "0.1.8"
WHERE = (
    "app/documents/chunking.py (_TEXT_TO_SENTENCES_SIGNATURE, _blingfire_cuts) calls it; "
    "tests/unit/test_blingfire_fence.py says what to do"
)


@pytest.fixture(scope="module")
def text_to_sentences() -> Callable[..., int]:
    """The function object chunking calls, or a failure that says why there is none."""
    try:
        chunking = importlib.import_module("app.documents.chunking")
    except (AttributeError, OSError) as error:
        pytest.fail(
            f"chunking cannot bind blingfire's TextToSentencesWithOffsets ({error}); {WHERE}"
        )
    function: Callable[..., int] = chunking._TEXT_TO_SENTENCES
    return function


def call(
    function: Callable[..., int], text: bytes, *, ends: bool = True
) -> tuple[int, bytes, list[int], list[int] | None]:
    """Call it as chunking does; return the result, the output and the offsets it reports."""
    cap = 2 * len(text) + 2
    out = ctypes.create_string_buffer(cap)
    starts = (ctypes.c_int32 * cap)()
    last = (ctypes.c_int32 * cap)() if ends else None
    size = function(text, len(text), out, starts, last, cap)
    written = out.raw[: max(size, 0)]
    count = written.count(b"\n") + 1
    return size, written, starts[:count], last[:count] if last is not None else None


def test_the_installed_release_is_the_one_checked() -> None:
    installed = importlib.metadata.version("blingfire")
    assert installed == CHECKED_VERSION, (
        f"blingfire {installed} is installed, but its C function was checked against "
        f"{CHECKED_VERSION}; {WHERE}"
    )


def test_the_package_loads_its_own_shared_library() -> None:
    library: Any = getattr(blingfire, "blingfire", None)
    assert isinstance(library, ctypes.CDLL), (
        f"blingfire.blingfire is {type(library).__name__}, no longer the ctypes.CDLL of its shared "
        f"library; {WHERE}"
    )
    assert Path(library._name).parent == Path(blingfire.__file__).parent, (
        f"blingfire loads {library._name}, not a library inside its package; {WHERE}"
    )
    assert hasattr(library, "TextToSentencesWithOffsets"), (
        f"{library._name} no longer exports TextToSentencesWithOffsets; {WHERE}"
    )


def test_chunking_loads_the_library_the_package_loads() -> None:
    # chunking loads the library itself, so as not to import the package (and numpy).
    chunking = importlib.import_module("app.documents.chunking")
    library: Any = getattr(blingfire, "blingfire", None)
    assert Path(chunking._blingfire_library()._name) == Path(library._name), (
        f"chunking loads {chunking._blingfire_library()._name}, the package {library._name}; "
        f"{WHERE}"
    )


def test_sentences_come_one_a_line_with_utf8_byte_offsets(
    text_to_sentences: Callable[..., int],
) -> None:
    text = "Ünd so. Zwei Sätze hier.  Drei!".encode()
    size, out, starts, last = call(text_to_sentences, text)
    assert out == "Ünd so.\nZwei Sätze hier.\nDrei!\0".encode(), (
        f"the output is no longer the sentences one a line and a NUL: {out!r}; {WHERE}"
    )
    assert size == len(out), f"it returns {size}, not the bytes written with the NUL; {WHERE}"
    assert starts == [0, 9, 28], (
        f"start offsets {starts} are not the UTF-8 byte offsets [0, 9, 28] of each sentence's "
        f"first character; {WHERE}"
    )
    assert last == [7, 25, 32], f"end offsets {last} are not the last bytes [7, 25, 32]; {WHERE}"


def test_a_line_break_inside_a_sentence_becomes_a_space(
    text_to_sentences: Callable[..., int],
) -> None:
    # chunking counts the sentences by the line breaks in the output.
    size, out, starts, _ = call(text_to_sentences, b"Eins\nzwei. Drei.")
    assert (size, out, starts) == (17, b"Eins zwei.\nDrei.\0", [0, 11]), (
        f"a line break inside a sentence no longer becomes a space: {out!r}, {starts}; {WHERE}"
    )


def test_no_end_offsets_may_be_asked_for(text_to_sentences: Callable[..., int]) -> None:
    text = "Ünd so. Zwei Sätze hier.  Drei!".encode()
    assert call(text_to_sentences, text, ends=False)[:3] == call(text_to_sentences, text)[:3], (
        f"a NULL for the end offsets changes what it reports; {WHERE}"
    )


def test_a_byte_order_mark_is_skipped_and_one_alone_is_refused(
    text_to_sentences: Callable[..., int],
) -> None:
    _, out, starts, _ = call(text_to_sentences, "\ufeffHello. World.".encode())
    assert (out, starts) == (b"Hello.\nWorld.\0", [3, 10]), (
        f"a leading byte order mark is no longer skipped: {out!r}, {starts}; {WHERE}"
    )
    assert call(text_to_sentences, "\ufeff".encode())[0] == -1, (
        f"a text of only a byte order mark is no longer refused with -1; {WHERE}"
    )


@pytest.mark.parametrize(
    "text",
    [
        "Dr. Smith met Mr. Jones at 5 p.m. today. They talked.",
        "Prof. Dr. Müller kam am 3. Oktober. Er lebte im 19. Jahrhundert. Über uns.",
        "Emoji 😀 here. Next 😀 one.\n\nЭто дом. Он большой!",
        "本当？はい！そうです。 这是第一句。",
    ],
)
def test_offsets_agree_with_blingfires_own_wrapper(text: str) -> None:
    """chunking maps the C function's byte offsets to code points as the wrapper does."""
    chunking = importlib.import_module("app.documents.chunking")
    wrapped = [start for start, _ in blingfire.text_to_sentences_and_offsets(text)[1]]
    cuts = chunking._blingfire_cuts(text)
    assert cuts == wrapped[1:], (
        f"in {text!r} blingfire's wrapper starts sentences at {wrapped}, chunking at {cuts}; "
        f"{WHERE}"
    )
