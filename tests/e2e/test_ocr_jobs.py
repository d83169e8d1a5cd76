"""OCR as jobs in the database, with real `citegate serve` processes: one killed with kill -9
in the middle of a document leaves it to the next one started, which reads only the pages still
pending (every page stored once); two processes on one PostgreSQL share the documents; the file
the workers read a PDF from is the stored PDF, and is gone once the document is."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import free_port
from tests.e2e.test_ocr import MULTICOLUMN
from tests.e2e.test_shutdown import CitegateProcess
from tests.scans import GERMAN, SERIF, image_pdf, render_page, typed_page

STORED = re.compile(r"OCR of document (doc_\w+): page (\d+) stored by (\w+)")
HINTED = re.compile(
    r"page (\d+) stored by \w+ \(([\w+]+), rotation \d+; hint ([\w+-]+), (\d+) runs\)"
)


class OcrCitegate(CitegateProcess):
    """`citegate serve` with OCR on, one worker process, short leases, on the given database."""

    def __init__(
        self, tmp_path: Path, database_url: str, env: dict[str, str] | None = None
    ) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        super().__init__(
            tmp_path,
            ["serve", "--port", str(self.port)],
            {
                "CITEGATE_DATABASE_URL": database_url,
                "CITEGATE_OCR": "auto",
                "CITEGATE_OCR_WORKERS": "1",
                "CITEGATE_OCR_LANGUAGES": "eng",
                "CITEGATE_OCR_LEASE_SECONDS": "4",
                "CITEGATE_OCR_POLL_SECONDS": "0.5",
            }
            | (env or {}),
        )
        self.wait_until_healthy(self.base_url)

    def kill_everything(self) -> None:
        """kill -9 the service and its OCR workers (and their Tesseract), as a host dies."""
        for pid in [*_descendants(self.process.pid), self.process.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.stop()

    def stored_pages(self) -> list[tuple[str, int]]:
        return [(m[1], int(m[2])) for m in STORED.finditer(self.output)]


def _descendants(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        children = (task / "children").read_text().split() if (task / "children").exists() else []
        for child in map(int, children):
            found += [child, *_descendants(child)]
    return found


@pytest.fixture(autouse=True)
def no_keys(client: httpx.Client) -> None:
    """Every test starts with no data and no API key, as the ``client`` fixture makes it: on
    PostgreSQL the processes share the test session's database, where a key another test file
    left would make them ask for one (401)."""


@pytest.fixture
def served_database(tmp_path: Path, database_url: str) -> str:
    """The test session's PostgreSQL, or a SQLite file of the test's own (migrated by serve)."""
    if database_url.startswith("postgresql"):
        return database_url
    return f"sqlite+aiosqlite:///{tmp_path}/served/citegate.db"


@pytest.fixture
def processes() -> Iterator[list[OcrCitegate]]:
    started: list[OcrCitegate] = []
    yield started
    for process in started:
        process.kill_everything()


def _document(base_url: str, document_id: str) -> dict[str, Any]:
    response = httpx.get(f"{base_url}/v1/documents/{document_id}", timeout=30)
    assert response.status_code == 200, response.text
    document: dict[str, Any] = response.json()
    return document


def _wait(base_url: str, document_id: str, until: Any, timeout: float = 600) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while not until(document := _document(base_url, document_id)):
        assert time.monotonic() < deadline, document
        time.sleep(0.2)
    return document


def _upload(base_url: str, data: bytes, name: str = "scan.pdf") -> dict[str, Any]:
    response = httpx.post(
        f"{base_url}/v1/documents/upload", files={"file": (name, data)}, timeout=60
    )
    assert response.status_code == 202, response.text
    document: dict[str, Any] = response.json()
    return document


def test_a_killed_process_leaves_its_document_to_the_next_which_reads_each_page_once(
    tmp_path: Path, served_database: str, processes: list[OcrCitegate]
) -> None:
    scan = image_pdf([render_page(MULTICOLUMN, n, 100) for n in (1, 2, 3)])
    first = OcrCitegate(tmp_path, served_database)
    processes.append(first)
    document = _upload(first.base_url, scan)
    # Killed once it has stored a page and before it has stored them all.
    _wait(first.base_url, document["id"], lambda d: d["progress"]["pages_done"] >= 1)
    first.kill_everything()
    before = first.stored_pages()
    assert 1 <= len(before) < 3, first.output
    second = OcrCitegate(tmp_path, served_database)
    processes.append(second)
    done = _wait(second.base_url, document["id"], lambda d: d["status"] != "processing")
    assert done["status"] == "ready", done
    after = second.stored_pages()
    # Every page stored exactly once, across the two processes; the second read only the rest.
    counts = Counter(page for _, page in before + after)
    assert counts == Counter({1: 1, 2: 1, 3: 1}), (before, after)
    pages = httpx.get(f"{second.base_url}/v1/documents/{document['id']}/pages").json()["data"]
    assert [p["text_source"] for p in pages] == ["ocr"] * 3
    assert all(page["char_count"] > 100 for page in pages), pages
    assert done["char_count"] == sum(page["char_count"] for page in pages)


def test_two_processes_on_one_database_share_the_documents(
    tmp_path: Path, served_database: str, processes: list[OcrCitegate]
) -> None:
    if not served_database.startswith("postgresql"):
        pytest.skip("replicas share a PostgreSQL (CITEGATE_TEST_DATABASE_URL)")
    one, two = OcrCitegate(tmp_path, served_database), OcrCitegate(tmp_path, served_database)
    processes += [one, two]
    # Four one-page scans, all uploaded to the first: it reads one at a time (one worker),
    # and the second takes the others it has no room for.
    documents = [
        _upload(one.base_url, image_pdf([render_page(MULTICOLUMN, n, 100)]), f"{n}.pdf")
        for n in (1, 2, 3, 1)
    ]
    for document in documents:
        done = _wait(one.base_url, document["id"], lambda d: d["status"] != "processing")
        assert done["status"] == "ready", done
    readers = {owner for process in (one, two) for owner in STORED.findall(process.output)}
    by_process = [len(process.stored_pages()) for process in (one, two)]
    assert sum(by_process) == 4 and all(by_process), (by_process, readers)


def test_the_workers_read_the_stored_pdf_from_a_file_removed_once_the_document_is_ready(
    tmp_path: Path, served_database: str, processes: list[OcrCitegate]
) -> None:
    """The job writes the stored PDF to a temporary file for its workers, a piece at a time
    from the database, and makes the document whole from that file: the text pages are kept
    as the upload had them, the scanned ones read; no file is left behind in TMPDIR."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    pages = [render_page(MULTICOLUMN, n, 100) for n in (1, 2, 3)]
    scan = image_pdf(pages[:2], text_pages={2: MULTICOLUMN})  # page 3: multicolumn's page 1
    process = OcrCitegate(tmp_path, served_database, {"TMPDIR": str(temporary)})
    processes.append(process)
    document = _upload(process.base_url, scan)
    seen: list[bytes] = []

    def copy_seen(found: dict[str, Any]) -> bool:
        for path in temporary.glob("citegate-ocr-*.pdf"):
            with contextlib.suppress(FileNotFoundError):
                data = path.read_bytes()
                if found["progress"] and found["progress"]["pages_done"] >= 1:
                    seen.append(data)  # complete: its pages are being read
        return bool(found["status"] != "processing")

    done = _wait(process.base_url, document["id"], copy_seen)
    assert done["status"] == "ready", done
    assert not list(temporary.glob("citegate-ocr-*"))  # (the fork server keeps its pymp-*)
    assert seen and all(data == scan for data in seen)
    listed = httpx.get(f"{process.base_url}/v1/documents/{document['id']}/pages").json()["data"]
    assert [page["text_source"] for page in listed] == ["ocr", "ocr", "text_layer"]
    assert all(page["char_count"] > 100 for page in listed), listed
    assert done["char_count"] == sum(page["char_count"] for page in listed)


def test_each_page_is_read_first_in_the_languages_the_page_before_was_found_in(
    tmp_path: Path, served_database: str, processes: list[OcrCitegate]
) -> None:
    """A German letter of three pages: the first page is read in English and found German (two
    Tesseract runs, no OSD), and the job hands that to the next pages, which the workers read
    once each in German with English; all keep their umlauts."""
    if not SERIF.exists():
        pytest.skip("DejaVu Serif (fonts-dejavu-core) is not installed")
    process = OcrCitegate(tmp_path, served_database, {"CITEGATE_OCR_LANGUAGES": "eng+deu"})
    processes.append(process)
    document = _upload(process.base_url, image_pdf([typed_page(GERMAN)] * 3))
    done = _wait(process.base_url, document["id"], lambda d: d["status"] != "processing")
    assert done["status"] == "ready", done
    stored = {int(m[1]): (m[2], m[3], int(m[4])) for m in HINTED.finditer(process.output)}
    assert stored == {
        1: ("deu+eng", "-", 2),
        2: ("deu+eng", "deu+eng", 1),
        3: ("deu+eng", "deu+eng", 1),
    }, process.output
    chunks = httpx.get(
        f"{process.base_url}/v1/documents/{document['id']}/chunks", params={"limit": 100}
    ).json()["data"]
    pages = {chunk["page_number"] for chunk in chunks if "Größe" in chunk["text"]}
    assert pages == {1, 2, 3}, chunks
