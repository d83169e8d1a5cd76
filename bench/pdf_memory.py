"""Memory of the PDF work an OCR'd scan goes through, step by step, each in a process of its
own: its text layers parsed (as an upload and an OCR job's end parse it) from its bytes and from
its file, and its pages rendered one after another as an OCR worker renders them; and the CPU a
long text PDF's parse takes. Prints figures; asserts nothing.

    .venv/bin/python bench/pdf_memory.py [--scan-pages N]

The scan is multicolumn.pdf's page 1 rendered at 300 dpi, N times (85 MB for 100 pages, as
bench/ocr.py makes it). Each figure is the process's peak resident size (VmHWM) above its
resident size before the step (the PDF's bytes, when the step is given them, counted before).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import ROOT

sys.path.insert(0, str(ROOT))  # tests.scans: the scans the OCR tests make

from app.documents.kinds import PDF
from app.documents.ocr import render
from tests.scans import image_pdf, render_page

CORPUS = ROOT / "tests" / "fixtures" / "pdf"


def memory() -> tuple[float, float]:
    """This process's resident size and its peak, MiB."""
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024


def step(name: str, path: Path, pages: int) -> str:
    """One step, in this process (a new one): its figure."""
    if name == "bytes":
        data = path.read_bytes()
        before = memory()[0]
        PDF.parse(data)
        return f"text layers parsed from its bytes: peak +{memory()[1] - before:.0f} MiB"
    if name == "file":
        before = memory()[0]
        PDF.parse(path)
        return f"text layers parsed from its file: peak +{memory()[1] - before:.0f} MiB"
    before = memory()[0]
    peaks = []
    for number in range(1, pages + 1):
        render(str(path), number)
        if number in (1, 10, pages):
            peaks.append(f"+{memory()[1] - before:.0f} MiB after {number}")
    return f"pages rendered at 300 dpi one after another, as a worker does: peak {', '.join(peaks)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scan-pages", type=int, default=100)
    parser.add_argument("--step", help=argparse.SUPPRESS)
    parser.add_argument("--scan", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:
        print(step(args.step, Path(args.scan), args.scan_pages))
        return
    page = render_page((CORPUS / "multicolumn.pdf").read_bytes(), 1, 300)
    with tempfile.TemporaryDirectory(prefix="citegate-bench-") as directory:
        path = Path(directory) / "scan.pdf"
        path.write_bytes(image_pdf([page] * args.scan_pages))
        print(f"a {args.scan_pages}-page scan, {path.stat().st_size / 1e6:.0f} MB:")
        for name in ("bytes", "file", "render"):
            command = [sys.executable, __file__, "--step", name, "--scan", str(path)]
            command += ["--scan-pages", str(args.scan_pages)]
            run = subprocess.run(command, capture_output=True, text=True, check=True)
            print("  " + run.stdout.strip())
    text_pdf = CORPUS / "GeoTopo-komprimiert.pdf"
    data = text_pdf.read_bytes()
    cpu = []
    for _ in range(5):
        started = time.process_time()
        parsed = PDF.parse(data)
        cpu.append(time.process_time() - started)
    print(f"{text_pdf.name} ({parsed.page_count} pages) parsed: {min(cpu):.3f} CPU s (best of 5)")


if __name__ == "__main__":
    main()
