"""Faults under load: uploads and answers (JSON and streamed) sent to `citegate serve` on
PostgreSQL without pause, while faults are injected in turn; per fault, the requests, the 5xx
(during the fault and outside it), the acknowledged writes lost, and the time to recover.
Prints figures; asserts nothing.

    .venv/bin/python bench/faults.py --database-url URL [--concurrency N] [--before S]
                                     [--hold S] [--after S] [--slow-clients N]
                                     [--restart-postgres]

Citegate reaches PostgreSQL through a TCP proxy this script controls (tests/tcp_proxy.py) and a
fake Messages API on 127.0.0.1 that this script serves and can make fail or stall. The faults,
each held --hold seconds between --before and --after seconds of plain load:

- database cut: every connection through the proxy dropped, new ones refused; then restored.
- upstream failing: the fake answers every Messages request 500 ``api_error``.
- upstream stalling: the fake holds every Messages request unanswered, then answers them all.
- kill -9: Citegate's processes killed, and `citegate serve` started again on the same port
  (the fault lasts until /readyz answers 200: the restart's time, migrations included).
- slow clients: --slow-clients connections send a request's headers a byte a second, and
  as many send a body a byte a second, for --slow-hold seconds, while the load goes on.
- PostgreSQL restarted (only with --restart-postgres): ``pg_ctlcluster
  --skip-systemctl-redirect 15 main restart``: the server itself, for everyone using it.

A write is acknowledged when it was answered 2xx (an upload: 201 with the document's id; a JSON
answer: 200 with its id; a streamed answer: its ``answer.done`` event); at the end every one is
fetched back, and one not found (or an answer not ``completed``) is lost. Recovery: from the end
of the fault (or the restart) to the end of the last request, started after it, that failed.
The database given is emptied first: use one of your own.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx
from aiohttp import web
from harness import free_port, make_database, process_tree, wait_up
from overhead import QUESTION, TEXTS, fake_events, fake_reply
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.tcp_proxy import TcpProxy  # noqa: E402

UPSTREAM_ERROR = json.dumps(
    {"type": "error", "error": {"type": "api_error", "message": "injected fault"}}
).encode()


class FakeUpstream:
    """The Messages API on 127.0.0.1, in a thread of its own: answers as overhead.py's fake
    does, or fails every request (``failing``), or holds every request until ``release``."""

    def __init__(self) -> None:
        self.port = free_port()
        self.failing = False
        self._loop = asyncio.new_event_loop()
        self._held: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        message = fake_reply(TEXTS)
        self._body, self._events = json.dumps(message).encode(), fake_events(message)

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(timeout=10)

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_get("/", self._alive)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()

    async def _alive(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _messages(self, request: web.Request) -> web.Response:
        body = await request.read()
        if self._held is not None:
            await self._held.wait()
        if self.failing:
            return web.Response(status=500, body=UPSTREAM_ERROR, content_type="application/json")
        if b'"stream":true' in body.replace(b" ", b""):
            return web.Response(body=self._events, content_type="text/event-stream")
        return web.Response(body=self._body, content_type="application/json")

    def hold(self) -> None:
        def start_holding() -> None:
            self._held = asyncio.Event()

        self._loop.call_soon_threadsafe(start_holding)

    def release(self) -> None:
        def stop_holding() -> None:
            if self._held is not None:
                self._held.set()
            self._held = None

        self._loop.call_soon_threadsafe(stop_holding)


class Citegate:
    """`citegate serve` on a fixed port, which can be killed and started again."""

    def __init__(self, database_url: str, upstream: str, workdir: Path) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.key = "cg_" + secrets.token_urlsafe(32)
        self.env = dict(
            os.environ,
            CITEGATE_AUTH="required",
            CITEGATE_BOOTSTRAP_API_KEY=self.key,
            CITEGATE_LOG_LEVEL="ERROR",
            CITEGATE_RATE_LIMIT_PER_MINUTE="0",
            CITEGATE_DATABASE_URL=database_url,
            ANTHROPIC_API_KEY="bench-key",
            ANTHROPIC_BASE_URL=upstream,
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        )
        self.log = (workdir / "citegate.log").open("ab")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        citegate = str(Path(sys.executable).parent / "citegate")
        command = [citegate, "serve", "--port", str(self.port)]
        self.process = subprocess.Popen(command, env=self.env, stdout=self.log, stderr=self.log)

    def kill(self) -> None:
        assert self.process is not None
        for pid in process_tree(self.process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=60)


@dataclass
class Outcome:
    kind: str  # upload, answer, stream
    began: float
    ended: float
    status: int | None  # None: no HTTP response (refused, reset, timed out)
    acknowledged: str | None = None  # the id of what was written
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300 and not self.error


@dataclass
class Load:
    """Requests sent without pause by ``concurrency`` workers, each outcome noted."""

    base: str
    headers: dict[str, str]
    document_ids: list[str]
    outcomes: list[Outcome] = field(default_factory=list)
    running: bool = True

    async def run(self, concurrency: int) -> None:
        timeout = aiohttp.ClientTimeout(total=120, sock_connect=5)
        async with aiohttp.ClientSession(headers=self.headers, timeout=timeout) as http:
            await asyncio.gather(*(self._worker(http, n) for n in range(concurrency)))

    async def _worker(self, http: aiohttp.ClientSession, number: int) -> None:
        kinds: list[Callable[[aiohttp.ClientSession, int], Awaitable[Outcome]]] = [
            self._upload,
            self._answer,
            self._stream,
        ]
        turn = number
        while self.running:
            began = time.monotonic()
            try:
                outcome = await kinds[turn % 3](http, turn)
            except (TimeoutError, aiohttp.ClientError, OSError) as error:
                kind = ["upload", "answer", "stream"][turn % 3]
                outcome = Outcome(kind, began, time.monotonic(), None, error=type(error).__name__)
                await asyncio.sleep(0.05)  # refused at once: do not spin
            self.outcomes.append(outcome)
            turn += 1

    async def _upload(self, http: aiohttp.ClientSession, turn: int) -> Outcome:
        began = time.monotonic()
        body = {"source": {"type": "text", "data": f"Note {turn}: {secrets.token_hex(8)}."}}
        async with http.post(f"{self.base}/v1/documents", json=body) as response:
            data = await response.read()
            written = json.loads(data)["id"] if response.status == 201 else None
            return Outcome("upload", began, time.monotonic(), response.status, written)

    async def _answer(self, http: aiohttp.ClientSession, turn: int) -> Outcome:
        began = time.monotonic()
        body = {"question": QUESTION, "document_ids": self.document_ids}
        async with http.post(f"{self.base}/v1/answers", json=body) as response:
            data = await response.read()
            written = json.loads(data)["id"] if response.status == 200 else None
            return Outcome("answer", began, time.monotonic(), response.status, written)

    async def _stream(self, http: aiohttp.ClientSession, turn: int) -> Outcome:
        began = time.monotonic()
        body = {"question": QUESTION, "document_ids": self.document_ids, "stream": True}
        async with http.post(f"{self.base}/v1/answers", json=body) as response:
            if response.status != 200:
                await response.read()
                return Outcome("stream", began, time.monotonic(), response.status)
            event, written, error = "", None, "stream ended before answer.done"
            async for raw in response.content:
                line = raw.decode().rstrip("\r\n")
                if line.startswith("event: "):
                    event = line[len("event: ") :]
                elif line.startswith("data: ") and event == "answer.done":
                    written, error = json.loads(line[len("data: ") :])["id"], ""
                elif line.startswith("data: ") and event == "error":
                    error = "error event: " + line[len("data: ") :][:200]
            return Outcome("stream", began, time.monotonic(), 200, written, error)


@dataclass
class Fault:
    name: str
    inject: Callable[[], None]
    remove: Callable[[], None]
    in_flight_only: bool = False  # the kill: what it cuts is in flight
    hold: float | None = None  # seconds, when not --hold


def slow_connections(port: int, count: int, stop: threading.Event) -> dict[str, float]:
    """``count`` connections sending headers a byte a second and as many sending a body a
    byte a second, until ``stop``; the seconds after which the server closed each."""
    header = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 4000
    start_body = (
        b"POST /v1/documents HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100000\r\n\r\n"
    )
    sockets: list[tuple[str, socket.socket, float]] = []
    for number in range(count):
        for kind in ("headers", "body"):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.setblocking(False)
            if kind == "body":
                sock.sendall(start_body)
            sockets.append((f"{kind}-{number}", sock, time.monotonic()))
    closed: dict[str, float] = {}
    position = 0
    while not stop.is_set() and len(closed) < len(sockets):
        for name, sock, opened in sockets:
            if name in closed:
                continue
            try:
                sock.send(header[position : position + 1] if name[0] == "h" else b" ")
                with contextlib.suppress(BlockingIOError):
                    if sock.recv(65536) == b"":
                        closed[name] = time.monotonic() - opened
            except OSError:
                closed[name] = time.monotonic() - opened
        position += 1
        stop.wait(1)
    for _, sock, _ in sockets:
        sock.close()
    return closed


def summarize(
    name: str, outcomes: list[Outcome], start: float, fault: tuple[float, float], end: float
) -> dict[str, Any]:
    began, ended = fault
    mine = [o for o in outcomes if start <= o.began < end]
    during = [o for o in mine if began <= o.began <= ended or o.began < began < o.ended]
    outside = [o for o in mine if not (began <= o.began <= ended or o.began < began < o.ended)]
    failed_after = [o for o in mine if o.began > ended and not o.ok]
    recovery = max((o.ended - ended for o in failed_after), default=0.0)
    return {
        "fault": name,
        "requests": len(mine),
        "ok": sum(o.ok for o in mine),
        "5xx during": sum(o.status is not None and o.status >= 500 for o in during),
        "5xx outside": sum(o.status is not None and o.status >= 500 for o in outside),
        "other failures": sum(not o.ok and (o.status is None or o.status < 500) for o in mine),
        "recovery s": round(recovery, 2),
        "fault s": round(ended - began, 2),
    }


def lost_writes(base: str, headers: dict[str, str], outcomes: list[Outcome]) -> dict[str, int]:
    lost = {"upload": 0, "answer": 0, "stream": 0}
    with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
        for outcome in outcomes:
            if not outcome.ok or outcome.acknowledged is None:
                continue
            if outcome.kind == "upload":
                response = http.get(f"/v1/documents/{outcome.acknowledged}")
                lost["upload"] += response.status_code != 200
            else:
                response = http.get(f"/v1/answers/{outcome.acknowledged}")
                kept = response.status_code == 200 and response.json()["status"] == "completed"
                lost[outcome.kind] += not kept
    return lost


def run(args: argparse.Namespace) -> None:
    url = make_url(args.database_url)
    assert url.drivername.startswith("postgresql"), "PostgreSQL only: the faults cut a server"
    make_database(args.database_url, fresh=True)
    workdir = Path(tempfile.mkdtemp(prefix="citegate-faults-"))
    upstream = FakeUpstream()
    upstream.start()
    with TcpProxy(url.host or "127.0.0.1", url.port or 5432) as proxy:
        proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(False)
        citegate = Citegate(proxied, f"http://127.0.0.1:{upstream.port}", workdir)
        citegate.start()
        try:
            wait_up(f"{citegate.base}/healthz")
            headers = {"Authorization": f"Bearer {citegate.key}"}
            document_ids = []
            with httpx.Client(base_url=citegate.base, headers=headers, timeout=60) as http:
                for index, text in enumerate(TEXTS):
                    body = {"source": {"type": "text", "data": text}, "title": f"Document {index}"}
                    response = http.post("/v1/documents", json=body)
                    response.raise_for_status()
                    document_ids.append(response.json()["id"])
            load = Load(citegate.base, headers, document_ids)
            results = asyncio.run(drive(args, load, citegate, upstream, proxy))
            print(f"{'fault':<22} {'requests':>8} {'2xx':>6} {'5xx in':>7} {'5xx out':>8} "
                  f"{'other':>6} {'lost':>5} {'recovery':>9} {'fault s':>8}")  # fmt: skip
            lost = lost_writes(citegate.base, headers, load.outcomes)
            acknowledged = sum(o.ok and o.acknowledged is not None for o in load.outcomes)
            for row in results:
                print(
                    f"{row['fault']:<22} {row['requests']:>8} {row['ok']:>6} "
                    f"{row['5xx during']:>7} {row['5xx outside']:>8} {row['other failures']:>6} "
                    f"{row['lost']:>5} {row['recovery s']:>8}s {row['fault s']:>7}s"
                )
                for detail in row.get("details", []):
                    print(f"    {detail}")
            print(
                f"acknowledged writes: {acknowledged}, fetched back after the run; lost: "
                f"{sum(lost.values())} ({', '.join(f'{k} {v}' for k, v in lost.items())})"
            )
        finally:
            citegate.stop()
    print(f"Citegate's log: {workdir / 'citegate.log'}")


async def drive(
    args: argparse.Namespace,
    load: Load,
    citegate: Citegate,
    upstream: FakeUpstream,
    proxy: TcpProxy,
) -> list[dict[str, Any]]:
    runner = asyncio.create_task(load.run(args.concurrency))
    stop_slow = threading.Event()
    slow_result: dict[str, float] = {}
    slow_thread: threading.Thread | None = None

    def start_slow() -> None:
        nonlocal slow_thread

        def work() -> None:
            slow_result.update(slow_connections(citegate.port, args.slow_clients, stop_slow))

        slow_thread = threading.Thread(target=work, daemon=True)
        slow_thread.start()

    def stop_slow_clients() -> None:
        stop_slow.set()
        if slow_thread is not None:
            slow_thread.join(timeout=30)

    def kill_and_restart() -> None:
        citegate.kill()
        citegate.start()

    def set_failing(value: bool) -> Callable[[], None]:
        def apply() -> None:
            upstream.failing = value

        return apply

    faults = [
        Fault("none", lambda: None, lambda: None),
        Fault("database cut", proxy.cut, proxy.restore),
        Fault("upstream failing", set_failing(True), set_failing(False)),
        Fault("upstream stalling", upstream.hold, upstream.release),
        Fault("kill -9 and restart", kill_and_restart, lambda: None, in_flight_only=True),
        Fault("slow clients", start_slow, stop_slow_clients, hold=args.slow_hold),
    ]
    if args.restart_postgres:
        faults.append(Fault("PostgreSQL restarted", restart_postgres, lambda: None, True))
    rows = []
    for fault in faults:
        start = time.monotonic()
        await asyncio.sleep(args.before)
        began = time.monotonic()
        await asyncio.to_thread(fault.inject)
        if fault.in_flight_only:
            await asyncio.to_thread(wait_healthy, citegate.base)
        else:
            await asyncio.sleep(args.hold if fault.hold is None else fault.hold)
        await asyncio.to_thread(fault.remove)
        ended = time.monotonic()
        await asyncio.sleep(args.after)
        rows.append((fault.name, start, (began, ended), time.monotonic()))
    load.running = False
    await runner
    results = []
    for name, start, window, end in rows:
        row = summarize(name, load.outcomes, start, window, end)
        mine = [o for o in load.outcomes if start <= o.began < end and o.ok and o.acknowledged]
        lost = lost_writes(load.base, load.headers, mine)
        row["lost"] = sum(lost.values())
        details = []
        if name == "slow clients":
            held = len(slow_result)
            seconds = sorted(slow_result.values())
            details.append(
                f"{2 * args.slow_clients} slow connections, {held} closed by Citegate, "
                f"after {seconds[0]:.0f}-{seconds[-1]:.0f} s"
                if seconds
                else "none closed"
            )
        failures = sorted({o.error or str(o.status) for o in load.outcomes
                           if start <= o.began < end and not o.ok})  # fmt: skip
        if failures:
            details.append("failures: " + ", ".join(failures)[:300])
        row["details"] = details
        results.append(row)
    return results


def wait_healthy(base: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                return
        time.sleep(0.05)
    raise RuntimeError("Citegate did not come back")


def restart_postgres() -> None:
    """The shared server restarted: only with --restart-postgres, never by default."""
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", "15", "main", "restart"], check=True
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", required=True, help="a PostgreSQL database of yours")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--before", type=float, default=3, help="seconds of load before a fault")
    parser.add_argument("--hold", type=float, default=4, help="seconds a fault lasts")
    parser.add_argument("--after", type=float, default=5, help="seconds of load after it")
    parser.add_argument("--slow-clients", type=int, default=20)
    parser.add_argument(
        "--slow-hold",
        type=float,
        default=25,
        help="seconds the slow clients go on (past CITEGATE_HEADER_TIMEOUT_SECONDS and "
        "CITEGATE_BODY_TIMEOUT_SECONDS, 10 and 20 by default)",
    )
    parser.add_argument(
        "--restart-postgres",
        action="store_true",
        help="also restart the PostgreSQL server (pg_ctlcluster): everyone's, not only yours",
    )
    run(parser.parse_args())


if __name__ == "__main__":
    main()
