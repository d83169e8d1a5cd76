"""Scanned PDFs whose truth is known, made from the repository's own text PDFs: each page
rendered by PDFium into a picture, and the picture put alone on a page of a new PDF (turned,
noised, or under a garbage text layer when asked). The source's text layer is the truth an
OCR'd page is compared with."""

from __future__ import annotations

import ctypes
import io
import random
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
from PIL import Image, ImageDraw, ImageFilter, ImageFont
from rapidfuzz.distance import Levenshtein

SERIF = Path("/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf")
# Typed letters' words (``typed_page``): Russian, read after OSD finds Cyrillic; German, whose
# umlauts and ß English reads as other letters.
RUSSIAN = (
    "Все люди рождаются свободными и равными в своем достоинстве и правах. Они наделены "
    "разумом и совестью и должны поступать в отношении друг друга в духе братства."
)
GERMAN = (
    "Über die Größe der Bäume läßt sich nicht streiten: sie wachsen, bis die Kräfte des Bodens "
    "erschöpft sind. Die Förster zählen die Jahresringe und schätzen das Alter der Wälder, "
    "die von den Flüssen und Straßen begrenzt werden."
)


def cer(read: str, expected: str) -> float:
    """Character error rate, whitespace runs counted as one space."""
    read, expected = " ".join(read.split()), " ".join(expected.split())
    return Levenshtein.distance(read, expected) / max(1, len(expected))


def render_page(data: bytes, number: int, dpi: int = 300) -> Image.Image:
    """Page ``number`` (1-based) of a PDF as a greyscale picture at ``dpi``."""
    with pdfium.PdfDocument(data) as document:
        page = document[number - 1]
        bitmap = page.render(scale=dpi / 72, grayscale=True)
        picture: Image.Image = bitmap.to_pil().convert("L")
        bitmap.close()
        return picture


def typed_page(words: str) -> Image.Image:
    """``words`` typed in DejaVu Serif on an A4 page at 300 dpi (a scan of a typed letter);
    the caller skips when SERIF is not installed."""
    font = ImageFont.truetype(str(SERIF), 42)
    picture = Image.new("L", (2480, 3508), 255)
    draw = ImageDraw.Draw(picture)
    for index, line in enumerate(textwrap.wrap(words, 60)):
        draw.text((200, 300 + index * 70), line, font=font, fill=0)
    return picture


def noisy(picture: Image.Image, seed: int = 7, amount: float = 0.04) -> Image.Image:
    """A picture as a poor scan gives it: slightly blurred, with salt-and-pepper noise."""
    blurred = picture.filter(ImageFilter.GaussianBlur(0.6))
    pixels = blurred.load()
    assert pixels is not None
    generator = random.Random(seed)
    width, height = blurred.size
    for _ in range(int(width * height * amount)):
        x, y = generator.randrange(width), generator.randrange(height)
        pixels[x, y] = 0 if generator.random() < 0.5 else 255
    return blurred


def image_pdf(
    pictures: Sequence[Image.Image],
    *,
    sizes: Sequence[tuple[float, float]] | None = None,
    text_pages: dict[int, bytes] | None = None,
    garbage_layer: Sequence[int] = (),
) -> bytes:
    """A PDF whose page ``i`` is ``pictures[i]`` alone, filling a page of ``sizes[i]`` points
    (the picture's at 300 dpi by default; ``sizes`` goes with ``pictures``), or, for an index
    of ``text_pages``, page 1 of that
    PDF copied as it is. Pages of ``garbage_layer`` (0-based) also get an invisible text layer
    of control characters, as a font with no Unicode map gives."""
    text_pages = text_pages or {}
    document = pdfium.PdfDocument.new()
    try:
        total = len(pictures) + len(text_pages)
        drawn = 0
        for index in range(total):
            if index in text_pages:
                source = pdfium.PdfDocument(text_pages[index])
                document.import_pages(source, [0], index)
                source.close()
                continue
            picture = pictures[drawn]
            width, height = (
                sizes[drawn] if sizes else (picture.width * 72 / 300, picture.height * 72 / 300)
            )
            drawn += 1
            page = document.new_page(width, height)
            image = pdfium.PdfImage.new(document)
            buffer = io.BytesIO()
            picture.save(buffer, format="JPEG", quality=80)
            buffer.seek(0)
            image.load_jpeg(buffer, inline=False)
            image.set_matrix(pdfium.PdfMatrix().scale(width, height))
            page.insert_obj(image)
            if index in garbage_layer:
                _garbage_text(document, page, width, height)
            page.gen_content()
            page.close()
        out = io.BytesIO()
        document.save(out)
        return out.getvalue()
    finally:
        document.close()


def _garbage_text(
    document: pdfium.PdfDocument, page: pdfium.PdfPage, width: float, height: float
) -> None:
    for line in range(30):
        text = pdfium_c.FPDFPageObj_NewTextObj(document.raw, b"Helvetica", ctypes.c_float(9))
        codes = [4 + (line * 11 + i * 7) % 26 for i in range(70)]
        codes[::8] = [32] * len(codes[::8])
        array = (ctypes.c_uint32 * len(codes))(*codes)
        pdfium_c.FPDFText_SetCharcodes(text, array, len(codes))
        pdfium_c.FPDFTextObj_SetTextRenderMode(text, pdfium_c.FPDF_TEXTRENDERMODE_INVISIBLE)
        pdfium_c.FPDFPageObj_Transform(text, 1, 0, 0, 1, 40, height - 60 - line * 20)
        pdfium_c.FPDFPage_InsertObject(page.raw, text)


def scanned(
    data: bytes, numbers: Sequence[int], dpi: int = 300, garbage_layer: Sequence[int] = ()
) -> bytes:
    """The pages ``numbers`` of a text PDF as a scan: pictures at ``dpi``, page sizes kept."""
    pictures = [render_page(data, number, dpi) for number in numbers]
    with pdfium.PdfDocument(data) as document:
        sizes = [document[number - 1].get_size() for number in numbers]
    return image_pdf(pictures, sizes=sizes, garbage_layer=garbage_layer)
