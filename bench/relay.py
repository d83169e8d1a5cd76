"""The least a relay of streamed answers can cost on a machine: a raw ASGI app on uvicorn (no
framework, no middleware) that posts the Messages request it is given to the upstream through
one aiohttp session, reads the events with Citegate's own reader (app/upstream/sse.py), parses
each as JSON and frames it again, one write per upstream read, as Citegate does. Nothing
checked, resolved or stored. bench/streams.py --relays measures it beside Citegate and
bench/forwarder.py.

    .venv/bin/python bench/relay.py --port 9000 --upstream http://127.0.0.1:9001
"""

from __future__ import annotations

import argparse
from typing import Any

import aiohttp
import orjson
import uvicorn

from app.upstream.sse import EventReader

Message = dict[str, Any]


def create_app(upstream: str) -> Any:
    session: aiohttp.ClientSession | None = None

    async def app(scope: Message, receive: Any, send: Any) -> None:
        nonlocal session
        if scope["type"] == "lifespan":
            await receive()  # lifespan.startup
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
            await session.close()
            await send({"type": "lifespan.shutdown.complete"})
            return
        assert session is not None
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
        json = {"content-type": "application/json"}
        async with session.post(f"{upstream}/v1/messages", data=body, headers=json) as response:
            reader = EventReader()
            async for chunk in response.content.iter_any():
                framed = []
                for name, data in reader.feed(chunk):
                    data = orjson.dumps(orjson.loads(data)).decode()
                    framed.append(f"event: {name}\r\ndata: {data}\r\n\r\n".encode())
                if framed:
                    message = {"type": "http.response.body", "body": b"".join(framed)}
                    await send({**message, "more_body": True})
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
