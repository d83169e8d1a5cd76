"""What a cited answer costs on top of a bare hop, measured as a user sees it.

Three servers, each in its own process on 127.0.0.1: an instant fake Messages API (this file,
``--serve-fake``), a bare forwarder (``bench/forwarder.py``: FastAPI and one httpx client), and
``citegate serve`` as deployed (keys required, one worker unless --workers), asked through
``/v1/answers`` and through the Anthropic-compatible ``/anthropic/v1/messages`` (file blocks),
and with ``--routes`` also (or instead) through the OpenAI-compatible
``/openai/v1/chat/completions`` and ``/openai/v1/responses`` (file parts).
The client is ``hey`` (Debian's package ``hey``), an external Go program, so the instrument
costs the Python processes nothing. Three 100 KB text documents are stored in Citegate; the
forwarder is sent the same Messages request Citegate builds (the documents inline, citations
on, cache_control), and the fake answers each with cited text (JSON, or an SSE stream with
``citations_delta`` events when the request streams).

For each target, repetitions are interleaved (fake alone, forwarder, Citegate, again...) so a
machine that slows down mid-run slows all of them, and the figures printed are medians over
the repetitions:
- server CPU per request, from /proc/PID/stat of the server's processes (utime + stime), and on
  PostgreSQL the CPU of the database's backends too;
- added latency p50/p95: the target's percentile minus the fake's own percentile for the
  request the target sends it;
- requests per second; peak RSS of the server (VmHWM) at the end.

Why these figures differ from an in-process measure: a Python load client running beside the
server (the earlier version of this benchmark) shares the two cores and its own event loop
with what it measures, and its baseline was a 300 KB request posted by that client, whose JSON
encoding and upload cost more than Citegate's work, so subtracting it hid most of Citegate's
time. Here the client is native and the baseline is the fake answering the same request, so
what remains is the server's own cost, CPU per request being the figure least moved by noise.

    .venv/bin/python bench/overhead.py [--requests 2000] [--repetitions 3] [--concurrency 1 32]
        [--mode json|stream|both] [--database-url URL] [--workers N] [--soak 20000]
        [--against REV] [--event-relay] [--routes answers anthropic chat responses]
        [--budget USD]

A change is measured with ``--against REV`` (its parent, say): Citegate at that revision runs
beside this checkout's, each on its own database, and every repetition asks both, so the two
meet the same machine at the same moments. Measured a session apart, the same code has moved
by 10-15 %, more than most changes are worth.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from harness import ROOT, Stack, cpu_of, free_port, make_database, process_tree, running, wait_up
from sqlalchemy.engine import make_url

WORDS = (
    "the of and to in is was for on that with as by at from it an be this which are or have "
    "market report system data model growth service customer value process results analysis"
).split()
QUESTION = "What does the report say about growth?"


def document_text(seed: int, size: int = 100_000) -> str:
    import random

    rng = random.Random(seed)
    out, total = [], 0
    while total < size:
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 20))).capitalize()
        out.append(sentence + ". ")
        total += len(sentence) + 2
    return "".join(out)


TEXTS = [document_text(n) for n in range(3)]


def fake_reply(texts: list[str]) -> dict[str, Any]:
    """An answer citing the second sentence of each document, as the real API would."""
    content: list[dict[str, Any]] = [{"type": "text", "text": "According to the documents, "}]
    for index, text in enumerate(texts):
        start = text.index(". ") + 2
        end = text.index(". ", start) + 2
        citation = {
            "type": "char_location",
            "cited_text": text[start:end],
            "document_index": index,
            "document_title": f"Document {index}",
            "start_char_index": start,
            "end_char_index": end,
        }
        content.append({"type": "text", "text": f"point {index}", "citations": [citation]})
    return {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-5",
        "content": content,
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 30, "cache_read_input_tokens": 75000},
    }


def fake_events(message: dict[str, Any]) -> bytes:
    """The same answer as the Messages API streams it."""

    def event(data: dict[str, Any]) -> str:
        return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n"

    start = {**message, "content": [], "stop_reason": None}
    out = [event({"type": "message_start", "message": start})]
    for index, block in enumerate(message["content"]):
        empty: dict[str, Any] = {"type": "text", "text": ""}
        if "citations" in block:
            empty["citations"] = []
        out.append(event({"type": "content_block_start", "index": index, "content_block": empty}))
        for citation in block.get("citations", []):
            delta = {"type": "citations_delta", "citation": citation}
            out.append(event({"type": "content_block_delta", "index": index, "delta": delta}))
        delta = {"type": "text_delta", "text": block["text"]}
        out.append(event({"type": "content_block_delta", "index": index, "delta": delta}))
        out.append(event({"type": "content_block_stop", "index": index}))
    out.append(
        event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 30},
            }
        )
    )
    out.append(event({"type": "message_stop"}))
    return "".join(out).encode()


def serve_fake(port: int) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    message = fake_reply(TEXTS)
    body, events = json.dumps(message).encode(), fake_events(message)

    async def messages(request: Request) -> Response:
        streamed = b'"stream":true' in (await request.body()).replace(b" ", b"")
        if streamed:
            return Response(events, media_type="text/event-stream")
        return Response(body, media_type="application/json", headers={"request-id": "req_b"})

    async def ok(request: Request) -> Response:
        return Response("ok")

    app = Starlette(
        routes=[Route("/v1/messages", messages, methods=["POST"]), Route("/", ok)],
    )
    # Idle connections are kept for the whole run: closed after uvicorn's 5 s, as while other
    # targets are asked, a client may send on one just as it closes (the forwarder's httpcore
    # pool then answered 500 with a ReadError, and the run stopped).
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        timeout_keep_alive=3600,
    )


def messages_request(stream: bool) -> dict[str, Any]:
    """The Messages request Citegate sends for QUESTION over the three documents."""
    documents = [
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": text},
            "title": f"Document {index}",
            "citations": {"enabled": True},
            "cache_control": {"type": "ephemeral"},
        }
        for index, text in enumerate(TEXTS)
    ]
    return {
        "model": "claude-sonnet-5",
        "max_tokens": 1024,
        "stream": stream,
        "messages": [{"role": "user", "content": [*documents, {"type": "text", "text": QUESTION}]}],
    }


@dataclass(frozen=True)
class Target:
    name: str
    url: str
    body: Path
    headers: dict[str, str]
    pids: tuple[int, ...]  # the server's processes (with --workers, the parent's tree)


@dataclass
class Run:
    latencies: list[float]  # seconds
    rps: float
    cpu_ms: float  # server CPU per request
    database_cpu_ms: float


def postgres_pids() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "postgres":
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def hey(target: Target, requests: int, concurrency: int, database: bool) -> Run:
    headers = [arg for name, value in target.headers.items() for arg in ("-H", f"{name}: {value}")]
    command = [
        "hey", "-n", str(requests), "-c", str(concurrency), "-m", "POST",
        "-T", "application/json", "-D", str(target.body), "-o", "csv", *headers, target.url,
    ]  # fmt: skip
    pids = [p for pid in target.pids for p in process_tree(pid)]
    database_pids = postgres_pids() if database else []
    before, database_before = cpu_of(pids), cpu_of(database_pids)
    started = time.perf_counter()
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    elapsed = time.perf_counter() - started
    cpu, database_cpu = cpu_of(pids) - before, cpu_of(database_pids) - database_before
    rows = [line.split(",") for line in output.splitlines()[1:] if line]
    statuses = {row[6] for row in rows}
    if statuses != {"200"}:
        raise SystemExit(f"{target.name}: statuses {statuses}")
    return Run(
        latencies=[float(row[0]) for row in rows],
        rps=requests / elapsed,
        cpu_ms=cpu / requests * 1000,
        database_cpu_ms=database_cpu / requests * 1000,
    )


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def peak_rss_mib(pids: tuple[int, ...]) -> float:
    total = 0.0
    for pid in (p for root in pids for p in process_tree(root)):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1]) / 1024
    return total


def rss_mib(pids: tuple[int, ...]) -> float:
    total = 0.0
    for pid in (p for root in pids for p in process_tree(root)):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) / 1024
    return total


def set_budget(stack: Stack, usd: str) -> None:
    """Give the key the benchmark asks with a monthly budget (this checkout's Citegate only):
    every answer then reserves its maximum cost and settles its actual cost."""
    with httpx.Client(headers=stack.headers, timeout=60) as client:
        secret = stack.headers["Authorization"].removeprefix("Bearer ")
        keys = client.get(f"{stack.citegate}/v1/admin/api-keys").json()["data"]
        # a PostgreSQL database is kept between runs: its earlier runs' keys are there too
        [key] = [key for key in keys if secret.startswith(key["prefix"].rstrip("…"))]
        budget = {"usd": usd, "period": "month"}
        response = client.patch(
            f"{stack.citegate}/v1/admin/api-keys/{key['id']}", json={"budget": budget}
        )
        response.raise_for_status()


def store_documents(stack: Stack) -> list[str]:
    ids = []
    with httpx.Client(headers=stack.headers, timeout=60) as client:
        for index, text in enumerate(TEXTS):
            response = client.post(
                f"{stack.citegate}/v1/documents",
                json={"source": {"type": "text", "data": text}, "title": f"Document {index}"},
            )
            response.raise_for_status()
            ids.append(response.json()["id"])
    return ids


def written(workdir: Path, name: str, stream: bool, body: dict[str, Any]) -> Path:
    path = workdir / f"{name}-{'stream' if stream else 'json'}.json"
    path.write_text(json.dumps(body))
    return path


def baselines(
    stack: Stack, forwarder: str, forwarder_pid: int, workdir: Path, stream: bool
) -> tuple[Target, Target]:
    """The fake alone and the forwarder, each sent the Messages request Citegate builds."""
    direct = written(workdir, "direct", stream, messages_request(stream))
    assert stack.fake is not None and stack.fake_pid is not None
    return (
        Target("fake alone", f"{stack.fake}/v1/messages", direct, {}, (stack.fake_pid,)),
        Target("forwarder", f"{forwarder}/v1/messages", direct, {}, (forwarder_pid,)),
    )


def event_relay(url: str, pid: int, workdir: Path) -> Target:
    """bench/forwarder.py --events: a stream relayed event by event, nothing resolved."""
    direct = written(workdir, "direct", True, messages_request(True))
    return Target("event relay", f"{url}/v1/messages", direct, {}, (pid,))


ROUTES = ("answers", "anthropic", "chat", "responses")


def citegate_targets(
    stack: Stack,
    workdir: Path,
    stream: bool,
    label: str = "",
    routes: tuple[str, ...] = ("answers", "anthropic"),
) -> tuple[Target, ...]:
    """Citegate's routes for the same question, on documents stored in it just now:
    ``/v1/answers``, the Anthropic-compatible ``/anthropic/v1/messages`` (the documents named as
    file blocks, which Citegate turns into the forwarder's request, cache_control added), and
    the OpenAI-compatible ``/openai/v1/chat/completions`` (``file`` parts) and
    ``/openai/v1/responses`` (``input_file`` parts; each response starts a conversation)."""
    ids = store_documents(stack)
    bodies: dict[str, tuple[str, str, dict[str, Any]]] = {
        "answers": (
            f"Citegate{label}",
            "/v1/answers",
            {"question": QUESTION, "document_ids": ids, "stream": stream},
        ),
        "anthropic": (
            f"compatible{label}",
            "/anthropic/v1/messages",
            {
                "model": "claude-sonnet-5",
                "max_tokens": 1024,
                "stream": stream,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            *(
                                {
                                    "type": "document",
                                    "source": {"type": "file", "file_id": document_id},
                                    "title": f"Document {index}",
                                    "citations": {"enabled": True},
                                }
                                for index, document_id in enumerate(ids)
                            ),
                            {"type": "text", "text": QUESTION},
                        ],
                    }
                ],
            },
        ),
        "chat": (
            f"openai chat{label}",
            "/openai/v1/chat/completions",
            {
                "model": "claude-sonnet-5",
                "max_completion_tokens": 1024,
                "stream": stream,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            *({"type": "file", "file": {"file_id": i}} for i in ids),
                            {"type": "text", "text": QUESTION},
                        ],
                    }
                ],
            },
        ),
        "responses": (
            f"openai responses{label}",
            "/openai/v1/responses",
            {
                "model": "claude-sonnet-5",
                "max_output_tokens": 1024,
                "stream": stream,
                "input": [
                    {
                        "role": "user",
                        "content": [
                            *({"type": "input_file", "file_id": i} for i in ids),
                            {"type": "input_text", "text": QUESTION},
                        ],
                    }
                ],
            },
        ),
    }
    targets = []
    for route in routes:
        name, path, body = bodies[route]
        written_body = written(workdir, f"{route}{label}", stream, body)
        targets.append(
            Target(name, f"{stack.citegate}{path}", written_body, stack.headers, (stack.pid,))
        )
    return tuple(targets)


def median_cpu(runs: list[Run]) -> float:
    return statistics.median(r.cpu_ms for r in runs)


def report(name: str, runs: list[Run], base: list[Run], database: bool, width: int = 11) -> str:
    def median(values: Iterator[float]) -> float:
        return statistics.median(values)

    p50 = median(
        percentile(r.latencies, 50) - percentile(b.latencies, 50)
        for r, b in zip(runs, base, strict=True)
    )
    p95 = median(
        percentile(r.latencies, 95) - percentile(b.latencies, 95)
        for r, b in zip(runs, base, strict=True)
    )
    cpu = median_cpu(runs)
    line = (
        f"  {name:<{width}} CPU {cpu:5.2f} ms/request"
        + (f" (+ PostgreSQL {median(r.database_cpu_ms for r in runs):.2f})" if database else "")
        + f", added p50 {p50 * 1000:5.2f} ms, p95 {p95 * 1000:5.2f} ms,"
        f" {median(r.rps for r in runs):6.0f} req/s"
    )
    return line


def measure(
    args: argparse.Namespace,
    stack: Stack,
    forwarder: str,
    forwarder_pid: int,
    against: tuple[Stack, str] | None = None,
    relay: tuple[str, int] | None = None,
) -> None:
    """``against``: a second Citegate (another revision's) and its label, measured in the same
    interleaved repetitions, so that a change's before and after meet the same machine.
    ``relay``: bench/forwarder.py --events (its URL and pid), measured beside streams."""
    database = stack.database.startswith("postgresql")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for stream in {"json": (False,), "stream": (True,), "both": (False, True)}[args.mode]:
            fake, bare = baselines(stack, forwarder, forwarder_pid, workdir, stream)
            routes = tuple(args.routes)
            ours = citegate_targets(stack, workdir, stream, routes=routes)
            if against is not None:
                ours += citegate_targets(against[0], workdir, stream, f"@{against[1]}", routes)
            floors = (event_relay(*relay, workdir),) if relay is not None and stream else ()
            all_targets = (fake, bare, *floors, *ours)
            width = max(len(t.name) for t in all_targets)
            for target in all_targets:  # warm up
                hey(target, 200, 8, False)
            for concurrency in args.concurrency:
                runs: dict[str, list[Run]] = {t.name: [] for t in all_targets}
                for _ in range(args.repetitions):
                    for target in all_targets:
                        runs[target.name].append(
                            hey(target, args.requests, concurrency, database and target in ours)
                        )
                kind = "streaming" if stream else "JSON"
                print(f"{kind}, concurrency {concurrency}, {args.requests} requests, ", end="")
                print(f"{args.repetitions} repetitions:")
                for target in (bare, *floors, *ours):
                    print(
                        report(
                            target.name,
                            runs[target.name],
                            runs[fake.name],
                            target in ours and database,
                            width,
                        )
                    )
                cpu = {name: median_cpu(target_runs) for name, target_runs in runs.items()}
                for target in (*floors, *ours):
                    print(
                        f"  {target.name} / forwarder CPU: {cpu[target.name] / cpu[bare.name]:.2f}x"
                    )
                # Each route against /v1/answers, when both were asked.
                first = ours[0]
                if routes[0] == "answers":
                    for target in ours[1 : len(routes)]:
                        ratio = cpu[target.name] / cpu[first.name]
                        print(f"  {target.name} / {first.name} CPU: {ratio:.2f}x")
                # This checkout's routes, then the other revision's, in the same order.
                here, there = ours[: len(routes)], ours[len(routes) :]
                for now, then in zip(here, there, strict=False):
                    print(f"  {now.name} / {then.name} CPU: {cpu[now.name] / cpu[then.name]:.2f}x")
    print(
        f"peak RSS: Citegate {peak_rss_mib((stack.pid,)):.0f} MiB "
        f"(now {rss_mib((stack.pid,)):.0f}), forwarder {peak_rss_mib((forwarder_pid,)):.0f} MiB"
    )


def soak(stack: Stack, answers: int) -> None:
    """Answers in rounds of 2,000 at concurrency 32, printing Citegate's RSS after each round."""
    with tempfile.TemporaryDirectory() as tmp:
        ids = store_documents(stack)
        body = Path(tmp) / "ask.json"
        body.write_text(json.dumps({"question": QUESTION, "document_ids": ids}))
        target = Target(
            "Citegate", f"{stack.citegate}/v1/answers", body, stack.headers, (stack.pid,)
        )
        print(f"RSS before: {rss_mib((stack.pid,)):.0f} MiB")
        done = 0
        while done < answers:
            hey(target, 2000, 32, False)
            done += 2000
            now, peak = rss_mib((stack.pid,)), peak_rss_mib((stack.pid,))
            print(f"after {done} answers: RSS {now:.0f} MiB, peak {peak:.0f} MiB")


@contextmanager
def forwarding(
    upstream: str,
    wrap: tuple[str, ...] = (),
    script: str = "forwarder.py",
    args: tuple[str, ...] = (),
) -> Iterator[tuple[str, int]]:
    """bench/forwarder.py (or another ``script`` of bench/ that takes --port and --upstream,
    and ``args``) in its own process in front of ``upstream``, under ``wrap``, a command, when
    given: its URL and pid."""
    port = free_port()
    path = Path(__file__).with_name(script)
    forwarder = subprocess.Popen(
        [*wrap, sys.executable, str(path), "--port", str(port), "--upstream", upstream, *args]
    )
    try:
        wait_up(f"http://127.0.0.1:{port}/healthz")
        yield f"http://127.0.0.1:{port}", forwarder.pid
    finally:
        forwarder.terminate()
        forwarder.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--database-url", help="default: a new SQLite file")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--mode", choices=("json", "stream", "both"), default="both")
    parser.add_argument(
        "--routes",
        nargs="+",
        choices=ROUTES,
        default=["answers", "anthropic"],
        help="Citegate's routes to ask (the first, when answers, is what the others are "
        "compared with): /v1/answers, /anthropic/v1/messages, /openai/v1/chat/completions, "
        "/openai/v1/responses",
    )
    parser.add_argument("--soak", type=int, help="instead: this many answers, RSS as they go")
    parser.add_argument(
        "--against",
        metavar="REV",
        help="also Citegate at this git revision (a worktree; on PostgreSQL its own database, "
        "the URL's name + _against), in the same repetitions: a change's before and after",
    )
    parser.add_argument(
        "--event-relay",
        action="store_true",
        help="streams also through bench/forwarder.py --events: relayed event by event on "
        "the libraries Citegate's streams use, nothing resolved or stored",
    )
    parser.add_argument(
        "--budget", help="a budget (USD a month) on this checkout's key: its cost per answer"
    )
    parser.add_argument("--serve-fake", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake:
        serve_fake(args.serve_fake)
        return
    serve_args = ("--workers", str(args.workers)) if args.workers > 1 else ()
    with ExitStack() as started:
        stack = started.enter_context(running(args.database_url, __file__, serve_args=serve_args))
        assert stack.fake is not None
        print(f"database: {stack.database}; {args.workers} worker(s)")
        if args.budget:
            set_budget(stack, args.budget)
            print(f"budget: {args.budget} USD a month on this checkout's key")
        if args.soak:
            soak(stack, args.soak)
            return
        against = None
        if args.against:
            root, label = started.enter_context(worktree(args.against))
            url = args.database_url and database_beside(args.database_url, "_against")
            against = (
                started.enter_context(running(url, __file__, serve_args=serve_args, root=root)),
                label,
            )
            print(f"against: {args.against} ({label}), in a worktree at {root}")
        forwarder, forwarder_pid = started.enter_context(forwarding(stack.fake))
        relay = None
        if args.event_relay:
            relay = started.enter_context(forwarding(stack.fake, args=("--events",)))
        measure(args, stack, forwarder, forwarder_pid, against, relay)


@contextmanager
def worktree(revision: str) -> Iterator[tuple[Path, str]]:
    """A checkout of ``revision`` beside this one (``git worktree``) and its short hash."""
    git = ["git", "-C", str(ROOT)]
    short = subprocess.run(
        [*git, "rev-parse", "--short", revision], check=True, capture_output=True, text=True
    ).stdout.strip()
    path = Path(tempfile.mkdtemp(prefix="citegate-against-")) / short
    subprocess.run(
        [*git, "worktree", "add", "--detach", "--quiet", str(path), revision], check=True
    )
    try:
        yield path, short
    finally:
        subprocess.run([*git, "worktree", "remove", "--force", str(path)], check=True)
        shutil.rmtree(path.parent, ignore_errors=True)


def database_beside(url: str, suffix: str) -> str:
    """A new, empty PostgreSQL database named as ``url``'s plus ``suffix`` (dropped first if
    there), on the same server; its URL. (A SQLite stack makes a new file of its own.)"""
    given = make_url(url)
    if not given.drivername.startswith("postgresql"):
        raise SystemExit("--database-url: --against takes a PostgreSQL URL (or none: SQLite)")
    beside = given.set(database=f"{given.database}{suffix}").render_as_string(hide_password=False)
    make_database(beside, fresh=True)
    return beside


if __name__ == "__main__":
    main()
