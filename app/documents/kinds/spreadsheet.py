"""Spreadsheets (.csv, .tsv, .xlsx, .xlsm): one content block per row, written as
``header: value`` lines under the sheet's first row, and sent as content blocks, so a citation
names whole rows. Each block's locator is ``{"sheet": "Q3", "rows": [14]}`` (a CSV or TSV has
no sheet: ``{"rows": [14]}``), rows numbered as a spreadsheet program shows them.

A workbook's parts are found and read with openpyxl's public readers (the workbook part, its
relationships, shared strings and styles), and each worksheet's XML is streamed from the
package by ``_SheetReader`` rather than built in memory; every kind stops at ``max_rows`` rows
with ``too_many_rows``.
"""

from __future__ import annotations

import csv
import io
import zipfile
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time
from typing import IO, Any, ClassVar
from xml.etree import ElementTree
from xml.parsers import expat

from app.documents.kinds.base import DEFAULT_PARSE_OPTIONS, ParsedDocument, ParseOptions
from app.documents.kinds.converted import Block, BlocksKind, blocks_document
from app.documents.kinds.ooxml import OfficeKind, damaged, main_part, open_package
from app.documents.kinds.text import charset_media_type, decode_text
from app.errors import ErrorCode, InvalidDocument

_XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
_XLSM = "application/vnd.ms-excel.sheet.macroEnabled.12"


def _no_rows(what: str) -> InvalidDocument:
    return InvalidDocument(
        f"The {what} has no row with values below its first (header) row.",
        code=ErrorCode.EMPTY_DOCUMENT,
    )


def _cell_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    return " ".join(str(value).split())


def _row_blocks(
    rows: Iterable[tuple[int, list[str]]],
    sheet: str | None,
    column_name: Any,
    counted: list[int],
    max_rows: int,
) -> Iterator[Block]:
    """A block per row that has a value, after the first such row (the header); ``rows`` are
    (row number, cell texts). ``counted`` holds the rows read so far in the whole file, for the
    limit."""
    header: list[str] | None = None
    for number, cells in rows:
        if not any(cells):
            continue
        if header is None:
            header = cells
            continue
        counted[0] += 1
        if counted[0] > max_rows:
            raise InvalidDocument(
                f"The spreadsheet has more than {max_rows} rows, the most Citegate reads "
                "(CITEGATE_MAX_SHEET_ROWS).",
                code=ErrorCode.TOO_MANY_ROWS,
            )
        where = f"Sheet {sheet}, row {number}" if sheet is not None else f"Row {number}"
        lines = [where]
        for column, cell in enumerate(cells):
            if cell:
                name = header[column] if column < len(header) and header[column] else None
                lines.append(f"{name or column_name(column)}: {cell}")
        locator: dict[str, Any] = {"rows": [number]}
        if sheet is not None:
            locator = {"sheet": sheet, **locator}
        yield "\n".join(lines) + "\n\n", locator


_MAIN = "http://schemas.openxmlformats.org/spreadsheetml/2006/main "
_ROW, _CELL, _VALUE = f"{_MAIN}row", f"{_MAIN}c", f"{_MAIN}v"
_INLINE, _TEXT, _PHONETIC = f"{_MAIN}is", f"{_MAIN}t", f"{_MAIN}rPh"
_READ_SIZE = 1 << 16


def _number_text(value: str) -> str:
    if "." in value or "E" in value or "e" in value:
        number = float(value)
        return str(int(number)) if number.is_integer() else str(number)
    return str(int(value))


# What reading a damaged workbook raises, from zipfile, zlib, openpyxl's readers of the
# workbook's parts (with ElementTree, or with lxml: see parse) or the sheet reader.
_UNREADABLE = (
    zipfile.BadZipFile,
    zlib.error,
    NotImplementedError,  # a compression method zipfile lacks
    KeyError,
    IndexError,
    ValueError,
    TypeError,
    OSError,
    EOFError,
    ElementTree.ParseError,
    expat.ExpatError,
)


def _row_number(reference: str) -> int:
    """A row's ``r``, which some writers give as a float ("2.0")."""
    if reference.isdigit():
        return int(reference)
    number = float(reference)
    if not number.is_integer():
        raise ValueError(f"{reference} is not a row number")
    return int(number)


def _no_entities(*_: Any) -> None:
    raise ValueError("entity declarations have no place in a worksheet")


@dataclass(frozen=True, slots=True)
class _Workbook:
    """What reading the worksheets needs from the rest of the package."""

    sheets: list[tuple[str, str]]
    """Each worksheet's title and the name of its part, in the workbook's order."""
    shared_strings: Sequence[str]
    date_styles: set[int]
    """The cell styles (``s``) whose number format shows a date or a time."""
    timedelta_styles: set[int]
    """Those of them that show a duration (``[h]:mm``)."""
    epoch: datetime


def _relation_kind(relation: Any) -> str:
    """The last segment of a relationship's type: ``styles`` for ``.../relationships/styles``."""
    return str(relation.Type).rsplit("/", 1)[-1]


def _read_workbook(archive: zipfile.ZipFile, part: str) -> _Workbook:
    """The worksheets, shared strings, date styles and epoch of the workbook whose main part is
    ``part``, each part found through the workbook's relationships and read by openpyxl."""
    from openpyxl.reader.strings import read_string_table
    from openpyxl.reader.workbook import WorkbookParser
    from openpyxl.styles.stylesheet import Stylesheet
    from openpyxl.xml.functions import fromstring

    parser = WorkbookParser(archive, part, keep_links=False)
    parser.parse()  # the sheets in order, and the epoch (1900 or 1904)
    members = set(archive.namelist())
    # A sheet whose part is missing is left out, as openpyxl leaves it; a chart sheet is read
    # like the others and has no rows.
    sheets = [
        (sheet.name, relation.target)
        for sheet, relation in parser.find_sheets()
        if relation.target in members
    ]
    parts = {_relation_kind(relation): relation.target for relation in parser.rels.values()}
    shared_strings: list[str] = []
    if "sharedStrings" in parts:
        with archive.open(parts["sharedStrings"]) as source:
            shared_strings = read_string_table(source)
    date_styles: set[int] = set()
    timedelta_styles: set[int] = set()
    if "styles" in parts:
        # The styles whose number format (built in, or the workbook's own) is a date or a
        # duration, by openpyxl's is_date_format and is_timedelta_format.
        styles = Stylesheet.from_tree(fromstring(archive.read(parts["styles"])))
        date_styles, timedelta_styles = styles.date_formats, styles.timedelta_formats
    return _Workbook(sheets, shared_strings, date_styles, timedelta_styles, parser.wb.epoch)


class _SheetReader:
    """The cells of each worksheet as text, a row at a time, as ``_cell_text`` writes the values
    openpyxl reads (``data_only``: a formula's cached value).

    openpyxl's read-only worksheet builds a dict and a coordinate tuple per cell, on a parser
    that makes an element per tag: for a large sheet, most of the time its upload takes. This
    reads the sheet's XML with expat, turning each cell straight into its text, a chunk of bytes
    at a time, so memory holds one chunk's rows. The workbook's other parts
    (sheets, shared strings, the styles that make a number a date) come from ``_read_workbook``.

    Unlike openpyxl, every row the sheet holds is read, whatever its ``<dimension>`` says: some
    writers put ``A1`` there on every sheet, and openpyxl then reads one cell of them.
    """

    def __init__(self, workbook: _Workbook) -> None:
        from openpyxl.utils import column_index_from_string
        from openpyxl.utils.datetime import from_excel, from_ISO8601

        self.column_index, self.from_excel = column_index_from_string, from_excel
        self.from_iso = from_ISO8601
        self.shared = workbook.shared_strings
        self.shared_texts: dict[int, str] = {}
        self.date_styles = workbook.date_styles
        self.timedelta_styles = workbook.timedelta_styles
        self.epoch = workbook.epoch
        self.columns: dict[str, int] = {}

    def column(self, reference: str) -> int:
        letters = reference.rstrip("0123456789")
        column = self.columns.get(letters)
        if column is None:
            column = self.column_index(letters) - 1
            self.columns[letters] = column
        return column

    def value_text(self, kind: str, style: str | None, value: str) -> str:
        if kind == "s":
            number = int(value)
            text = self.shared_texts.get(number)
            if text is None:
                text = self.shared_texts[number] = _cell_text(self.shared[number])
            return text
        if kind == "n":
            style_id = int(style) if style else 0  # no "s": the workbook's default style
            if style_id in self.date_styles:
                try:
                    moment = self.from_excel(
                        float(value), self.epoch, timedelta=style_id in self.timedelta_styles
                    )
                except (OverflowError, ValueError):
                    return "#VALUE!"
                return _cell_text(moment)
            return _number_text(value)
        if kind == "b":
            return "TRUE" if int(value) else "FALSE"
        if kind == "d":
            return _cell_text(self.from_iso(value))
        return _cell_text(value)  # inlineStr, str (a formula's text), e (an error)

    def rows(self, source: IO[bytes]) -> Iterator[tuple[int, list[str]]]:
        """(row number, its cells' texts by column) for each row of a worksheet's XML."""
        done: list[tuple[int, list[str]]] = []
        number = 0
        cells: list[str] = []
        column = -1
        kind, style = "n", None
        parts: list[str] = []
        collecting = inline = phonetic = False

        def start(name: str, attributes: dict[str, str]) -> None:
            nonlocal number, cells, column, kind, style, collecting, inline, phonetic
            if name == _CELL:
                reference = attributes.get("r")
                column = self.column(reference) if reference else column + 1
                kind, style = attributes.get("t", "n"), attributes.get("s")
                parts.clear()
            elif name == _VALUE:
                collecting = kind != "inlineStr"
            elif name == _TEXT:
                collecting = inline and not phonetic and kind == "inlineStr"
            elif name == _ROW:
                reference = attributes.get("r")
                number = _row_number(reference) if reference else number + 1
                cells, column = [], -1
            elif name == _INLINE:
                inline = True
            elif name == _PHONETIC:
                phonetic = True

        def end(name: str) -> None:
            nonlocal collecting, inline, phonetic
            if name == _CELL:
                value = "".join(parts)
                text = self.value_text(kind, style, value) if value else ""
                if text:
                    if column > len(cells):
                        cells.extend([""] * (column - len(cells)))
                    if column == len(cells):
                        cells.append(text)
                    else:
                        cells[column] = text
            elif name in (_VALUE, _TEXT):
                collecting = False
            elif name == _ROW:
                done.append((number, cells))
            elif name == _INLINE:
                inline = False
            elif name == _PHONETIC:
                phonetic = False

        def text(data: str) -> None:
            if collecting:
                parts.append(data)

        parser = expat.ParserCreate(namespace_separator=" ")
        parser.buffer_text = True
        parser.StartElementHandler = start
        parser.EndElementHandler = end
        parser.CharacterDataHandler = text
        parser.EntityDeclHandler = _no_entities
        while chunk := source.read(_READ_SIZE):
            parser.Parse(chunk, False)
            yield from done
            done.clear()
        parser.Parse(b"", True)
        yield from done


class _DelimitedKind(BlocksKind):
    delimiter: ClassVar[str]
    trusts_declared_text = True
    content_schema: ClassVar[dict[str, Any]] = {"type": "string"}

    def parse(self, data: bytes, options: ParseOptions = DEFAULT_PARSE_OPTIONS) -> ParsedDocument:
        text, encoding = decode_text(data, options.charset)
        reader = csv.reader(io.StringIO(text, newline=""), delimiter=self.delimiter)
        try:
            rows = (
                (number, [_cell_text(value) for value in row])
                for number, row in enumerate(reader, start=1)
            )
            blocks = list(
                _row_blocks(rows, None, lambda c: f"Column {c + 1}", [0], options.max_rows)
            )
        except csv.Error as exc:
            raise InvalidDocument(
                f"The file cannot be read as {self.name.upper()}: {exc}.",
                code=ErrorCode.SPREADSHEET_INVALID,
            ) from exc
        if not blocks:
            raise _no_rows(self.name.upper())
        parsed = blocks_document(blocks, "spreadsheet")
        parsed.media_type = charset_media_type(self.media_type, encoding)
        return parsed


class CsvKind(_DelimitedKind):
    name = "csv"
    media_type = "text/csv"
    hint_media_types = ("application/csv",)
    extensions = (".csv",)
    delimiter = ","


class TsvKind(_DelimitedKind):
    name = "tsv"
    media_type = "text/tab-separated-values"
    extensions = (".tsv", ".tab")
    delimiter = "\t"


class WorkbookKind(OfficeKind, BlocksKind):
    name = "xlsx"
    media_type = _XLSX
    hint_media_types = (_XLSM,)
    extensions = (".xlsx", ".xlsm", ".xltx", ".xltm")
    main_content_types: ClassVar[dict[str, str]] = {
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml": _XLSX,
        "application/vnd.openxmlformats-officedocument.spreadsheetml.template.main+xml": _XLSX,
        "application/vnd.ms-excel.sheet.macroenabled.main+xml": _XLSM,
        "application/vnd.ms-excel.template.macroenabled.main+xml": _XLSM,
    }

    def parse(self, data: bytes, options: ParseOptions = DEFAULT_PARSE_OPTIONS) -> ParsedDocument:
        from lxml import etree  # when first needed: see LAZY_LIBRARIES
        from openpyxl.utils import get_column_letter

        package = open_package(data, options)
        part = main_part(data)
        assert part is not None, "identified as a workbook by its main part"
        counted = [0]
        blocks: list[Block] = []
        try:
            with zipfile.ZipFile(package) as archive:
                workbook = _read_workbook(archive, part[0])
                reader = _SheetReader(workbook)
                for title, name in workbook.sheets:
                    with archive.open(name) as source:
                        blocks.extend(
                            _row_blocks(
                                reader.rows(source),
                                title,
                                lambda c: f"Column {get_column_letter(c + 1)}",
                                counted,
                                options.max_rows,
                            )
                        )
        except (*_UNREADABLE, etree.XMLSyntaxError):  # openpyxl parses with lxml when it can
            raise damaged() from None
        if not blocks:
            raise _no_rows("workbook")
        parsed = blocks_document(blocks, "workbook")
        parsed.media_type = self.original_media_type(data)
        return parsed
