"""The least a relay of streamed answers can cost on a machine: a raw ASGI app on uvicorn (no
framework, no middleware) that posts the Messages request it is given to the upstream through
the client stack Citegate uses (httpx's transport API over httpx-aiohttp's transport), reads
the events with httpx-sse, parses each as JSON and frames it again, one write per event.
Nothing checked, resolved or stored. bench/streams.py --relays measures it beside Citegate and
bench/forwarder.py.

    .venv/bin/python bench/relay.py --port 9000 --upstream http://127.0.0.1:9001
"""

from __future__ import annotations

import argparse
from typing import Any

import httpx
import orjson
import uvicorn
from httpx_aiohttp import AiohttpTransport
from httpx_sse import EventSource

Message = dict[str, Any]


def create_app(upstream: str) -> Any:
    transport: AiohttpTransport | None = None

    async def app(scope: Message, receive: Any, send: Any) -> None:
        nonlocal transport
        if scope["type"] == "lifespan":
            await receive()  # lifespan.startup
            transport = AiohttpTransport(limits=httpx.Limits(max_connections=None))
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
            await transport.aclose()
            await send({"type": "lifespan.shutdown.complete"})
            return
        assert transport is not None
        if scope["path"] == "/healthz":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        request = httpx.Request(
            "POST",
            f"{upstream}/v1/messages",
            content=body,
            headers={"content-type": "application/json"},
            extensions={"timeout": httpx.Timeout(300).as_dict()},
        )
        response = await transport.handle_async_request(request)
        try:
            async for sse in EventSource(response).aiter_sse():
                data = orjson.dumps(orjson.loads(sse.data)).decode()
                framed = f"event: {sse.event}\r\ndata: {data}\r\n\r\n".encode()
                await send({"type": "http.response.body", "body": framed, "more_body": True})
        finally:
            await response.aclose()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    args = parser.parse_args()
    uvicorn.run(
        create_app(args.upstream),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
        backlog=4096,
    )


if __name__ == "__main__":
    main()
