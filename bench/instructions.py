"""Instructions per request, counted by valgrind's callgrind: a change's cost measured to a few
tenths of a percent, where CPU time on this machine moves by 5 % between two runs of the same
code (bench/overhead.py's own A/A figure).

The servers are bench/overhead.py's, each under ``valgrind --tool=callgrind`` with counting off
while it starts and warms up (connections, caches, the first answer's documents): the bare
forwarder, Citegate's ``/v1/answers`` and its Anthropic-compatible route, and with ``--against
REV`` Citegate at that revision too. For each, counting is switched on for ``--requests``
requests sent one at a time by ``hey``, then the counts are dumped and read: instructions of
every thread of the process (aiosqlite's included), per request.

What it does not see: the kernel's work (system calls, the socket copies), and how fast the
instructions run. Citegate's answer runs about as many instructions as the forwarder's hop yet
takes more CPU time (bench/overhead.py): more code and more data touched per request run at
fewer instructions per cycle. So this is the instrument for deciding whether a change saves
work, and bench/overhead.py the one for the figure a user sees.

    apt-get install valgrind
    .venv/bin/python bench/instructions.py [--stream] [--requests 200] [--against REV]
        [--database-url URL]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from contextlib import ExitStack
from pathlib import Path

import overhead
from harness import running
from overhead import Target, database_beside, forwarding, worktree

CALLGRIND_CONTROL = shutil.which("callgrind_control")


def callgrind(out: Path) -> tuple[str, ...]:
    """The command to run a server under, counting nothing until told to."""
    return (
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={out}/callgrind.%p",
    )


def control(pid: int, *args: str) -> None:
    assert CALLGRIND_CONTROL is not None
    subprocess.run([CALLGRIND_CONTROL, *args, str(pid)], check=True, capture_output=True)


def instructions_per_request(target: Target, requests: int, out: Path) -> float:
    """Millions of instructions the target's server runs per request, once warm."""
    pid = target.pids[0]
    overhead.hey(target, 50, 1, False)  # warm, counting nothing
    control(pid, "--zero")
    control(pid, "--instr=on")
    overhead.hey(target, requests, 1, False)
    control(pid, "--instr=off")
    control(pid, "--dump")
    dumps = sorted(out.glob(f"callgrind.{pid}.*"))
    if not dumps:
        raise SystemExit(f"{target.name}: callgrind wrote no dump")
    for line in dumps[-1].read_text(errors="replace").splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1]) / requests / 1e6
    raise SystemExit(f"{target.name}: no totals in {dumps[-1]}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--database-url", help="default: a new SQLite file")
    parser.add_argument("--against", metavar="REV", help="also Citegate at this git revision")
    args = parser.parse_args()
    if shutil.which("valgrind") is None or CALLGRIND_CONTROL is None:
        raise SystemExit("valgrind is not installed: apt-get install valgrind")
    with ExitStack() as started:
        workdir = Path(started.enter_context(tempfile.TemporaryDirectory()))
        out = workdir / "callgrind"
        out.mkdir()
        stack = started.enter_context(
            running(args.database_url, overhead.__file__, wrap=callgrind(out))
        )
        assert stack.fake is not None
        forwarder, forwarder_pid = started.enter_context(forwarding(stack.fake, callgrind(out)))
        targets = [
            overhead.baselines(stack, forwarder, forwarder_pid, workdir, args.stream)[1],
            *overhead.citegate_targets(stack, workdir, args.stream),
        ]
        if args.against:
            root, label = started.enter_context(worktree(args.against))
            url = args.database_url and database_beside(args.database_url, "_against")
            other = started.enter_context(
                running(url, overhead.__file__, root=root, wrap=callgrind(out))
            )
            targets += overhead.citegate_targets(other, workdir, args.stream, f"@{label}")
        kind = "streaming" if args.stream else "JSON"
        print(f"database: {stack.database}; {kind}, {args.requests} requests, one at a time:")
        figures = {t.name: instructions_per_request(t, args.requests, out) for t in targets}
    forwarder_figure = figures[targets[0].name]
    for name, figure in figures.items():
        print(f"  {name:20} {figure:6.3f} M instructions/request, {figure / forwarder_figure:.2f}x")


if __name__ == "__main__":
    main()
