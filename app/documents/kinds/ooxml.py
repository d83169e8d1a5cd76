"""Office Open XML packages (.docx, .xlsx, .pptx and their macro-enabled forms): telling them
apart from their bytes, and opening them within bounds.

A package is a ZIP whose ``[Content_Types].xml`` names the main part's content type, which
says what the file is whatever its name. Macro-enabled files (.docm, .xlsm, .pptm) are read and
stored like the others; their macros are only bytes in the archive, never run. A
password-protected Office file is not a ZIP at all but an OLE compound file holding an
``EncryptedPackage`` stream.
"""

from __future__ import annotations

import io
import re
import zipfile
from typing import Any, ClassVar

from app.documents.kinds.base import DocumentKind, ParseOptions
from app.errors import ErrorCode, InvalidDocument

ZIP_SIGNATURE = b"PK\x03\x04"
_OLE_SIGNATURE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
# Stream names in an OLE directory are UTF-16 LE.
_ENCRYPTED_PACKAGE = "EncryptedPackage".encode("utf-16-le")
_CONTENT_TYPES = "[Content_Types].xml"
_CONTENT_TYPES_LIMIT = 1024 * 1024
_MAIN_PART = re.compile(
    rb'PartName="/((?:word|xl|ppt)/[^"]+)"\s+ContentType="([^"]+\.main\+xml)"'
    rb'|ContentType="([^"]+\.main\+xml)"\s+PartName="/((?:word|xl|ppt)/[^"]+)"'
)


def refuse_encrypted(data: bytes) -> None:
    """``document_encrypted`` for a password-protected Office file."""
    if data.startswith(_OLE_SIGNATURE) and _ENCRYPTED_PACKAGE in data:
        raise InvalidDocument(
            "The Office file is protected by a password: save it without one and upload it again.",
            code=ErrorCode.DOCUMENT_ENCRYPTED,
        )


def damaged() -> InvalidDocument:
    return InvalidDocument(
        "The file is a ZIP archive, as .docx, .xlsx and .pptx files are, but it is damaged or "
        "truncated.",
        code=ErrorCode.OFFICE_FILE_INVALID,
    )


def main_content_type(data: bytes) -> str | None:
    """The content type of a package's main part; None for a ZIP that is no Office file.
    ``office_file_invalid`` for a ZIP that cannot be read."""
    part = main_part(data)
    return None if part is None else part[1]


def main_part(data: bytes) -> tuple[str, str] | None:
    """The name of a package's main part and its content type (lower case)."""
    if not data.startswith(ZIP_SIGNATURE):
        return None
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            try:
                member = archive.getinfo(_CONTENT_TYPES)
            except KeyError:
                return None
            with archive.open(member) as stream:
                types = stream.read(_CONTENT_TYPES_LIMIT)
    except (zipfile.BadZipFile, EOFError, OSError, NotImplementedError, ValueError):
        raise damaged() from None
    match = _MAIN_PART.search(types)
    if match is None:
        return None
    name = match.group(1) or match.group(4)
    content_type = match.group(2) or match.group(3)
    return name.decode("utf-8", "replace"), content_type.decode("ascii", "replace").lower()


def open_package(data: bytes, options: ParseOptions) -> io.BytesIO:
    """The package's bytes as a file, once its members are known to unpack within
    ``max_unpacked_bytes``: no library reading it afterwards holds more.

    zipfile stops inflating a member at the size the archive declares for it (and fails on a
    CRC mismatch), so the declared sizes bound what any reader can unpack.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, EOFError, OSError, NotImplementedError, ValueError):
        raise damaged() from None
    unpacked = sum(member.file_size for member in members)
    if unpacked > options.max_unpacked_bytes:
        raise InvalidDocument(
            f"The file unpacks to {unpacked} bytes; at most {options.max_unpacked_bytes} are read.",
            code=ErrorCode.UNPACKED_TOO_LARGE,
        )
    return io.BytesIO(data)


class OfficeKind(DocumentKind):
    """A kind whose files are Office Open XML packages of one family."""

    content_schema: ClassVar[dict[str, Any]] = {"type": "string", "format": "binary"}
    main_content_types: ClassVar[dict[str, str]]
    """The main part's content type of each form (plain, macro-enabled, template), with the
    media type its original bytes are served with."""

    def recognises(self, data: bytes) -> bool:
        return main_content_type(data) in self.main_content_types

    def original_media_type(self, data: bytes) -> str | None:
        """The media type of this file when it is not the kind's own (a macro-enabled one)."""
        media_type = self.main_content_types.get(main_content_type(data) or "")
        return None if media_type == self.media_type else media_type
