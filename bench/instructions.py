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

With ``--trickle D``, streamed answers of D text deltas 20 ms apart instead (bench/streams.py's
fake; ``--requests`` of them, two at a time: 10-20 are enough): instructions per stream and per
relayed upstream event, through Citegate and through bench/relay.py (a relay with no
framework). An event's own cost is what ``--trickle 100`` adds to ``--trickle 0``, divided by
100. A few percent of a figure move between runs: timers (the key and document rechecks, the
loop-lag probe) run by the clock, and under valgrind a stream takes a clock's while.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import overhead
import streams
from harness import Stack, load_client, running
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


def counted(pid: int, name: str, out: Path) -> int:
    """The instructions counted since ``--zero``: counting stops, and the counts are read."""
    control(pid, "--instr=off")
    control(pid, "--dump")
    dumps = sorted(out.glob(f"callgrind.{pid}.*"))
    if not dumps:
        raise SystemExit(f"{name}: callgrind wrote no dump")
    for line in dumps[-1].read_text(errors="replace").splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise SystemExit(f"{name}: no totals in {dumps[-1]}")


def instructions_per_request(target: Target, requests: int, out: Path) -> float:
    """Millions of instructions the target's server runs per request, once warm."""
    pid = target.pids[0]
    overhead.hey(target, 50, 1, False)  # warm, counting nothing
    control(pid, "--zero")
    control(pid, "--instr=on")
    overhead.hey(target, requests, 1, False)
    return counted(pid, target.name, out) / requests / 1e6


async def trickled(
    stack: Stack, url: str, body: dict[str, Any], pid: int, requests: int, out: Path
) -> float:
    """Millions of instructions the server runs per streamed answer, once warm."""
    async with load_client(stack, timeout=600, max_connections=10) as client:
        for _ in range(4):  # warm, counting nothing
            await streams.first_event(client, url, body)
        control(pid, "--zero")
        control(pid, "--instr=on")
        done = 0
        while done < requests:  # two at a time: under valgrind, more would share reads
            pair = min(2, requests - done)
            await asyncio.gather(*(streams.first_event(client, url, body) for _ in range(pair)))
            done += pair
    return counted(pid, url, out) / requests / 1e6


def trickle(args: argparse.Namespace, started: ExitStack, out: Path) -> None:
    deltas = ("--deltas", str(args.trickle), "--pause", "0.02")
    stacks = [("Citegate", started.enter_context(
        running(args.database_url, streams.__file__, *deltas, wrap=callgrind(out))
    ))]  # fmt: skip
    if args.against:
        root, label = started.enter_context(worktree(args.against))
        url = args.database_url and database_beside(args.database_url, "_against")
        stacks.append((f"Citegate@{label}", started.enter_context(
            running(url, streams.__file__, *deltas, root=root, wrap=callgrind(out))
        )))  # fmt: skip
    figures = {}
    for name, stack in stacks:
        source = {"type": "text", "data": "The grass is green. The sky is blue."}
        stored = httpx.post(
            f"{stack.citegate}/v1/documents", json={"source": source}, headers=stack.headers
        )
        stored.raise_for_status()
        ask = {"question": "Colours?", "document_ids": [stored.json()["id"]], "stream": True}
        figures[name] = asyncio.run(
            trickled(stack, f"{stack.citegate}/v1/answers", ask, stack.pid, args.requests, out)
        )
    stack = stacks[0][1]
    assert stack.fake is not None
    url, pid = started.enter_context(forwarding(stack.fake, callgrind(out), script="relay.py"))
    figures["bench/relay.py"] = asyncio.run(
        trickled(stack, f"{url}/v1/messages", streams.DIRECT, pid, args.requests, out)
    )
    events = args.trickle + 6  # and message_start, a block's start and stop, message_delta...
    print(f"database: {stack.database}; {args.requests} streams of {args.trickle} deltas:")
    for name, figure in figures.items():
        print(
            f"  {name:20} {figure:7.3f} M instructions/stream, "
            f"{figure / events * 1e3:6.1f} K/upstream event (the stream's own cost shared out)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--database-url", help="default: a new SQLite file")
    parser.add_argument("--against", metavar="REV", help="also Citegate at this git revision")
    parser.add_argument("--trickle", type=int, metavar="D", help="streams of D deltas instead")
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="keep the callgrind dumps here (callgrind.PID.N, the counted part of each server "
        "being the last), for callgrind_annotate --inclusive=yes",
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None or CALLGRIND_CONTROL is None:
        raise SystemExit("valgrind is not installed: apt-get install valgrind")
    with ExitStack() as started:
        workdir = Path(started.enter_context(tempfile.TemporaryDirectory()))
        out = args.keep or workdir / "callgrind"
        out.mkdir(parents=True, exist_ok=True)
        if any(out.iterdir()):  # an earlier run's dumps would be read as this one's
            raise SystemExit(f"--keep {out}: not empty")
        if args.trickle is not None:
            trickle(args, started, out)
            return
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
