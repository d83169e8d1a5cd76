"""Word, HTML, Markdown, spreadsheets, slides and text in other encodings, through real HTTP
on the configured database: each is stored with its original bytes, converted to the text the
upstream cites, and a question through the local engine cites the right paragraph, row or
slide."""

from __future__ import annotations

import csv
import io
import zipfile
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.settings import Settings
from tests.conftest import ServedApp, count_rows
from tests.e2e.test_documents import NOTHING, all_chunks, assert_problem, assert_tiles
from tests.office_files import (
    encrypted_office_file,
    slides_file,
    word_bomb,
    word_file,
    workbook_file,
)

DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"


def upload(
    client: httpx.Client, name: str, data: bytes, media_type: str = "application/octet-stream"
) -> httpx.Response:
    return client.post("/v1/documents/upload", files={"file": (name, data, media_type)})


def stored(client: httpx.Client, name: str, data: bytes, media_type: str = "") -> dict[str, Any]:
    response = upload(client, name, data, media_type or "application/octet-stream")
    assert response.status_code == 201, response.text
    document: dict[str, Any] = response.json()
    assert document["citable"] is True
    return document


def assert_original_kept(client: httpx.Client, document: dict[str, Any], data: bytes) -> None:
    content = client.get(f"/v1/documents/{document['id']}/content")
    assert content.status_code == 200
    assert content.content == data
    assert content.headers["content-type"].startswith(document["media_type"])
    assert content.headers["content-security-policy"] == "sandbox"


def cited(client: httpx.Client, question: str, document_id: str) -> list[dict[str, Any]]:
    """The citations of an answer through the local engine, each checked against the store."""
    response = client.post(
        "/v1/answers", json={"question": question, "document_ids": [document_id]}
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    citations = [c for segment in answer["segments"] for c in segment["citations"]]
    assert citations, answer["text"]
    chunks = all_chunks(client, document_id)
    text = "".join(chunk["text"] for chunk in chunks)
    for citation in citations:
        assert citation["verified"] is True, citation
        span = citation["span"]
        assert text[span["start_char"] : span["end_char"]] == citation["cited_text"]
        first = chunks[span["chunk_indices"][0]]
        if "rows" in (first["locator"] or {}):
            rows = [r for i in span["chunk_indices"] for r in chunks[i]["locator"]["rows"]]
            assert span["locator"] == {**first["locator"], "rows": rows}
        else:
            assert span["locator"] == first["locator"]
    return citations


def test_word_paragraphs_headings_lists_and_tables(client: httpx.Client) -> None:
    data = word_file(
        [
            ("Heading1", "Warehouses"),
            "",
            "The warehouse in Lyon stores three hundred bicycles. It opened in 2019.",
            ("ListBullet", "Porto keeps spare wheels."),
            [["City", "Staff"], ["Lyon", "Twelve people"]],
            "Deliveries leave on Tuesdays &amp; Fridays.",
        ]
    )
    document = stored(client, "warehouses.docx", data)
    assert (document["kind"], document["media_type"]) == ("docx", DOCX)
    assert_original_kept(client, document, data)
    chunks = all_chunks(client, document["id"])
    text = assert_tiles(chunks, document["char_count"])
    assert text == (
        "Warehouses\n\nThe warehouse in Lyon stores three hundred bicycles. It opened in 2019."
        "\n\n• Porto keeps spare wheels.\n\nCity | Staff\n\nLyon | Twelve people\n\n"
        "Deliveries leave on Tuesdays &amp; Fridays.\n\n"
    )
    assert [c["locator"] for c in chunks] == [
        {"paragraph": 1},
        {"paragraph": 3},
        {"paragraph": 3},
        {"paragraph": 4},
        {"table": 1, "row": 1},
        {"table": 1, "row": 2},
        {"paragraph": 5},
    ]
    citations = cited(client, "How many bicycles does the warehouse in Lyon store?", document["id"])
    assert citations[0]["type"] == "char_location"
    assert {"paragraph": 3} in [c["span"]["locator"] for c in citations]


def test_a_macro_enabled_word_file_is_stored_and_its_macros_never_run(
    client: httpx.Client,
) -> None:
    data = word_file(["Macros are only bytes here."], macro=True)
    document = stored(client, "report.docm", data)
    assert document["kind"] == "docx"
    assert document["media_type"] == "application/vnd.ms-word.document.macroEnabled.12"
    assert_original_kept(client, document, data)


def test_html_visible_text_only_in_its_declared_charset(client: httpx.Client) -> None:
    page = (
        "<!DOCTYPE html><html><head><meta charset='windows-1252'><title>T</title>"
        "<style>p { color: red }</style><script>var secret = 'never';</script></head><body>"
        "<h1>Caf\u00e9 prices</h1><p>An espresso costs two euros &amp; fifty cents.</p>"
        "<div hidden>Hidden offer.</div><p style='display: none'>Also hidden.</p>"
        "<ul><li>Tea is free on Mondays.</li></ul>"
        "<table><tr><th>Drink</th><th>Price</th></tr><tr><td>Latte</td><td>3</td></tr></table>"
        "<p><img src='x.png' alt='A cup of coffee'> Served hot.</p>"
        "<noscript>Enable scripts.</noscript><template><p>Template.</p></template></body></html>"
    ).encode("cp1252")
    document = stored(client, "cafe.html", data=page)
    assert (document["kind"], document["media_type"]) == ("html", "text/html; charset=windows-1252")
    assert document["warnings"] == []
    assert_original_kept(client, document, page)
    text = assert_tiles(all_chunks(client, document["id"]), document["char_count"])
    assert text == (
        "Caf\u00e9 prices\n\nAn espresso costs two euros & fifty cents.\n\n"
        "Tea is free on Mondays.\n\nDrink | Price\n\nLatte | 3\n\n"
        "A cup of coffee Served hot.\n\n"
    )
    citations = cited(client, "How much does an espresso cost in euros?", document["id"])
    assert {"paragraph": 2} in [c["span"]["locator"] for c in citations]


LODZ = "\u0141\u00f3d\u017a costs \u20ac3 by train."  # UTF-8's "Ł" holds 0x81, not cp1252


@pytest.mark.parametrize(
    "data",
    [
        b"\xef\xbb\xbf<!DOCTYPE html><meta charset='windows-1252'><p>" + LODZ.encode() + b"</p>",
        b"<!DOCTYPE html><meta charset='windows-1252'><p>" + LODZ.encode() + b"</p>",
        b'<!DOCTYPE html><meta http-equiv="Content-Type" content="text/html; charset=iso-8859-1">'
        b"<p>" + LODZ.encode() + b"</p>",
        f"<!DOCTYPE html><meta charset='utf-8'><p>{LODZ}</p>".encode("utf-16"),
    ],
    ids=["utf-8 BOM", "utf-8", "utf-8, http-equiv", "utf-16 BOM, meta utf-8"],
)
def test_html_bytes_that_prove_their_encoding_win_over_the_meta_with_a_warning(
    client: httpx.Client, data: bytes
) -> None:
    document = stored(client, "lodz.html", data)
    assert document["kind"] == "html"
    assert document["warnings"] == ["html_meta_charset_ignored"]
    assert_original_kept(client, document, data)
    assert all_chunks(client, document["id"])[0]["text"] == LODZ + "\n\n"
    again = upload(client, "lodz.html", data)
    assert (again.status_code, again.json()["warnings"]) == (200, ["html_meta_charset_ignored"])
    assert client.get(f"/v1/documents/{document['id']}").json()["warnings"] == [
        "html_meta_charset_ignored"
    ]


def test_xhtml_is_read_from_its_bytes_whatever_its_name(client: httpx.Client) -> None:
    page = (
        b'<?xml version="1.0" encoding="UTF-8"?>\n<html xmlns="http://www.w3.org/1999/xhtml">'
        b"<body><p>Owls hunt at night.</p></body></html>"
    )
    document = stored(client, "owls.txt", page, "text/plain")
    assert document["kind"] == "html"
    assert all_chunks(client, document["id"])[0]["text"] == "Owls hunt at night.\n\n"


def test_markdown_is_stored_as_its_text_with_headings_ending_chunks(client: httpx.Client) -> None:
    data = (
        b"# Garden\nRoses bloom in June\n\n## Tools\n- A rake for the leaves.\n"
        b"- A spade for the beds.\nThe shed is locked at night.\n"
    )
    document = stored(client, "garden.md", data)
    assert (document["kind"], document["media_type"]) == ("markdown", "text/markdown")
    assert_original_kept(client, document, data)
    chunks = all_chunks(client, document["id"])
    assert assert_tiles(chunks, document["char_count"]) == data.decode()
    assert [(c["text"], c["locator"]) for c in chunks] == [
        ("# Garden\n", {"line": 1}),
        ("Roses bloom in June\n\n", {"line": 2}),
        ("## Tools\n", {"line": 4}),
        ("- A rake for the leaves.\n", {"line": 5}),
        ("- A spade for the beds.\n", {"line": 6}),
        ("The shed is locked at night.\n", {"line": 7}),
    ]
    citations = cited(client, "Is the shed locked at night?", document["id"])
    assert {"line": 7} in [c["span"]["locator"] for c in citations]


@pytest.mark.parametrize(
    ("name", "delimiter", "kind"), [("stock.csv", ",", "csv"), ("stock.tsv", "\t", "tsv")]
)
def test_csv_and_tsv_rows_are_blocks(
    client: httpx.Client, name: str, delimiter: str, kind: str
) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter=delimiter)
    writer.writerows(
        [["Fruit", "Stock", "Note"], ["Apples", "40", ""], ["Pears", "7", 'bruised, "old"']]
    )
    data = buffer.getvalue().encode()
    document = stored(client, name, data)
    assert document["kind"] == kind
    assert_original_kept(client, document, data)
    chunks = all_chunks(client, document["id"])
    assert [(c["text"], c["block_index"], c["locator"]) for c in chunks] == [
        ("Row 2\nFruit: Apples\nStock: 40\n\n", 0, {"rows": [2]}),
        ('Row 3\nFruit: Pears\nStock: 7\nNote: bruised, "old"\n\n', 1, {"rows": [3]}),
    ]
    citations = cited(client, "How many pears are in stock?", document["id"])
    assert citations[0]["type"] == "content_block_location"
    assert {"rows": [3]} in [c["span"]["locator"] for c in citations]


def test_a_workbook_is_read_sheet_by_sheet_row_by_row(client: httpx.Client) -> None:
    data = workbook_file(
        {
            "Q2": [["Region", "Revenue"], ["North", 100]],
            "Q3": [
                [None, None],
                ["Region", "Revenue", "Comment"],
                ["North", 120.0, None],
                [None, None, None],
                ["South", 95.5, "Harbour strike in the south"],
            ],
        }
    )
    document = stored(client, "sales.xlsx", data)
    assert (document["kind"], document["media_type"]) == ("xlsx", XLSX)
    assert_original_kept(client, document, data)
    chunks = all_chunks(client, document["id"])
    assert [(c["text"], c["locator"]) for c in chunks] == [
        ("Sheet Q2, row 2\nRegion: North\nRevenue: 100\n\n", {"sheet": "Q2", "rows": [2]}),
        ("Sheet Q3, row 3\nRegion: North\nRevenue: 120\n\n", {"sheet": "Q3", "rows": [3]}),
        (
            "Sheet Q3, row 5\nRegion: South\nRevenue: 95.5\n"
            "Comment: Harbour strike in the south\n\n",
            {"sheet": "Q3", "rows": [5]},
        ),
    ]
    citations = cited(client, "What happened with the harbour strike in the south?", document["id"])
    assert {"sheet": "Q3", "rows": [5]} in [c["span"]["locator"] for c in citations]


def test_slides_are_blocks_with_title_text_and_notes(client: httpx.Client) -> None:
    data = slides_file(
        [
            ("Roadmap", "Ship the mobile app in spring.", ""),
            ("Budget", "Marketing gets forty thousand euros.", "Ask finance about travel."),
        ]
    )
    document = stored(client, "plan.pptx", data)
    assert (document["kind"], document["media_type"]) == ("pptx", PPTX)
    assert_original_kept(client, document, data)
    chunks = all_chunks(client, document["id"])
    assert [(c["text"], c["locator"]) for c in chunks] == [
        ("Slide 1: Roadmap\nShip the mobile app in spring.\n\n", {"slide": 1}),
        (
            "Slide 2: Budget\nMarketing gets forty thousand euros.\nNotes: Ask finance about "
            "travel.\n\n",
            {"slide": 2},
        ),
    ]
    citations = cited(client, "How many euros does marketing get in the budget?", document["id"])
    assert {"slide": 2} in [c["span"]["locator"] for c in citations]


@pytest.mark.parametrize(
    ("data", "media_type", "charset"),
    [
        ("Les caf\u00e9s ouvrent \u00e0 sept heures.".encode("utf-16"), "text/plain", "utf-16"),
        ("Z\u00fcrich hat viele Br\u00fccken.".encode("utf-32"), "text/plain", "utf-32"),
        (
            "Caf\u00e9 cr\u00e8me costs four francs.".encode("latin-1"),
            "text/plain; charset=ISO-8859-1",
            "iso-8859-1",
        ),
    ],
)
def test_text_in_other_encodings_is_decoded(
    client: httpx.Client, data: bytes, media_type: str, charset: str
) -> None:
    document = stored(client, "note.txt", data, media_type)
    assert (document["kind"], document["media_type"]) == ("text", f"text/plain; charset={charset}")
    assert_original_kept(client, document, data)
    text = assert_tiles(all_chunks(client, document["id"]), document["char_count"])
    assert text == data.decode(charset).removeprefix("\ufeff")
    citations = cited(client, text.split()[1] + "?", document["id"])
    assert citations[0]["span"]["locator"] is None


def _script_page() -> bytes:
    line = b"console.log('never shown to anyone');\n"
    return b"<html><body><script>" + line * (30_000_000 // len(line)) + b"</script></body></html>"


BAD_INPUT = [
    ("bomb.docx", lambda: word_bomb(130 * 1024 * 1024), 422, "unpacked_too_large"),
    ("secret.docx", encrypted_office_file, 422, "document_encrypted"),
    ("cut.docx", lambda: word_file(["Some text."] * 50)[:-200], 422, "office_file_invalid"),
    ("cut.xlsx", lambda: workbook_file({"S": [["a"], [1]]})[:300], 422, "office_file_invalid"),
    ("script.html", _script_page, 422, "empty_document"),
    ("empty.xlsx", lambda: workbook_file({"Empty": []}), 422, "empty_document"),
    ("header.xlsx", lambda: workbook_file({"S": [["Only", "a", "header"]]}), 422, "empty_document"),
    ("blank.pptx", lambda: slides_file([("", "", "")]), 422, "empty_document"),
    (
        "legacy.doc",
        lambda: b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(2048),
        415,
        "unsupported_media_type",
    ),
    ("photos.zip", lambda: _plain_zip(), 415, "unsupported_media_type"),
    ("latin1.md", lambda: "Caf\u00e9.".encode("latin-1"), 422, "text_not_utf8"),
]


def _plain_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("photo.txt", "not an office file")
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("name", "make", "status", "code"), BAD_INPUT, ids=[b[0] for b in BAD_INPUT]
)
def test_bad_input_is_a_clear_problem_and_stores_nothing(
    client: httpx.Client, database_url: str, name: str, make: Any, status: int, code: str
) -> None:
    assert_problem(upload(client, name, make()), status, code)
    assert count_rows(database_url) == NOTHING


@pytest.fixture(scope="module")
def few_rows(settings: Settings) -> Iterator[httpx.Client]:
    app = ServedApp(settings.model_copy(update={"max_sheet_rows": 3}))
    with app, httpx.Client(base_url=app.base_url, timeout=60) as http:
        yield http


@pytest.mark.parametrize("name", ["big.xlsx", "big.csv"])
def test_a_spreadsheet_past_the_row_limit_is_refused(
    client: httpx.Client, few_rows: httpx.Client, database_url: str, name: str
) -> None:
    rows: list[list[Any]] = [["n"], *[[n] for n in range(4)]]
    if name.endswith(".xlsx"):
        data = workbook_file({"S": rows[:3], "T": [["n"], [7], [8]]})
    else:
        data = "\n".join(str(row[0]) for row in rows).encode()
    body = assert_problem(upload(few_rows, name, data), 422, "too_many_rows")
    assert "3 rows" in body["detail"]
    assert count_rows(database_url) == NOTHING
