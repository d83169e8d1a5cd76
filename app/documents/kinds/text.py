"""Plain text: stored exactly as sent, cited by character offsets into its decoded text.

UTF-8 is the default; UTF-16 and UTF-32 are read from their byte order mark, and any other
encoding only from a ``charset=`` the caller declared. The decoded text is what the upstream
sees and cites; the original bytes are kept as they came.
"""

from __future__ import annotations

import codecs
from typing import Any, ClassVar

from app.documents.chunking import split_sentences
from app.documents.kinds.base import (
    DEFAULT_PARSE_OPTIONS,
    ChunkSpan,
    ParsedDocument,
    ParseOptions,
    SentAsText,
)
from app.errors import ErrorCode, InvalidDocument

# UTF-32 first: the UTF-32 LE mark begins with the UTF-16 LE one.
_BOM_ENCODINGS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
UTF16_32_BOMS = (
    codecs.BOM_UTF32_LE,
    codecs.BOM_UTF32_BE,
    codecs.BOM_UTF16_LE,
    codecs.BOM_UTF16_BE,
)


def bom_encoding(data: bytes) -> tuple[str, int] | None:
    """The encoding a byte order mark names, and the mark's length."""
    for bom, encoding in _BOM_ENCODINGS:
        if data.startswith(bom):
            return encoding, len(bom)
    return None


def decode_text(data: bytes, charset: str | None) -> tuple[str, str]:
    """The text of ``data`` and the name of its encoding (as a ``charset=`` says it): a BOM's,
    else the declared charset, else UTF-8. Anything that does not decode is
    ``text_not_utf8``."""
    found = bom_encoding(data)
    if found is not None:
        encoding, skip = found
        label = encoding.removesuffix("-le").removesuffix("-be")  # the BOM stays in the bytes
    else:
        encoding, skip = "utf-8", 0
        label = "utf-8"
        if charset:
            label = charset.lower()  # as the caller named it, for serving the bytes back
            try:
                encoding = codecs.lookup(charset).name
            except LookupError:
                raise InvalidDocument(
                    f"The declared charset {charset!r} is not one Citegate knows.",
                    code=ErrorCode.TEXT_NOT_UTF8,
                ) from None
    try:
        text = data[skip:].decode(encoding)
    except UnicodeDecodeError as exc:
        if encoding == "utf-8":
            detail = f"The text is not valid UTF-8 (byte {exc.start + skip})."
        else:
            detail = f"The text is not valid {encoding} (byte {exc.start + skip})."
        raise InvalidDocument(
            detail + " Declare its encoding as charset= in the file's media type.",
            code=ErrorCode.TEXT_NOT_UTF8,
        ) from exc
    if "\x00" in text:
        raise InvalidDocument("The text contains a NUL character.", code=ErrorCode.INVALID_TEXT)
    return text, "utf-8" if encoding == "utf-8" else label


def charset_media_type(media_type: str, encoding: str) -> str | None:
    """The media type to serve original bytes of ``encoding`` with; None for UTF-8."""
    if encoding == "utf-8":
        return None
    return f"{media_type}; charset={encoding}"


class TextKind(SentAsText):
    name = "text"
    media_type = "text/plain"
    extensions = (".txt", ".text", ".log")
    trusts_declared_text = True
    content_schema: ClassVar[dict[str, Any]] = {"type": "string"}

    def parse(self, data: bytes, options: ParseOptions = DEFAULT_PARSE_OPTIONS) -> ParsedDocument:
        text, encoding = decode_text(data, options.charset)
        if not text.strip():
            raise InvalidDocument("The document has no text.", code=ErrorCode.EMPTY_DOCUMENT)
        chunks = [ChunkSpan(start, end) for start, end in split_sentences(text)]
        return ParsedDocument(
            text, chunks, media_type=charset_media_type(self.media_type, encoding)
        )
