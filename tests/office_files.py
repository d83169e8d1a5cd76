"""Office files made for tests by other tools than the ones Citegate reads them with: Word
packages written here by hand (raw OOXML in a ZIP), workbooks by XlsxWriter, slides by
python-pptx's writer (Citegate reads slides with its reader), and the shapes of bad input."""

from __future__ import annotations

import io
import struct
import zipfile
from typing import Any
from xml.sax.saxutils import escape

import xlsxwriter
from pptx import Presentation

_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_RELS = """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">
<Relationship Id="rId1" Target="word/document.xml" Type="http://schemas.openxmlformats.org/\
officeDocument/2006/relationships/officeDocument"/>
</Relationships>"""
WORD_MAIN = "application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"
WORD_MACRO_MAIN = "application/vnd.ms-word.document.macroEnabled.main+xml"


def _content_types(main: str, extra: str = "") -> str:
    return f"""<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">
<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>
<Default Extension="xml" ContentType="application/xml"/>{extra}
<Override PartName="/word/document.xml" ContentType="{main}"/>
</Types>"""


def _paragraph(text: str, style: str | None = None) -> str:
    properties = f'<w:pPr><w:pStyle w:val="{style}"/></w:pPr>' if style else ""
    return f'<w:p>{properties}<w:r><w:t xml:space="preserve">{escape(text)}</w:t></w:r></w:p>'


def word_file(body: list[str | tuple[str, str] | list[list[str]]], *, macro: bool = False) -> bytes:
    """A .docx (or .docm) whose body is, in order: paragraphs (text, or (style, text)) and
    tables (lists of rows of cells)."""
    parts = []
    for item in body:
        if isinstance(item, str):
            parts.append(_paragraph(item))
        elif isinstance(item, tuple):
            parts.append(_paragraph(item[1], item[0]))
        else:
            rows = "".join(
                "<w:tr>" + "".join(f"<w:tc>{_paragraph(cell)}</w:tc>" for cell in row) + "</w:tr>"
                for row in item
            )
            parts.append(f"<w:tbl>{rows}</w:tbl>")
    document = (
        f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<w:document xmlns:w="{_W}">'
        f"<w:body>{''.join(parts)}<w:sectPr/></w:body></w:document>"
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        main = WORD_MACRO_MAIN if macro else WORD_MAIN
        extra = '\n<Default Extension="bin" ContentType="application/vnd.ms-office.vbaProject"/>'
        archive.writestr("[Content_Types].xml", _content_types(main, extra if macro else ""))
        archive.writestr("_rels/.rels", _RELS)
        archive.writestr("word/document.xml", document)
        if macro:
            archive.writestr("word/vbaProject.bin", b"\xd0\xcf\x11\xe0 macros are never run")
    return buffer.getvalue()


def word_bomb(unpacked: int) -> bytes:
    """A .docx with a member that inflates to ``unpacked`` bytes of zeros (a ZIP bomb)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("[Content_Types].xml", _content_types(WORD_MAIN))
        archive.writestr("_rels/.rels", _RELS)
        archive.writestr("word/document.xml", f'<w:document xmlns:w="{_W}"><w:body/></w:document>')
        with archive.open("word/media/zeros.bin", "w", force_zip64=True) as member:
            block = bytes(1024 * 1024)
            for _ in range(unpacked // len(block)):
                member.write(block)
    return buffer.getvalue()


def workbook_file(sheets: dict[str, list[list[Any]]]) -> bytes:
    """An .xlsx written by XlsxWriter: each sheet's rows from row 1."""
    buffer = io.BytesIO()
    workbook = xlsxwriter.Workbook(buffer, {"in_memory": True})
    for name, rows in sheets.items():
        sheet = workbook.add_worksheet(name)
        for number, row in enumerate(rows):
            for column, value in enumerate(row):
                if value is not None:
                    sheet.write(number, column, value)
    workbook.close()
    return buffer.getvalue()


def slides_file(slides: list[tuple[str, str, str]]) -> bytes:
    """A .pptx of (title, body text, speaker notes) slides, written by python-pptx."""
    presentation = Presentation()
    layout = presentation.slide_layouts[1]  # title and content
    for title, body, notes in slides:
        slide = presentation.slides.add_slide(layout)
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
        if notes:
            slide.notes_slide.notes_text_frame.text = notes
    buffer = io.BytesIO()
    presentation.save(buffer)
    return buffer.getvalue()


def encrypted_office_file() -> bytes:
    """What Office saves for a password-protected file: an OLE compound file (header, then a
    directory sector) holding EncryptionInfo and EncryptedPackage streams."""
    header = (
        b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(16) + struct.pack("<HHHH", 0x3E, 3, 0xFFFE, 9)
    )
    header = header.ljust(512, b"\x00")

    def entry(name: str, kind: int) -> bytes:
        encoded = (name + "\x00").encode("utf-16-le")
        return (encoded.ljust(64, b"\x00") + struct.pack("<HB", len(encoded), kind)).ljust(
            128, b"\x00"
        )

    directory = entry("Root Entry", 5) + entry("EncryptionInfo", 2) + entry("EncryptedPackage", 2)
    return header + directory.ljust(512, b"\x00") + bytes(4096)
