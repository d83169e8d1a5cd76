"""What one upstream request costs the process that sends it, by HTTP client: httpx's
transport API over httpx-aiohttp, as Citegate sends (``create_transport``), an
``httpx.AsyncClient`` over that same transport, httpx over its own httpcore (the bare
forwarder's, bench/forwarder.py) and aiohttp alone; and Citegate's whole upstream call,
``UpstreamClient.create_message`` (the same, plus encoding the request's JSON, the retry loop,
a metric, and parsing the answer into a ``Message``). Each POSTs bench/overhead.py's
Messages request (three 100 KB documents, 300 KB of JSON) to its instant fake, in its own
process, and reads the whole answer, on uvloop as Citegate runs; the figure is this
process's CPU (user + system) per request, sent one at a time. Asserts nothing."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import httpx
import orjson
import uvloop
from harness import free_port, wait_up
from overhead import messages_request

from app.observability import Metrics
from app.settings import Settings
from app.upstream.client import UpstreamClient, create_transport

Send = Callable[[], Awaitable[None]]


async def cpu_per_request(send: Send, requests: int) -> float:
    for _ in range(100):  # warm: connections, caches
        await send()
    start = time.process_time()
    for _ in range(requests):
        await send()
    return (time.process_time() - start) / requests * 1e6


async def measure(base_url: str, requests: int, repetitions: int) -> None:
    request = messages_request(False)
    body = orjson.dumps(request)
    headers = {"content-type": "application/json"}
    settings = Settings(anthropic_base_url=base_url, anthropic_api_key="bench-key")
    transport, upstream_transport = create_transport(settings), create_transport(settings)
    upstream = UpstreamClient(upstream_transport, settings, Metrics())
    http = httpx.AsyncClient(base_url=base_url, transport=create_transport(settings))
    url = httpx.URL(f"{base_url}/v1/messages")
    forwarder = httpx.AsyncClient(base_url=base_url, timeout=60)
    session = aiohttp.ClientSession(base_url=base_url)

    async def through_httpx(client: httpx.AsyncClient) -> None:
        response = await client.post("/v1/messages", content=body, headers=headers)
        await response.aread()

    async def through_aiohttp() -> None:
        async with session.post("/v1/messages", data=body, headers=headers) as response:
            await response.read()

    async def through_transport() -> None:
        sent = httpx.Request("POST", url, content=body, headers=headers)
        response = await transport.handle_async_request(sent)
        await response.aread()

    async def through_upstream() -> None:
        await upstream.create_message(request)

    clients: dict[str, Send] = {
        "httpx transport API, httpx-aiohttp (Citegate)": through_transport,
        "httpx.AsyncClient over it": lambda: through_httpx(http),
        "httpx over httpcore (forwarder)": lambda: through_httpx(forwarder),
        "aiohttp alone": through_aiohttp,
        "UpstreamClient.create_message": through_upstream,
    }
    figures: dict[str, list[float]] = {name: [] for name in clients}
    try:
        for _ in range(repetitions):  # interleaved, as in bench/overhead.py
            for name, send in clients.items():
                figures[name].append(await cpu_per_request(send, requests))
    finally:
        await transport.aclose()
        await upstream_transport.aclose()
        await http.aclose()
        await forwarder.aclose()
        await session.close()
    print(f"CPU per 300 KB request and its answer, median of {repetitions}:")
    for name, values in figures.items():
        print(f"  {name:40} {statistics.median(values):6.0f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    port = free_port()
    overhead = Path(__file__).with_name("overhead.py")
    fake = subprocess.Popen([sys.executable, str(overhead), "--serve-fake", str(port)])
    try:
        wait_up(f"http://127.0.0.1:{port}/")
        uvloop.run(measure(f"http://127.0.0.1:{port}", args.requests, args.repetitions))
    finally:
        fake.terminate()
        fake.wait()


if __name__ == "__main__":
    main()
