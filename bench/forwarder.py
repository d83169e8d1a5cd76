"""The bare hop Citegate is measured against: FastAPI and one httpx client forwarding the bytes
of the Messages request it is given to the upstream, and relaying the answer's bytes (JSON or
events) back. Nothing parsed, nothing stored: the least any service in between must do.

With ``--events``, a streamed answer is relayed event by event on the stack Citegate's streams
use (httpx's transport API over httpx-aiohttp, httpx-sse's EventSource, each event's JSON
parsed and framed again, sse-starlette's EventSourceResponse with its ping and send timeout):
still nothing resolved or stored, so the least such a relay costs.

    .venv/bin/python bench/forwarder.py --port 9000 --upstream http://127.0.0.1:9001 [--events]
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import orjson
import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import StreamingResponse
from httpx_aiohttp import AiohttpTransport
from httpx_sse import EventSource
from sse_starlette import EventSourceResponse, ServerSentEvent


def create_app(upstream: str, max_connections: int = 100, events: bool = False) -> FastAPI:
    limits = httpx.Limits(max_connections=max_connections)  # httpx's default: 100
    client = httpx.AsyncClient(base_url=upstream, timeout=60, limits=limits)
    transport = AiohttpTransport(limits=limits)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await client.aclose()
        await transport.aclose()

    app = FastAPI(lifespan=lifespan)
    headers = {"x-api-key": "bench-key", "anthropic-version": "2023-06-01"}

    async def relay_events(body: bytes) -> Response:
        sent = httpx.Request(
            "POST",
            f"{upstream}/v1/messages",
            content=body,
            headers={**headers, "content-type": "application/json"},
            extensions={"timeout": httpx.Timeout(60).as_dict()},
        )
        upstream_response = await transport.handle_async_request(sent)

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for sse in EventSource(upstream_response).aiter_sse():
                    data = orjson.dumps(orjson.loads(sse.data)).decode()
                    yield ServerSentEvent(data, event=sse.event).encode()
            finally:
                await upstream_response.aclose()

        return EventSourceResponse(relay(), ping=15, send_timeout=30)

    @app.post("/v1/messages")
    async def messages(request: Request) -> Response:
        body = await request.body()
        if events and b'"stream":true' in body.replace(b" ", b""):
            return await relay_events(body)
        # The body's bytes as they came, the answer's bytes (JSON or events) as they come.
        upstream = await client.send(
            client.build_request(
                "POST",
                "/v1/messages",
                content=body,
                headers={**headers, "content-type": "application/json"},
            ),
            stream=True,
        )

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for chunk in upstream.aiter_raw():
                    yield chunk
            finally:
                await upstream.aclose()

        media_type = upstream.headers.get("content-type", "application/json")
        return StreamingResponse(relay(), upstream.status_code, media_type=media_type)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--max-connections", type=int, default=100)
    parser.add_argument("--events", action="store_true", help="relay a stream event by event")
    args = parser.parse_args()
    uvicorn.run(
        create_app(args.upstream, args.max_connections, args.events),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
