"""A stream whose client stops reading is let go after the send timeout: the upstream response
is closed and the answer stored ``cancelled`` with what arrived, as when a client goes away."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from app.settings import Settings
from tests.conftest import Served, behind
from tests.fake_upstream import GRASS, FakeUpstream, Reply, message, sse, sse_message

CHUNK = "stalled " + "x" * 16_376  # one text delta of 16 KiB
DELTAS = 4096  # 64 MiB: far more than the sockets and buffers between here and there can hold


@pytest.fixture(scope="module")
def impatient(settings: Settings, fake: FakeUpstream) -> Iterator[Served]:
    with behind(settings, fake, stream_send_timeout_seconds=0.5) as app:
        yield app


def long_answer() -> list[bytes]:
    """message_start, ping and content_block_start, then the deltas, then the rest."""
    events = sse_message([{"type": "text", "text": ""}])
    delta = sse(
        "content_block_delta",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": CHUNK}},
    )
    return [*events[:3], *[delta] * DELTAS, *events[3:]]


def open_and_stop_reading(served: Served, body: dict[str, object]) -> tuple[socket.socket, str]:
    """POST a streamed question on a socket with a small receive buffer; read up to the answer's
    id in ``answer.started``, then read nothing more."""
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    client.connect(("127.0.0.1", served.port))
    payload = json.dumps(body).encode()
    client.sendall(
        b"POST /v1/answers HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        + f"content-length: {len(payload)}\r\n\r\n".encode()
        + payload
    )
    received = b""
    while (
        b"answer.started" not in received or b"\r\n\r\n" not in received.split(b"answer.started")[1]
    ):
        piece = client.recv(1024)
        assert piece, received
        received += piece
    assert received.startswith(b"HTTP/1.1 200"), received
    data = received.split(b"event: answer.started\r\ndata: ")[1].split(b"\r\n")[0]
    return client, json.loads(data)["id"]


def test_a_client_that_stops_reading_is_let_go_and_its_answer_stored_cancelled(
    client: httpx.Client, impatient: Served, fake: FakeUpstream
) -> None:
    with httpx.Client(base_url=impatient.base_url, timeout=30) as api:
        document_id = api.post(
            "/v1/documents", json={"source": {"type": "text", "data": GRASS}}
        ).json()["id"]
        conversation_id = api.post(
            "/v1/conversations", json={"document_ids": [document_id]}
        ).json()["id"]
        # A pause between pieces, however short, lets the fake notice its client has gone.
        fake.reset(Reply(events=long_answer(), pause=1e-6))
        body = {"question": "Grass?", "conversation_id": conversation_id, "stream": True}
        stalled, answer_id = open_and_stop_reading(impatient, body)
        with stalled:
            deadline = time.monotonic() + 30
            while (stored := api.get(f"/v1/answers/{answer_id}")).json()["status"] == (
                "in_progress"
            ):
                assert time.monotonic() < deadline, "the stalled stream was never let go"
                time.sleep(0.05)
            while not fake.stream_closed.is_set() and time.monotonic() < deadline:
                time.sleep(0.05)
            answer = stored.json()
            assert answer["status"] == "cancelled"
            delivered, rest = divmod(len(answer["text"]), len(CHUNK))
            assert rest == 0 and 0 < delivered < DELTAS
            assert answer["text"] == CHUNK * delivered
            assert fake.stream_closed.is_set() and not fake.stream_finished
            # The conversation is free again: the stalled stream no longer holds it.
            fake.reset(Reply(body=message([{"type": "text", "text": "Green."}])))
            again = api.post(
                "/v1/answers",
                json={"question": "And now?", "conversation_id": conversation_id},
            )
            assert again.status_code == 200, again.text
