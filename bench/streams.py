"""Many streamed answers held open at once: N `"stream": true` answers through Citegate against
a fake upstream (its own process, on 127.0.0.1) that trickles tokens for about 10 s each. The
streams start at --rate per second, so that all N are open together at the peak. Prints the
service's peak RSS, time to first event (p50/p95, against the upstream's own measured the same
way), the most streams open at once, event-loop lag, and the busiest second of the event loop's
thread while the streams start: near 100 % of a core, events queue and the p95 is a wait (the
same code then measures seconds on one run and tens of milliseconds on the next); well below,
it is the work. Asserts nothing.

    .venv/bin/python bench/streams.py [--streams 500] [--rate 100] [--deltas 100] [--pause 0.1]
        [--workers N] [--relays] [--database-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import statistics
import time
from typing import Any

import aiohttp
from harness import (
    Stack,
    cpu_seconds,
    load_client,
    loop_cpu,
    own_cpu_seconds,
    peak_rss_mib,
    process_tree,
    running,
)
from overhead import forwarding


def serve_fake(port: int, deltas: int, pause: float) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    def event(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()

    usage = {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 0}
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_bench",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-5",
            "content": [],
            "stop_reason": None,
            "usage": usage,
        },
    }

    async def trickle() -> Any:
        yield event("message_start", start)
        yield event(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        )
        for n in range(deltas):
            await asyncio.sleep(pause)
            delta = {"type": "text_delta", "text": f"token{n} "}
            yield event(
                "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
            )
        yield event("content_block_stop", {"type": "content_block_stop", "index": 0})
        yield event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {**usage, "output_tokens": deltas},
            },
        )
        yield event("message_stop", {"type": "message_stop"})

    async def messages(request: Request) -> StreamingResponse:
        await request.body()
        return StreamingResponse(trickle(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])
    # Idle connections kept for the whole run, as bench/overhead.py's fake keeps them: closed
    # after uvicorn's 5 s, one may close just as a client sends on it.
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        backlog=4096,
        timeout_keep_alive=3600,
    )


class Open:
    now = 0
    most = 0


async def first_event(
    client: aiohttp.ClientSession, url: str, body: dict[str, Any], delay: float = 0.0
) -> float:
    """Seconds from sending the request to the first event; then reads the stream to its end.

    The stream's bytes are not parsed into events, only searched for the end (and an error):
    the client shares the two cores with what it measures, and parsing every event cost it a
    core's tenth per 1,000 events a second."""
    await asyncio.sleep(delay)
    started = time.perf_counter()
    first = None
    ended = False
    tail = b""  # the end of the read before: a marker may be split between two reads
    Open.now += 1
    Open.most = max(Open.most, Open.now)
    try:
        async with client.post(url, json=body) as response:
            assert response.status == 200, await response.text()
            async for chunk in response.content.iter_any():
                if first is None:
                    first = time.perf_counter() - started
                seen = tail + chunk
                assert b"event: error" not in seen, seen
                ended = ended or any(marker in seen for marker in ENDS)
                tail = seen[-MARKER:]
    finally:
        Open.now -= 1
    assert first is not None and ended
    return first


ENDS = (b"event: answer.done", b"event: message_stop")
MARKER = max(len(marker) for marker in ENDS)


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def serving(pid: int) -> list[int]:
    """The processes that serve: with --workers, the supervisor's children (the workers, and
    multiprocessing's helper); else the service itself."""
    return process_tree(pid)[1:] or [pid]


class BusiestSecond:
    """While open, for its first ``seconds``: the most CPU any one of these processes' event
    loops used in a second, as a share of a core (read every quarter second). An event loop is
    one thread: near 100 %, events queue behind each other, and the time to first event grows
    with the queue rather than with the work, so this says whether a run's p95 is a wait or
    work. Given the seconds in which the streams start, it leaves out their ends (the answers
    stored), which no first event waits for."""

    def __init__(self, pids: list[int], seconds: float) -> None:
        self._pids = pids
        self._seconds = seconds
        self.share = 0.0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> BusiestSecond:
        self._task = asyncio.create_task(self._watch())
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _watch(self) -> None:
        seen: list[tuple[float, list[float]]] = []
        until = time.perf_counter() + self._seconds
        while time.perf_counter() < until:
            try:
                seen.append((time.perf_counter(), [loop_cpu(pid) for pid in self._pids]))
            except FileNotFoundError:  # a process has gone (a worker that crashed): no more
                return
            seen = seen[-5:]  # four quarters: one second
            (began, before), (now, after) = seen[0], seen[-1]
            if now - began >= 0.95:
                used = max(b - a for a, b in zip(before, after, strict=True))
                self.share = max(self.share, used / (now - began))
            await asyncio.sleep(0.25)


def lag_from_metrics(text: str) -> tuple[float, float, float]:
    """(mean, p99 upper bound, max bucket seen) of the event-loop lag histogram, in ms."""
    buckets: list[tuple[float, float]] = []
    total = count = 0.0
    for line in text.splitlines():
        if line.startswith("citegate_event_loop_lag_seconds_bucket"):
            bound = line.split('le="')[1].split('"')[0]
            buckets.append(
                (float("inf") if bound == "+Inf" else float(bound), float(line.split()[-1]))
            )
        elif line.startswith("citegate_event_loop_lag_seconds_sum"):
            total = float(line.split()[-1])
        elif line.startswith("citegate_event_loop_lag_seconds_count"):
            count = float(line.split()[-1])
    p99 = next(bound for bound, seen in buckets if seen >= 0.99 * count)
    worst = next(bound for bound, seen in buckets if seen >= count)
    return total / count * 1000, p99 * 1000, worst * 1000


# The Messages request sent straight to the fake and through the baselines.
DIRECT = {
    "model": "m",
    "max_tokens": 10,
    "stream": True,
    "messages": [{"role": "user", "content": "x"}],
}


async def relays(stack: Stack, streams: int, rate: float, deltas: int, base: list[float]) -> None:
    """The same streams through the bare forwarder (FastAPI and httpx, bytes passed through)
    and through bench/relay.py (no framework: what relaying costs on this machine at least)."""
    assert stack.fake is not None
    for script, args in (
        ("forwarder.py", ("--max-connections", str(streams + 10))),
        ("relay.py", ()),
    ):
        with forwarding(stack.fake, script=script, args=args) as (url, pid):
            async with load_client(stack, timeout=120, max_connections=streams + 10) as client:
                await asyncio.gather(
                    *(first_event(client, f"{url}/v1/messages", DIRECT) for _ in range(20))
                )
                cpu = cpu_seconds(pid)
                async with BusiestSecond([pid], streams / rate + 1) as busiest:
                    firsts = await asyncio.gather(
                        *(
                            first_event(client, f"{url}/v1/messages", DIRECT, n / rate)
                            for n in range(streams)
                        )
                    )
                cpu = cpu_seconds(pid) - cpu
        print(
            f"bench/{script}: time to first event p50 {percentile(firsts, 50) * 1000:.0f} ms, "
            f"p95 {percentile(firsts, 95) * 1000:.0f} ms (added p95 "
            f"{(percentile(firsts, 95) - percentile(base, 95)) * 1000:.0f} ms); CPU {cpu:.1f} s, "
            f"{cpu / (streams * (deltas + 6)) * 1e6:.0f} us per relayed upstream event; its event "
            f"loop's busiest second while streams started {busiest.share * 100:.0f}% of a core"
        )


async def measure(stack: Stack, streams: int, rate: float, deltas: int, with_relays: bool) -> None:
    citegate, fake, pid = stack.citegate, stack.fake, stack.pid
    assert fake is not None and stack.fake_pid is not None
    loops = serving(pid)
    # With 500 streams open, the client's own full garbage collections paused it for 100+ ms,
    # which showed up as Citegate's time to first event: no collector while measuring.
    gc.collect()
    gc.freeze()
    gc.disable()
    async with load_client(stack, timeout=120, max_connections=streams + 10) as client:
        created = await client.post(
            f"{citegate}/v1/documents",
            json={"source": {"type": "text", "data": "The grass is green. The sky is blue."}},
        )
        assert created.status in (200, 201), await created.text()  # 200: stored before
        document = await created.json()
        ask = {"question": "Colours?", "document_ids": [document["id"]], "stream": True}
        await asyncio.gather(
            *(first_event(client, f"{citegate}/v1/answers", ask) for _ in range(20))
        )
        base = await asyncio.gather(
            *(first_event(client, f"{fake}/v1/messages", DIRECT, n / rate) for n in range(streams))
        )
        upstream_most, Open.most = Open.most, 0
        cpu = cpu_seconds(pid)
        others = cpu_seconds(stack.fake_pid), own_cpu_seconds()
        started = time.perf_counter()
        async with BusiestSecond(loops, streams / rate + 1) as busiest:
            ours = await asyncio.gather(
                *(
                    first_event(client, f"{citegate}/v1/answers", ask, n / rate)
                    for n in range(streams)
                )
            )
        elapsed = time.perf_counter() - started
        cpu = cpu_seconds(pid) - cpu
        fake_cpu = cpu_seconds(stack.fake_pid) - others[0]
        client_cpu = own_cpu_seconds() - others[1]
        after = await (await client.get(f"{citegate}/metrics")).text()
    print(
        f"{streams} streams started at {rate:.0f}/s, done in {elapsed:.1f} s; at most "
        f"{Open.most} open at once through Citegate ({upstream_most} against the upstream alone)"
    )
    print(
        f"time to first event: upstream alone p50 {percentile(base, 50) * 1000:.0f} ms, "
        f"p95 {percentile(base, 95) * 1000:.0f} ms; through Citegate p50 "
        f"{percentile(ours, 50) * 1000:.0f} ms, p95 {percentile(ours, 95) * 1000:.0f} ms "
        f"(added p95 {(percentile(ours, 95) - percentile(base, 95)) * 1000:.0f} ms)"
    )
    events = streams * (deltas + 6)
    print(
        f"Citegate CPU: {cpu:.1f} s for {streams} streams ({cpu / elapsed * 100:.0f}% of a core), "
        f"{cpu / events * 1e6:.0f} us per relayed upstream event; meanwhile the fake upstream "
        f"used {fake_cpu / elapsed * 100:.0f}% of a core and this client "
        f"{client_cpu / elapsed * 100:.0f}%"
    )
    mean, p99, worst = lag_from_metrics(after)
    print(
        f"event-loop lag: mean {mean:.1f} ms, p99 <= {p99:.0f} ms, max <= {worst:.0f} ms; "
        f"busiest second while streams started {busiest.share * 100:.0f}% of a core"
        + (" (the busiest worker's)" if len(loops) > 1 else "")
    )
    if with_relays:
        await relays(stack, streams, rate, deltas, base)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--rate", type=float, default=100.0, help="streams started per second")
    parser.add_argument("--deltas", type=int, default=100)
    parser.add_argument("--pause", type=float, default=0.1)
    parser.add_argument("--database-url", help="default: a new SQLite file")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--relays",
        action="store_true",
        help="also the same streams through bench/forwarder.py and bench/relay.py",
    )
    parser.add_argument("--serve-fake", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake:
        serve_fake(args.serve_fake, args.deltas, args.pause)
        return
    fake_args = ("--deltas", str(args.deltas), "--pause", str(args.pause))
    serve_args = ("--workers", str(args.workers)) if args.workers > 1 else ()
    with running(args.database_url, __file__, *fake_args, serve_args=serve_args) as stack:
        assert stack.fake is not None
        asyncio.run(measure(stack, args.streams, args.rate, args.deltas, args.relays))
        rss = ", ".join(f"{peak_rss_mib(pid):.0f}" for pid in serving(stack.pid))
        print(f"database: {stack.database}; {args.workers} worker(s); peak RSS: {rss} MiB")


if __name__ == "__main__":
    main()
