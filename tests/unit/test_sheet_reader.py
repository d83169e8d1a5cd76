"""Citegate's worksheet reader against openpyxl's: the same text for every cell, whatever the
value's type, from workbooks XlsxWriter writes (shared strings, and inline strings in its
constant-memory mode); and the shapes of sheet XML that XlsxWriter never writes, by hand."""

from __future__ import annotations

import io
import zipfile
from datetime import date, datetime, time
from typing import Any

import openpyxl
import pytest
import xlsxwriter

from app.documents.kinds import kind_named
from app.documents.kinds.ooxml import main_part
from app.documents.kinds.spreadsheet import _cell_text, _read_workbook, _SheetReader
from app.errors import ErrorCode, InvalidDocument

_SHEET_MAIN = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"


def _varied_workbook(constant_memory: bool) -> bytes:
    buffer = io.BytesIO()
    book = xlsxwriter.Workbook(buffer, {"in_memory": True, "constant_memory": constant_memory})
    day = book.add_format({"num_format": "yyyy-mm-dd"})
    moment = book.add_format({"num_format": "yyyy-mm-dd hh:mm:ss"})
    clock = book.add_format({"num_format": "hh:mm"})
    duration = book.add_format({"num_format": "[h]:mm:ss"})
    bold = book.add_format({"bold": True})
    sheet = book.add_worksheet("Mixed")
    rows: list[list[Any]] = [
        ["Name", "Amount", "When", "Flag", "Note"],
        ["  spaced \n out  ", 42, date(2024, 2, 29), True, "Ünïcödé ✓"],
        ["big", 1e21, datetime(1999, 12, 31, 23, 59, 58), False, None],
        ["small", -0.000123, time(7, 30), None, "x"],
        ["exact", 3.0, None, None, 12345678901234567890],
    ]
    formats = [None, None, None, None, None]
    for number, row in enumerate(rows):
        for column, value in enumerate(row):
            if value is None:
                continue
            if isinstance(value, datetime):
                sheet.write_datetime(number, column, value, moment)
            elif isinstance(value, date):
                sheet.write_datetime(number, column, value, day)
            elif isinstance(value, time):
                sheet.write_datetime(number, column, value, clock)
            else:
                sheet.write(number, column, value, formats[column])
    sheet.write_number(5, 1, 1.5, duration)  # a duration: openpyxl reads a timedelta
    sheet.write_formula(6, 1, "=B2*2", None, 84)
    sheet.write_formula(6, 2, '="a"&"b"', None, "ab")
    sheet.write_formula(6, 3, "=1/0", None, "#DIV/0!")
    sheet.write_rich_string(7, 0, "plain ", bold, "bold", " tail")
    sheet.write(20, 7, "far away")  # a gap of rows, and a column past the header's
    book.close()
    return buffer.getvalue()


def _openpyxl_cells(data: bytes) -> dict[tuple[str, int, int], str]:
    """Every non-empty cell's text as openpyxl reads the workbook."""
    book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    cells = {}
    for sheet in book.worksheets:
        for number, row in enumerate(sheet.iter_rows(values_only=True), start=1):
            for column, value in enumerate(row):
                if text := _cell_text(value):
                    cells[sheet.title, number, column] = text
    book.close()
    return cells


def _our_cells(data: bytes) -> dict[tuple[str, int, int], str]:
    cells = {}
    part = main_part(data)
    assert part is not None
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        workbook = _read_workbook(archive, part[0])
        reader = _SheetReader(workbook)
        for title, name in workbook.sheets:
            with archive.open(name) as source:
                for number, row in reader.rows(source):
                    for column, text in enumerate(row):
                        if text:
                            cells[title, number, column] = text
    return cells


@pytest.mark.parametrize("constant_memory", [False, True], ids=["shared", "inline"])
def test_every_cell_reads_as_openpyxl_reads_it(constant_memory: bool) -> None:
    data = _varied_workbook(constant_memory)
    expected = _openpyxl_cells(data)
    assert expected["Mixed", 2, 2] == "2024-02-29T00:00:00"
    assert expected["Mixed", 6, 1] == "1 day, 12:00:00"
    assert expected["Mixed", 8, 0] == "plain bold tail"
    assert list(_our_cells(data).items()) == list(expected.items())


def _several_sheets(date_1904: bool) -> bytes:
    """Two worksheets (the second hidden) with a chart sheet between them, whose parts are
    numbered apart from the sheets' places."""
    buffer = io.BytesIO()
    book = xlsxwriter.Workbook(buffer, {"in_memory": True, "date_1904": date_1904})
    day = book.add_format({"num_format": "d mmm yyyy"})
    orders = book.add_worksheet("Orders")
    orders.write_row(0, 0, ["Order", "Due"])
    orders.write_number(1, 0, 7)
    orders.write_datetime(1, 1, datetime(2024, 3, 1), day)
    chart = book.add_chart({"type": "line"})
    chart.add_series({"values": "=Orders!$A$2:$A$2"})
    book.add_chartsheet("Trend").set_chart(chart)
    notes = book.add_worksheet("Notes")
    notes.write_column(0, 0, ["Note", "Ship by sea"])
    notes.hide()
    book.close()
    return buffer.getvalue()


@pytest.mark.parametrize("date_1904", [False, True], ids=["1900", "1904"])
def test_worksheets_come_in_the_workbooks_order_whatever_their_parts_are_named(
    date_1904: bool,
) -> None:
    data = _several_sheets(date_1904)
    expected = _openpyxl_cells(data)
    assert expected["Orders", 2, 1] == "2024-03-01T00:00:00"
    assert {sheet for sheet, _, _ in expected} == {"Orders", "Notes"}
    assert list(_our_cells(data).items()) == list(expected.items())


def _package(
    sheet_xml: str, target: str = "worksheets/sheet1.xml", *, missing_sheet: bool = False
) -> bytes:
    """A one-sheet .xlsx written by hand, with no styles part: the sheet's part is ``target``
    (from the workbook's folder, or from the package's root after a "/"); ``missing_sheet``
    lists a second sheet whose part is not in the package."""
    buffer = io.BytesIO()
    relationships = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(
            "[Content_Types].xml",
            '<?xml version="1.0" encoding="UTF-8"?>'
            '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            '<Default Extension="rels" '
            'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
            '<Default Extension="xml" ContentType="application/xml"/>'
            '<Override PartName="/xl/workbook.xml" ContentType="application/'
            'vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/>'
            '<Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/'
            'vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/></Types>',
        )
        archive.writestr(
            "_rels/.rels",
            '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
            f'<Relationship Id="rId1" Type="{relationships}/officeDocument" '
            'Target="xl/workbook.xml"/></Relationships>',
        )
        archive.writestr(
            "xl/workbook.xml",
            f'<workbook xmlns="{_SHEET_MAIN}" xmlns:r="{relationships}"><sheets>'
            '<sheet name="Hand" sheetId="1" r:id="rId1"/>'
            + ('<sheet name="Gone" sheetId="2" r:id="rId2"/>' if missing_sheet else "")
            + "</sheets></workbook>",
        )
        archive.writestr(
            "xl/_rels/workbook.xml.rels",
            '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
            f'<Relationship Id="rId1" Type="{relationships}/worksheet" Target="{target}"/>'
            f'<Relationship Id="rId2" Type="{relationships}/worksheet" '
            'Target="worksheets/gone.xml"/></Relationships>',
        )
        name = target[1:] if target.startswith("/") else f"xl/{target}"
        archive.writestr(name, sheet_xml)
    return buffer.getvalue()


def _texts(data: bytes) -> list[str]:
    parsed = kind_named("xlsx").parse(data)
    return [parsed.text[chunk.start : chunk.end] for chunk in parsed.chunks]


def test_a_prefixed_sheet_with_no_references_reads_by_position() -> None:
    # Rows and cells may leave out their "r"; the namespace may come with a prefix; an inline
    # string's phonetic reading (rPh) is not its text.
    data = _package(
        f'<x:worksheet xmlns:x="{_SHEET_MAIN}"><x:sheetData>'
        '<x:row><x:c t="inlineStr"><x:is><x:t>City</x:t></x:is></x:c>'
        '<x:c t="inlineStr"><x:is><x:t>People</x:t></x:is></x:c></x:row>'
        '<x:row><x:c t="inlineStr"><x:is><x:r><x:t>Tō</x:t></x:r><x:r><x:t>kyō</x:t></x:r>'
        "<x:rPh><x:t>トウキョウ</x:t></x:rPh></x:is></x:c><x:c><x:v>37400068</x:v></x:c></x:row>"
        '<x:row r="5"><x:c r="B5"><x:v>2.50</x:v></x:c></x:row>'
        "<x:row><x:c/><x:c><x:v>1E3</x:v></x:c></x:row>"
        "</x:sheetData></x:worksheet>"
    )
    assert _texts(data) == [
        "Sheet Hand, row 2\nCity: Tōkyō\nPeople: 37400068\n\n",
        "Sheet Hand, row 5\nPeople: 2.5\n\n",
        "Sheet Hand, row 6\nPeople: 1000\n\n",
    ]


def test_a_sheet_is_found_through_the_workbooks_relationships() -> None:
    # Its part named as no writer names it, from the package's root; a listed sheet whose part
    # is missing is left out, as openpyxl leaves it.
    sheet_xml = (
        f'<worksheet xmlns="{_SHEET_MAIN}"><sheetData>'
        '<row r="1"><c r="A1" t="inlineStr"><is><t>Item</t></is></c></row>'
        '<row r="2"><c r="A2" t="inlineStr"><is><t>Pens</t></is></c></row>'
        "</sheetData></worksheet>"
    )
    data = _package(sheet_xml, "/xl/data/the pens.xml", missing_sheet=True)
    assert _texts(data) == ["Sheet Hand, row 2\nItem: Pens\n\n"]


def test_every_row_is_read_whatever_the_dimension_says() -> None:
    # Some writers put A1 as every sheet's dimension; the rows past it are the sheet's all the
    # same. A cell without a style has the default style (none that makes a number a date).
    data = _package(
        f'<worksheet xmlns="{_SHEET_MAIN}"><dimension ref="A1"/><sheetData>'
        '<row r="1"><c r="A1" t="inlineStr"><is><t>Item</t></is></c>'
        '<c r="B1" t="inlineStr"><is><t>Count</t></is></c></row>'
        '<row r="2.0"><c r="A2" t="str"><v>Pens</v></c><c r="B2"><v>12</v></c></row>'
        '<row r="3"><c r="A3"><is><t>not inline: no text</t></is></c><c r="B3"><v>7</v></c>'
        "</row></sheetData></worksheet>"
    )
    assert _texts(data) == [
        "Sheet Hand, row 2\nItem: Pens\nCount: 12\n\n",
        "Sheet Hand, row 3\nCount: 7\n\n",
    ]


@pytest.mark.parametrize(
    "sheet_xml",
    [
        # An entity declaration (the start of a "billion laughs"): no worksheet has one.
        f'<!DOCTYPE worksheet [<!ENTITY a "aaaa">]><worksheet xmlns="{_SHEET_MAIN}">'
        '<sheetData><row><c t="str"><v>&a;</v></c></row></sheetData></worksheet>',
        f'<worksheet xmlns="{_SHEET_MAIN}"><sheetData><row><c><v>1</v></c>',  # cut short
        f'<worksheet xmlns="{_SHEET_MAIN}"><dimension ref="A1"/><sheetData><row><c><v>1</v>',
        f'<worksheet xmlns="{_SHEET_MAIN}"><sheetData><row><c t="s"><v>9</v></c></row>'
        "</sheetData></worksheet>",  # a shared string that is not there
    ],
    ids=["entity", "truncated", "truncated-past-dimension", "missing-shared-string"],
)
def test_a_broken_sheet_is_an_invalid_office_file(sheet_xml: str) -> None:
    with pytest.raises(InvalidDocument) as raised:
        kind_named("xlsx").parse(_package(sheet_xml))
    assert raised.value.code == ErrorCode.OFFICE_FILE_INVALID


def _with_broken(data: bytes, part: str) -> bytes:
    """The package with ``part`` replaced by XML cut short."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        for member in source.infolist():
            target.writestr(member, b"<broken" if member.filename == part else source.read(member))
    return out.getvalue()


@pytest.mark.parametrize(
    "part",
    [
        "xl/workbook.xml",
        "xl/_rels/workbook.xml.rels",
        "xl/styles.xml",
        "xl/sharedStrings.xml",
        "xl/worksheets/sheet1.xml",
    ],
)
def test_a_broken_part_the_rows_need_is_an_invalid_office_file(part: str) -> None:
    data = _with_broken(_varied_workbook(constant_memory=False), part)
    with pytest.raises(InvalidDocument) as raised:
        kind_named("xlsx").parse(data)
    assert raised.value.code == ErrorCode.OFFICE_FILE_INVALID


@pytest.mark.parametrize("part", ["docProps/core.xml", "docProps/app.xml", "xl/theme/theme1.xml"])
def test_a_broken_part_the_rows_do_not_need_is_left_unread(part: str) -> None:
    data = _varied_workbook(constant_memory=False)
    assert _texts(_with_broken(data, part)) == _texts(data)
