"""Where a server's CPU goes under load: one of bench/overhead.py's targets, driven by `hey`
as there, sampled by py-spy (an external sampler: the server runs as deployed, unmodified).
Writes a flame graph (SVG, text) and py-spy's raw stacks under bench/results/ (not committed)
and prints the frames that hold the most samples, with each one's share and its cost per
request. Asserts nothing.

    pip install py-spy   # into .venv; not a dependency of Citegate or of its tests
    .venv/bin/python bench/profile.py [--target answers|compatible|forwarder] [--stream]
        [--concurrency 1] [--requests 3000] [--rate 200] [--database-url URL]

Figures are per request: samples x (1 / rate) / requests. The event loop's own C code (uvloop)
shows as the frame that runs it, `Runner.run`; coroutines resumed by the loop show with short
stacks of their own, so a frame's "total" counts only the samples whose stack shows it.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import overhead
from harness import running
from overhead import forwarding

RESULTS = Path(__file__).with_name("results")
TARGETS = {"forwarder": 1, "answers": 2, "compatible": 3}


# py-spy beside this Python (the virtualenv's bin), else on PATH.
PY_SPY = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")


def spy(pid: int, rate: int, out: Path, form: str) -> subprocess.Popen[bytes]:
    assert PY_SPY is not None
    command = [PY_SPY, "record", "--rate", str(rate), "--pid", str(pid), "--nonblocking"]
    return subprocess.Popen(
        [*command, "--format", form, "--output", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def top(raw: Path, requests: int, rate: int, count: int = 25) -> None:
    total: Counter[str] = Counter()
    own: Counter[str] = Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        frames, weight = stack.split(";"), int(count_text)
        samples += weight
        for frame in set(frames):
            total[frame] += weight
        own[frames[-1]] += weight
    per_request = 1e6 / rate / requests  # microseconds of CPU per sample, per request
    print(f"{samples} samples: {samples * per_request / 1000:.2f} ms of CPU per request")
    # The frames under which the server runs (the CLI, uvicorn, the loop) hold every sample
    # of the main thread alike: they tell nothing.
    root = max(total.values(), default=0)
    inside = Counter({frame: held for frame, held in total.items() if held < root})
    for title, counter in (("total (frame on the stack)", inside), ("self (frame running)", own)):
        print(f"-- {title}")
        for frame, held in counter.most_common(count):
            print(f"{held / samples:6.1%} {held * per_request:7.0f} us  {frame[:110]}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--target", choices=sorted(TARGETS), default="answers")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--database-url", help="default: a new SQLite file")
    args = parser.parse_args()
    if PY_SPY is None:
        sys.exit("py-spy is not installed: .venv/bin/python -m pip install py-spy")
    RESULTS.mkdir(exist_ok=True)
    name = f"{args.target}-{'stream' if args.stream else 'json'}-c{args.concurrency}"
    with (
        running(args.database_url, overhead.__file__) as stack,
        tempfile.TemporaryDirectory() as tmp,
    ):
        assert stack.fake is not None
        with forwarding(stack.fake) as (forwarder, forwarder_pid):
            workdir = Path(tmp)
            every = (
                *overhead.baselines(stack, forwarder, forwarder_pid, workdir, args.stream),
                *overhead.citegate_targets(stack, workdir, args.stream),
            )
            target = every[TARGETS[args.target]]
            overhead.hey(target, 300, 8, False)  # warm up
            samplers = [
                spy(target.pids[0], args.rate, RESULTS / f"{name}.svg", "flamegraph"),
                spy(target.pids[0], args.rate, RESULTS / f"{name}.txt", "raw"),
            ]
            time.sleep(1)  # py-spy attaches
            run = overhead.hey(target, args.requests, args.concurrency, False)
            for sampler in samplers:
                sampler.send_signal(signal.SIGINT)
                sampler.wait(timeout=60)
    # Two samplers at once: each sees the same process, so either's counts will do.
    print(f"{target.name}: {run.cpu_ms:.2f} ms CPU/request (from /proc), {run.rps:.0f} req/s")
    top(RESULTS / f"{name}.txt", args.requests, args.rate)
    print(f"flame graph: {RESULTS / f'{name}.svg'}")


if __name__ == "__main__":
    main()
