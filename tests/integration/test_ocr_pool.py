"""The OCR workers read pages on the CPU the service leaves: they and the Tesseract processes they
start run under Linux's SCHED_IDLE, so a request of the service is never queued behind OCR; and
a worker gives back the memory a page's render freed before Tesseract reads the page."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.documents.ocr import OcrPool
from tests.scans import image_pdf, render_page

FIXTURES = Path(__file__).parents[1] / "fixtures" / "pdf"

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="SCHED_IDLE is Linux's")


def descendants(root: int) -> dict[int, str]:
    """The processes under ``root`` (any depth), with their command names, from /proc."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # ended meanwhile
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        parents[int(entry.name)] = int(rest.split()[1])
        names[int(entry.name)] = name
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = names[pid]
                frontier.append(pid)
    return found


def policies(pids: dict[int, str]) -> dict[str, set[int]]:
    """The scheduling policy of each process, by command name (processes that ended: left)."""
    seen: dict[str, set[int]] = {}
    for pid, name in pids.items():
        try:
            seen.setdefault(name, set()).add(os.sched_getscheduler(pid))
        except OSError:
            continue
    return seen


async def test_workers_and_their_tesseract_run_under_sched_idle(tmp_path: Path) -> None:
    scan = tmp_path / "scan.pdf"
    scan.write_bytes(image_pdf([render_page((FIXTURES / "multicolumn.pdf").read_bytes(), 1)]))
    pool = OcrPool(1)
    try:
        reading = asyncio.ensure_future(pool.read(str(scan), 1, "eng"))
        seen: dict[str, set[int]] = {}
        while not reading.done():
            for name, found in policies(descendants(os.getpid())).items():
                seen.setdefault(name, set()).update(found)
            await asyncio.sleep(0.02)
        page = await reading
    finally:
        await asyncio.to_thread(pool.close)
    assert len(page.text.split()) > 100  # the page was read
    assert seen.get("tesseract") == {os.SCHED_IDLE}, seen
    # the worker itself (a Python process other than the fork server, which the pool starts
    # at normal priority and which only forks)
    python = {name: found for name, found in seen.items() if name.startswith("python")}
    assert any(os.SCHED_IDLE in found for found in python.values()), seen
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the service's own process is untouched


RENDERS = """
import sys
from app.documents.ocr import give_back_freed_memory, render

def resident() -> int:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) // 1024

for number in (1, 2, 3):
    picture = render(sys.argv[1], number)
kept = resident()
give_back_freed_memory()
print(kept, resident())
"""


def test_a_worker_gives_back_what_its_renders_freed(tmp_path: Path) -> None:
    # glibc keeps what a render freed (PDFium's decoded scan) for reuse: without the trim, a
    # worker stays at its render's peak while Tesseract, another process, reads the page.
    page = render_page((FIXTURES / "multicolumn.pdf").read_bytes(), 1)
    scan = tmp_path / "scan.pdf"
    scan.write_bytes(image_pdf([page, page, page]))
    done = subprocess.run(
        [sys.executable, "-c", RENDERS, str(scan)], capture_output=True, text=True, check=True
    )
    kept, after = (int(value) for value in done.stdout.split())
    assert kept - after >= 20, (kept, after)  # MiB given back
