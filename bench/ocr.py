"""OCR: seconds per page per core at 300 dpi, character error rate (CER) at 300 dpi and at
150 dpi with noise, a scan of N pages (100 by default) read end to end by `citegate serve`, the
peak RSS of the service and of its OCR workers, and the p95 latency of other requests while OCR
runs against before. Prints figures; asserts nothing.

    .venv/bin/python bench/ocr.py [--database-url URL] [--pages N] [--scan-pages N] [--skip-pages]
        [--paired SECONDS]

The scans are the repository's own text PDFs (tests/fixtures/pdf) rendered by PDFium into
image-only pages, so the truth is their text layer. Per page per core: one process reading
pages one after another with OMP_THREAD_LIMIT=1, the service's languages (all ten by default).
``--skip-pages`` leaves that out (and the CER): the scan alone, for its time and memory.
``--paired 5`` also compares other requests' p95 with OCR running and with it stopped, in
windows of 5 s taken in turn while the scan is read.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import signal
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx
import pypdfium2 as pdfium
from harness import ROOT, make_database, peak_rss_mib, process_tree, running

sys.path.insert(0, str(ROOT))  # tests.scans: the scans the OCR tests make

from app.documents.ocr import parse_languages, read_picture
from app.documents.pdf import without_hyphenation
from app.settings import Settings
from tests.scans import cer, image_pdf, noisy, render_page

CORPUS = ROOT / "tests" / "fixtures" / "pdf"
# Pages of real text: two columns, German mathematics, a LaTeX article.
PAGES = (
    [("multicolumn.pdf", n) for n in (1, 2, 3)]
    + [("GeoTopo-komprimiert.pdf", n) for n in (6, 7, 20, 30)]
    + [("pdflatex-4-pages.pdf", n) for n in (1, 2)]
)


def truth(name: str, number: int) -> str:
    with pdfium.PdfDocument(CORPUS / name) as document:
        return without_hyphenation(document[number - 1].get_textpage().get_text_range())[0]


def cpu_now() -> float:
    """CPU seconds of this process and of the Tesseract processes it has waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def per_page(
    pages: list[tuple[str, int]], dpi: int, noise: bool
) -> tuple[float, float, dict[str, float]]:
    """Seconds a page (rendering excluded), CPU seconds a page (this process's and Tesseract's:
    what a loaded machine inflates less) and the CER of each PDF's pages and of all ("all"),
    read in this process. A PDF's pages after its first are read with its page before's
    languages as the hint, as the service's job reads a document's pages."""
    os.environ["OMP_THREAD_LIMIT"] = "1"
    languages = parse_languages(Settings().ocr_languages)
    seconds, cpu = 0.0, 0.0
    errors: dict[str, float] = {}
    lengths: dict[str, int] = {}
    hints: dict[str, list[str]] = {}
    for name, number in pages:
        data = (CORPUS / name).read_bytes()
        picture = render_page(data, number, dpi)
        if noise:
            picture = noisy(picture, amount=0.01)
        if dpi != 300:  # a scan of that resolution, read as the service reads it: at 300 dpi
            with pdfium.PdfDocument(data) as document:
                size = document[number - 1].get_size()
            picture = render_page(image_pdf([picture], sizes=[size]), 1, 300)
        started, started_cpu = time.perf_counter(), cpu_now()
        page = read_picture(picture, number, languages, hint=hints.get(name))
        hints[name] = page.languages.split("+")
        seconds += time.perf_counter() - started
        cpu += cpu_now() - started_cpu
        expected = truth(name, number)
        length = len(" ".join(expected.split()))
        for key in (name, "all"):
            errors[key] = errors.get(key, 0.0) + cer(page.text, expected) * length
            lengths[key] = lengths.get(key, 0) + length
    rates = {key: errors[key] / max(1, lengths[key]) for key in errors}
    return seconds / len(pages), cpu / len(pages), rates


def by_pdf(rates: dict[str, float]) -> str:
    return ", ".join(f"{name} {rate:.2%}" for name, rate in rates.items() if name != "all")


class Prober(threading.Thread):
    """GET /v1/documents over and over, keeping each request's latency."""

    def __init__(self, base_url: str, headers: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.client = httpx.Client(base_url=base_url, headers=headers, timeout=60)
        self.latencies: list[float] = []
        self.starts: list[float] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            started = time.perf_counter()
            self.client.get("/v1/documents", params={"limit": 10}).raise_for_status()
            self.latencies.append(time.perf_counter() - started)
            self.starts.append(started)
            time.sleep(0.05)

    def p95(self) -> float:
        return p95(self.latencies)


def p95(latencies: list[float]) -> float:
    return statistics.quantiles(latencies, n=20)[-1] * 1000


class Pauser(threading.Thread):
    """Stops the service's OCR workers and their Tesseract (SIGSTOP) for ``seconds``, then
    lets them go (SIGCONT) for as long, over and over: the prober's requests fall alternately
    with OCR running and without, in the same run and the same database, so the machine's drift
    (and an idle machine's slower wake-ups before the upload) weighs on both alike."""

    def __init__(self, pid: int, seconds: float) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.seconds = seconds
        self.windows: list[tuple[float, float, bool]] = []  # start, end, OCR stopped
        self.stopping = threading.Event()

    def signal(self, number: int) -> None:
        for pid in process_tree(self.pid)[1:]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, number)

    def run(self) -> None:
        stopped = False
        try:
            while True:
                started = time.perf_counter()
                ending = self.stopping.wait(self.seconds)
                self.windows.append((started, time.perf_counter(), stopped))
                if ending:
                    return
                stopped = not stopped
                self.signal(signal.SIGSTOP if stopped else signal.SIGCONT)
                if stopped:  # a Tesseract started meanwhile
                    time.sleep(0.05)
                    self.signal(signal.SIGSTOP)
        finally:
            self.signal(signal.SIGCONT)

    def __enter__(self) -> Pauser:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        """Ends the turns and lets every process go on, however the run ended (a stopped
        service would not stop when asked)."""
        self.stopping.set()
        self.join()

    def split(self, prober: Prober, settle: float = 0.3) -> tuple[list[float], list[float]]:
        """The prober's latencies with OCR running and with it stopped, leaving out requests
        started in the first ``settle`` seconds of a window."""
        running: list[float] = []
        stopped: list[float] = []
        for started, latency in zip(prober.starts, prober.latencies, strict=True):
            for begin, end, paused in self.windows:
                if begin + settle <= started < end:
                    (stopped if paused else running).append(latency)
        return running, stopped

    def paused_seconds(self) -> float:
        return sum(end - begin for begin, end, paused in self.windows if paused)


class MemorySampler(threading.Thread):
    """The resident size of the service and its OCR workers (Python processes), and of the
    Tesseract processes the workers run, summed every 0.2 s: the peak of the sum over the run
    (VmHWM, read at the end, misses processes that have ended), and the service's own peak in
    each phase the caller names (``phase``: the upload, the pages read, the document made)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak_python = 0.0
        self.peak_with_tesseract = 0.0
        self.phase = "upload"
        self.service_peaks: dict[str, float] = {}
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            python = tesseract = 0.0
            for pid in process_tree(self.pid):
                try:
                    status = dict(
                        line.split(":", 1)
                        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                    )
                except (OSError, ValueError):
                    continue  # gone meanwhile
                rss = int(status.get("VmRSS", "0 kB").split()[0]) / 1024
                if status["Name"].strip() == "tesseract":
                    tesseract += rss
                else:
                    python += rss
                if pid == self.pid:
                    peak = self.service_peaks.get(self.phase, 0.0)
                    self.service_peaks[self.phase] = max(peak, rss)
            self.peak_python = max(self.peak_python, python)
            self.peak_with_tesseract = max(self.peak_with_tesseract, python + tesseract)
            time.sleep(0.2)


def probe(base_url: str, headers: dict[str, str], seconds: float) -> float:
    prober = Prober(base_url, headers)
    prober.start()
    time.sleep(seconds)
    prober.stopping.set()
    prober.join()
    return prober.p95()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--database-url", help="default: a new SQLite file")
    parser.add_argument("--pages", type=int, default=len(PAGES), help="pages for CER and speed")
    parser.add_argument("--scan-pages", type=int, default=100, help="pages of the scan")
    parser.add_argument(
        "--skip-pages", action="store_true", help="the scan alone: no speed or CER by page"
    )
    parser.add_argument(
        "--paired",
        type=float,
        metavar="SECONDS",
        help="stop and resume the OCR workers every SECONDS while the scan is read, and compare "
        "other requests' p95 with OCR running and stopped (the time read is then without the "
        "stopped windows)",
    )
    args = parser.parse_args()
    pages = PAGES[: args.pages]

    if not args.skip_pages:
        seconds, cpu, rates = per_page(pages, 300, noise=False)
        print(
            f"300 dpi: {seconds:.2f} s a page on one core ({cpu:.2f} CPU s), CER "
            f"{rates['all']:.2%} over {len(pages)} pages (target <= 2 %): {by_pdf(rates)}"
        )
        seconds, cpu, rates = per_page(pages, 150, noise=True)
        print(
            f"150 dpi, blurred, 1 % salt-and-pepper noise: CER {rates['all']:.2%} (target <= 5 %): "
            f"{by_pdf(rates)}; {seconds:.2f} s a page ({cpu:.2f} CPU s)"
        )
    if not args.scan_pages:
        return

    pictures = [
        render_page((CORPUS / name).read_bytes(), number, 300)
        for name, number in (pages * (args.scan_pages // len(pages) + 1))[: args.scan_pages]
    ]
    scan = image_pdf(pictures)
    os.environ |= {"CITEGATE_OCR": "auto", "CITEGATE_OCR_MAX_PAGES": str(args.scan_pages)}
    if args.database_url and args.database_url.startswith("postgresql"):
        make_database(args.database_url, fresh=True)  # no earlier run's scans: runs compare
    with (
        running(args.database_url, None) as stack,
        httpx.Client(base_url=stack.citegate, headers=stack.headers, timeout=600) as http,
    ):
        before = probe(stack.citegate, stack.headers, 30)
        prober = Prober(stack.citegate, stack.headers)
        memory = MemorySampler(stack.pid)
        memory.start()
        started = time.perf_counter()
        response = http.post("/v1/documents/upload", files={"file": ("scan.pdf", scan)})
        assert response.status_code == 202, response.text
        prober.start()
        pauser = Pauser(stack.pid, args.paired) if args.paired else None
        memory.phase = "reading"
        document_id = response.json()["id"]
        with pauser or contextlib.nullcontext():
            while (document := http.get(f"/v1/documents/{document_id}").json())[
                "status"
            ] == "processing":
                progress = document["progress"]
                if progress and progress["pages_done"] == progress["pages_total"]:
                    memory.phase = "finishing"
                time.sleep(0.5)
        elapsed = time.perf_counter() - started
        prober.stopping.set()
        prober.join()
        if pauser:
            elapsed -= pauser.paused_seconds()
        memory.stopping.set()
        memory.join()
        service = peak_rss_mib(stack.pid)
        workers = [peak_rss_mib(pid) for pid in process_tree(stack.pid)[1:]]
        backend = stack.database
    print(f"database: {backend}; {os.cpu_count()} cores")
    print(
        f"{args.scan_pages}-page scan ({len(scan) / 1e6:.0f} MB) {document['status']} in "
        f"{elapsed:.0f} s: {elapsed / args.scan_pages:.2f} s a page (target: 100 pages < 4 min)"
    )
    print(
        f"peak RSS: service {service:.0f} MiB, OCR workers {sum(workers):.0f} MiB "
        f"({', '.join(f'{w:.0f}' for w in workers)}), together {service + sum(workers):.0f} MiB "
        "(target < 500 MiB)"
    )
    print(
        f"peak of the sum, sampled every 0.2 s (ended processes too): service and workers "
        f"{memory.peak_python:.0f} MiB, with the Tesseract processes "
        f"{memory.peak_with_tesseract:.0f} MiB"
    )
    print(
        "the service's own peak by phase (sampled): "
        + ", ".join(f"{phase} {peak:.0f} MiB" for phase, peak in memory.service_peaks.items())
    )
    print(
        f"GET /v1/documents p95: {before:.1f} ms before the upload (an empty list), "
        f"{prober.p95():.1f} ms while the scan was read (a list of one): "
        f"{prober.p95() / before - 1:+.0%}; --paired measures OCR's own share"
    )
    if pauser:
        running_ocr, stopped = pauser.split(prober)
        if min(len(running_ocr), len(stopped)) < 20:
            sys.exit("--paired: too few requests in one of the two kinds of window")
        with_ocr, without = p95(running_ocr), p95(stopped)
        medians = [statistics.median(part) * 1000 for part in (stopped, running_ocr)]
        print(
            f"paired, every {args.paired:g} s: p95 {without:.1f} ms with OCR stopped "
            f"({len(stopped)} requests), {with_ocr:.1f} ms with it running "
            f"({len(running_ocr)}): {with_ocr / without - 1:+.0%} (target <= +20 %); p50 "
            f"{medians[0]:.1f} / {medians[1]:.1f} ms"
        )


if __name__ == "__main__":
    main()
