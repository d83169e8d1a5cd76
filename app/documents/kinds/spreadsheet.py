"""Spreadsheets (.csv, .tsv, .xlsx, .xlsm): one content block per row, written as
``header: value`` lines under the sheet's first row, and sent as content blocks, so a citation
names whole rows. Each block's locator is ``{"sheet": "Q3", "rows": [14]}`` (a CSV or TSV has
no sheet: ``{"rows": [14]}``), rows numbered as a spreadsheet program shows them.

Workbooks are read by openpyxl in read-only mode, which streams each sheet's XML rather than
building the workbook in memory; every kind stops at ``max_rows`` rows with ``too_many_rows``.
"""

from __future__ import annotations

import csv
import io
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from datetime import date, datetime, time
from typing import Any, ClassVar

import openpyxl
from openpyxl.utils import get_column_letter

from app.documents.kinds.base import DEFAULT_PARSE_OPTIONS, ParsedDocument, ParseOptions
from app.documents.kinds.converted import Block, BlocksKind, blocks_document
from app.documents.kinds.ooxml import OfficeKind, damaged, open_package
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
    rows: Iterable[Sequence[Any]],
    sheet: str | None,
    column_name: Any,
    counted: list[int],
    max_rows: int,
) -> Iterator[Block]:
    """A block per row that has a value, after the first such row (the header). ``counted``
    holds the rows read so far in the whole file, for the limit."""
    header: list[str] | None = None
    for number, row in enumerate(rows, start=1):
        cells = [_cell_text(value) for value in row]
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


class _DelimitedKind(BlocksKind):
    delimiter: ClassVar[str]
    trusts_declared_text = True
    content_schema: ClassVar[dict[str, Any]] = {"type": "string"}

    def parse(self, data: bytes, options: ParseOptions = DEFAULT_PARSE_OPTIONS) -> ParsedDocument:
        text, encoding = decode_text(data, options.charset)
        reader = csv.reader(io.StringIO(text, newline=""), delimiter=self.delimiter)
        try:
            blocks = list(
                _row_blocks(reader, None, lambda c: f"Column {c + 1}", [0], options.max_rows)
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
        package = open_package(data, options)
        try:
            workbook = openpyxl.load_workbook(
                package, read_only=True, data_only=True, keep_links=False
            )
        except (zipfile.BadZipFile, KeyError, ValueError, TypeError, OSError, EOFError):
            raise damaged() from None
        try:
            counted = [0]
            blocks: list[Block] = []
            for sheet in workbook.worksheets:
                rows = sheet.iter_rows(min_row=1, values_only=True)
                blocks.extend(
                    _row_blocks(
                        rows,
                        sheet.title,
                        lambda c: f"Column {get_column_letter(c + 1)}",
                        counted,
                        options.max_rows,
                    )
                )
        except (zipfile.BadZipFile, KeyError, ValueError, TypeError, EOFError):
            raise damaged() from None
        finally:
            workbook.close()
        if not blocks:
            raise _no_rows("workbook")
        parsed = blocks_document(blocks, "workbook")
        parsed.media_type = self.original_media_type(data)
        return parsed
