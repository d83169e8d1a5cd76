"""The fast PNG encoder: what it writes decodes, with Pillow, to exactly the picture given."""

from __future__ import annotations

import io

import pypdfium2 as pdfium
import pytest
from PIL import Image

from app.documents.png import encode_png
from tests.fixture_files import CORPUS


@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA"])
def test_decodes_to_the_same_pixels(mode: str) -> None:
    channels = len(mode)
    pixels = bytes((n * 7 + n // 37 * 13) % 256 for n in range(37 * 11 * channels))
    picture = Image.frombytes(mode, (37, 11), pixels)
    decoded = Image.open(io.BytesIO(encode_png(picture)))
    decoded.load()
    assert decoded.format == "PNG" and decoded.mode == mode and decoded.size == (37, 11)
    assert decoded.tobytes() == picture.tobytes()


def test_a_rendered_page_round_trips() -> None:
    with pdfium.PdfDocument(CORPUS / "GeoTopo-komprimiert.pdf") as document:  # and its page
        page = document[3]
        bitmap = page.render(scale=600 / page.get_width(), rev_byteorder=True)
        try:
            picture = bitmap.to_pil()  # the bitmap's buffer is Python's: it outlives the bitmap
        finally:
            bitmap.close()
    png = encode_png(picture)
    decoded = Image.open(io.BytesIO(png))
    assert decoded.tobytes() == picture.convert("RGB").tobytes()
    assert len(png) < len(picture.tobytes()) / 10  # compressed, not stored
