"""What Citegate adds to a Messages API call: POST /v1/answers with 3 text documents of about
100 KB each, against POSTing the equivalent Messages request straight to the same fake upstream
(on 127.0.0.1, answering at once with cited text). Prints figures; asserts nothing.

    .venv/bin/python bench/overhead.py [--requests N] [--database-url URL]

Each of the three parties has its own process: the fake upstream, `citegate serve` (one
worker), and this client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from typing import Any

import httpx
from harness import Stack, cpu_seconds, load_client, own_cpu_seconds, peak_rss_mib, running

WORDS = (
    "the of and to in is was for on that with as by at from it an be this which are or have "
    "market report system data model growth service customer value process results analysis"
).split()


def document_text(seed: int, size: int = 100_000) -> str:
    rng = random.Random(seed)
    out, total = [], 0
    while total < size:
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 20))).capitalize()
        out.append(sentence + ". ")
        total += len(sentence) + 2
    return "".join(out)


def fake_reply(texts: list[str]) -> dict[str, Any]:
    """An answer citing the second sentence of each document, as the real API would."""
    content: list[dict[str, Any]] = [{"type": "text", "text": "According to the documents, "}]
    for index, text in enumerate(texts):
        start = text.index(". ") + 2
        end = text.index(". ", start) + 2
        content.append(
            {
                "type": "text",
                "text": f"point {index}",
                "citations": [
                    {
                        "type": "char_location",
                        "cited_text": text[start:end],
                        "document_index": index,
                        "document_title": f"Document {index}",
                        "start_char_index": start,
                        "end_char_index": end,
                    }
                ],
            }
        )
    return {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-5",
        "content": content,
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 30, "cache_read_input_tokens": 75000},
    }


def serve_fake(port: int) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    body = json.dumps(fake_reply([document_text(n) for n in range(3)])).encode()

    async def messages(request: Request) -> Response:
        await request.body()
        return Response(body, media_type="application/json", headers={"request-id": "req_b"})

    app = Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


async def timed(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> float:
    started = time.perf_counter()
    response = await client.post(url, json=body)
    elapsed = time.perf_counter() - started
    assert response.status_code == 200, response.text[:300]
    return elapsed


async def run(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], count: int, concurrency: int
) -> tuple[list[float], float]:
    latencies: list[float] = []
    queue = iter(range(count))

    async def worker() -> None:
        for _ in queue:
            latencies.append(await timed(client, url, body))

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, count / (time.perf_counter() - started)


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


async def measure(stack: Stack, count: int) -> None:
    citegate, fake, pid = stack.citegate, stack.fake, stack.pid
    assert fake is not None and stack.fake_pid is not None
    texts = [document_text(n) for n in range(3)]
    async with load_client(stack, timeout=60, max_connections=32) as client:
        ids = []
        for index, text in enumerate(texts):
            response = await client.post(
                f"{citegate}/v1/documents",
                json={"source": {"type": "text", "data": text}, "title": f"Document {index}"},
            )
            ids.append(response.json()["id"])
        question = "What does the report say about growth?"
        ask = {"question": question, "document_ids": ids}
        direct = {
            "model": "claude-sonnet-5",
            "max_tokens": 1024,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        *(
                            {
                                "type": "document",
                                "source": {"type": "text", "media_type": "text/plain", "data": t},
                                "title": f"Document {i}",
                                "citations": {"enabled": True},
                                "cache_control": {"type": "ephemeral"},
                            }
                            for i, t in enumerate(texts)
                        ),
                        {"type": "text", "text": question},
                    ],
                }
            ],
        }
        for _ in range(20):  # warm up both paths
            await timed(client, f"{citegate}/v1/answers", ask)
            await timed(client, f"{fake}/v1/messages", direct)
        for concurrency in (1, 16):
            n = count if concurrency == 1 else count * 2
            base, base_rps = await run(client, f"{fake}/v1/messages", direct, n, concurrency)
            cpu = cpu_seconds(pid), cpu_seconds(stack.fake_pid), own_cpu_seconds()
            ours, rps = await run(client, f"{citegate}/v1/answers", ask, n, concurrency)
            cpu_ms = (cpu_seconds(pid) - cpu[0]) / n * 1000
            fake_ms = (cpu_seconds(stack.fake_pid) - cpu[1]) / n * 1000
            client_ms = (own_cpu_seconds() - cpu[2]) / n * 1000
            p50 = (percentile(ours, 50) - percentile(base, 50)) * 1000
            p95 = (percentile(ours, 95) - percentile(base, 95)) * 1000
            print(
                f"{'sequential' if concurrency == 1 else f'{concurrency} concurrent'}: "
                f"added latency p50 {p50:.1f} ms, p95 {p95:.1f} ms\n"
                f"  through Citegate: {rps:.0f} req/s, p50 {percentile(ours, 50) * 1000:.1f} ms, "
                f"p95 {percentile(ours, 95) * 1000:.1f} ms\n"
                f"  CPU per answer: Citegate {cpu_ms:.2f} ms, fake {fake_ms:.2f} ms, "
                f"this client {client_ms:.2f} ms\n"
                f"  straight to the fake: {base_rps:.0f} req/s, p50 "
                f"{percentile(base, 50) * 1000:.1f} ms, p95 {percentile(base, 95) * 1000:.1f} ms"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--database-url", help="default: a new SQLite file")
    parser.add_argument("--serve-fake", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake:
        serve_fake(args.serve_fake)
        return

    with running(args.database_url, __file__) as stack:
        assert stack.fake is not None
        print(f"database: {stack.database}; one worker")
        asyncio.run(measure(stack, args.requests))
        print(f"Citegate peak RSS: {peak_rss_mib(stack.pid):.0f} MiB")


if __name__ == "__main__":
    main()
