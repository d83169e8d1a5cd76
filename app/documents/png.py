"""PNG encoding of a rendered page, fast.

Pillow chooses a filter for every row of a PNG, trying each of the five, and that costs more
than compressing the picture does (docs/PERFORMANCE.md). A rendered page compresses as well
without filters, so the rows go to zlib as they are (filter 0, "None"); the rest is PNG's four
chunks. Any PNG decoder reads the result; the tests decode it with Pillow.
"""

from __future__ import annotations

import struct
import zlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PIL import Image

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_COLOUR_TYPES = {"L": 0, "RGB": 2, "RGBA": 6}


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def encode_png(picture: Image.Image, level: int = 1) -> bytes:
    """``picture`` as PNG bytes, 8 bits a channel, zlib at ``level`` (1 is fastest)."""
    if picture.mode not in _COLOUR_TYPES:
        picture = picture.convert("RGB")
    width, height = picture.size
    raw = picture.tobytes()
    stride = len(raw) // height
    rows = b"".join(b"\x00" + raw[row : row + stride] for row in range(0, len(raw), stride))
    header = struct.pack(">IIBBBBB", width, height, 8, _COLOUR_TYPES[picture.mode], 0, 0, 0)
    return b"".join(
        (
            _SIGNATURE,
            _chunk(b"IHDR", header),
            _chunk(b"IDAT", zlib.compress(rows, level)),
            _chunk(b"IEND", b""),
        )
    )
