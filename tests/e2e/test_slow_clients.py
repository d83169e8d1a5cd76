"""Slow clients are dropped: a request whose headers are not whole within
``header_timeout_seconds`` has its connection closed (app.http_protocol), and one whose body
keeps the service waiting past ``body_timeout_seconds`` plus a second per
``body_min_bytes_per_second`` bytes that arrived is answered 408 ``request_timeout`` and closed
(app.api.body_checks), while other clients are served; an honest upload slower than the
timeout but faster than the rate succeeds. Raw sockets, against the served app."""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.errors import ErrorCode
from app.settings import Settings
from tests.conftest import ServedApp, _delete_everything, _run, free_port
from tests.e2e.test_shutdown import CitegateProcess

HEADER_TIMEOUT = 1.5
BODY_TIMEOUT = 1.5
MIN_RATE = 10_000  # bytes a second
MARGIN = 2.0  # a loaded machine's lateness, at most


@pytest.fixture(scope="module")
def app(settings: Settings, database_url: str) -> Iterator[ServedApp]:
    _run(_delete_everything(database_url))  # no key: the service is open
    limits = {
        "header_timeout_seconds": HEADER_TIMEOUT,
        "body_timeout_seconds": BODY_TIMEOUT,
        "body_min_bytes_per_second": MIN_RATE,
    }
    with ServedApp(settings.model_copy(update=limits)) as served:
        yield served


def connect(app: ServedApp) -> socket.socket:
    return socket.create_connection(("127.0.0.1", app.port), timeout=10)


def served_meanwhile(app: ServedApp) -> Callable[[], None]:
    """A check that another client is answered at once, on a connection of its own."""

    def check() -> None:
        started = time.monotonic()
        with httpx.Client(base_url=app.base_url, timeout=5) as http:
            assert http.get("/healthz").status_code == 200
            assert http.get("/v1/documents").status_code == 200
        assert time.monotonic() - started < 1.0

    return check


def trickle(
    sock: socket.socket, data: bytes, interval: float, meanwhile: Callable[[], None]
) -> tuple[float, bytes]:
    """Send ``data`` a byte every ``interval`` seconds, calling ``meanwhile`` after each byte,
    until the server closes the connection. Returns the seconds from the first byte to the
    close, and what the server answered."""
    started = time.monotonic()
    for byte in data:
        try:
            sock.sendall(bytes([byte]))
        except OSError:  # closed under the send: reset
            return time.monotonic() - started, b""
        meanwhile()
        answered = closed_within(sock, interval)
        if answered is not None:
            return time.monotonic() - started, answered
    raise AssertionError("every byte was sent and the connection is still open")


def closed_within(sock: socket.socket, interval: float) -> bytes | None:
    """What the server sent before closing, if it closes within ``interval``; None if it is
    still open then."""
    deadline = time.monotonic() + interval
    answered = b""
    while (left := deadline - time.monotonic()) > 0:
        readable, _w, _x = select.select([sock], [], [], left)
        if not readable:
            continue
        try:
            part = sock.recv(65536)
        except ConnectionResetError:
            return answered
        if not part:
            return answered
        answered += part
        deadline = time.monotonic() + 5  # the rest of an answer, then the close
    return None


def wait_closed(sock: socket.socket, seconds: float) -> tuple[float, bytes]:
    """Seconds until the server closes this connection, sending nothing, and what it sent."""
    started = time.monotonic()
    answered = closed_within(sock, seconds)
    assert answered is not None, f"still open after {seconds} s"
    return time.monotonic() - started, answered


def response_of(raw: bytes) -> tuple[int, dict[str, str], Any]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, json.loads(body)


def test_headers_sent_a_byte_a_second_are_cut_off_while_others_are_served(
    app: ServedApp,
) -> None:
    request = b"GET /v1/documents HTTP/1.1\r\nHost: citegate\r\nX-Slow: " + b"x" * 100
    with connect(app) as sock:
        took, answered = trickle(sock, request, 1.0, served_meanwhile(app))
    assert answered == b""  # no answer: closed
    assert HEADER_TIMEOUT - 0.2 < took < HEADER_TIMEOUT + MARGIN


def test_a_connection_that_sends_nothing_is_closed(app: ServedApp) -> None:
    with connect(app) as sock:
        took, answered = wait_closed(sock, HEADER_TIMEOUT + MARGIN)
    assert answered == b""
    assert took > HEADER_TIMEOUT - 0.2


def test_a_later_request_on_a_kept_connection_is_timed_from_its_first_byte(
    app: ServedApp,
) -> None:
    with connect(app) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: citegate\r\n\r\n")
        answered = b""
        while b'"ok"' not in answered and b"}" not in answered:
            answered += sock.recv(65536)
        assert answered.startswith(b"HTTP/1.1 200 ")
        # Idle past the header timeout, within uvicorn's keep-alive (5 s): still open.
        assert closed_within(sock, HEADER_TIMEOUT + 0.5) is None
        took, answered = trickle(sock, b"GET /healthz HTTP/1.1\r\n", 1.0, lambda: None)
    assert answered == b""
    assert HEADER_TIMEOUT - 0.2 < took < HEADER_TIMEOUT + MARGIN


def test_many_slow_headers_at_once_do_not_keep_others_waiting(app: ServedApp) -> None:
    slow = [connect(app) for _ in range(50)]
    try:
        for sock in slow:
            sock.sendall(b"POST /v1/documents HTTP/1.1\r\nHost: ")
        served_meanwhile(app)()
        for sock in slow:
            _took, answered = wait_closed(sock, HEADER_TIMEOUT + MARGIN)
            assert answered == b""
        served_meanwhile(app)()
    finally:
        for sock in slow:
            sock.close()


def headers_for(path: str, content_type: str, length: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: citegate\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


@pytest.mark.parametrize(
    ("path", "content_type", "body"),
    [
        ("/v1/documents", "application/json", b'{"source": {"type": "text", "data": "' + b"a" * 90),
        (
            "/v1/documents/upload",
            "multipart/form-data; boundary=b",
            b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\n'
            + b"a" * 90,
        ),
    ],
)
def test_a_body_sent_a_byte_a_second_is_refused_408_while_others_are_served(
    app: ServedApp, path: str, content_type: str, body: bytes
) -> None:
    with connect(app) as sock:
        sock.sendall(headers_for(path, content_type, 100_000))
        took, answered = trickle(sock, body, 1.0, served_meanwhile(app))
    status, headers, problem = response_of(answered)
    assert status == 408
    assert headers["content-type"] == "application/problem+json"
    assert headers["connection"] == "close"
    assert problem["code"] == ErrorCode.REQUEST_TIMEOUT
    assert problem["status"] == 408
    # The allowance: the timeout, and a second per MIN_RATE bytes (a few bytes: nothing).
    assert BODY_TIMEOUT - 0.2 < took < BODY_TIMEOUT + MARGIN


def test_a_body_below_the_rate_is_refused_past_the_timeout(app: ServedApp) -> None:
    """Steady at a fifth of the rate: the allowance grows by a fifth of the time it waits, so
    it runs out at BODY_TIMEOUT / (1 - 1/5)."""
    piece, interval = MIN_RATE // 50, 0.1  # a fifth of MIN_RATE a second
    with connect(app) as sock:
        sock.sendall(headers_for("/v1/documents/upload", "multipart/form-data; boundary=b", 10**7))
        sock.sendall(b'--b\r\nContent-Disposition: form-data; name="file"; filename="a"\r\n\r\n')
        started = time.monotonic()
        answered = None
        while answered is None:
            sock.sendall(b"a" * piece)
            answered = closed_within(sock, interval)
            assert time.monotonic() - started < 10
        took = time.monotonic() - started
    status, _, problem = response_of(answered)
    assert (status, problem["code"]) == (408, "request_timeout")
    expected = BODY_TIMEOUT / (1 - 1 / 5)
    assert expected - 0.3 < took < expected + MARGIN


def test_a_slow_body_to_the_messages_api_is_a_timeout_error(app: ServedApp) -> None:
    with connect(app) as sock:
        sock.sendall(headers_for("/anthropic/v1/messages", "application/json", 1000))
        sock.sendall(b'{"model": ')
        _took, answered = wait_closed(sock, BODY_TIMEOUT + MARGIN)
    status, _, error = response_of(answered)
    assert status == 408
    assert error["type"] == "error"
    assert error["error"]["type"] == "timeout_error"


def test_an_upload_slower_than_the_timeout_but_above_the_rate_succeeds(app: ServedApp) -> None:
    """An honest client on a slow link: 3 s for its body, twice the timeout, at twice the
    minimum rate (sent in pieces, paced, by httpx)."""
    text = b"Honest clients on slow links still upload. " * 1400  # 60 KB
    pieces = [text[i : i + 2_000] for i in range(0, len(text), 2_000)]

    def paced() -> Iterator[bytes]:
        boundary = b"--b\r\n"
        yield boundary + b'Content-Disposition: form-data; name="file"; filename="slow.txt"\r\n'
        yield b"Content-Type: text/plain\r\n\r\n"
        for piece in pieces:
            time.sleep(2_000 / (2 * MIN_RATE))
            yield piece
        yield b"\r\n--b--\r\n"

    started = time.monotonic()
    with httpx.Client(base_url=app.base_url, timeout=30) as http:
        response = http.post(
            "/v1/documents/upload",
            content=paced(),
            headers={"content-type": "multipart/form-data; boundary=b"},
        )
    assert response.status_code == 201, response.text
    assert response.json()["size_bytes"] == len(text)
    assert time.monotonic() - started > 2 * BODY_TIMEOUT


@pytest.mark.parametrize(
    ("request_head", "status"),
    [
        # A route that reads no body.
        (b"GET /healthz HTTP/1.1\r\nHost: citegate\r\nContent-Length: 1000\r\n\r\n", 200),
        # A body refused from its first bytes.
        (headers_for("/v1/documents/upload", "multipart/form-data; boundary=b", 1000), 400),
        # No route.
        (b"POST /v1/nowhere HTTP/1.1\r\nHost: citegate\r\nContent-Length: 1000\r\n\r\n", 404),
    ],
)
def test_a_body_answered_before_it_is_over_is_not_waited_for(
    app: ServedApp, request_head: bytes, status: int
) -> None:
    """The answer comes at once, and the connection closes after it rather than wait for the
    rest of a body that nobody reads."""
    with connect(app) as sock:
        sock.sendall(request_head + b"junk")
        took, answered = wait_closed(sock, 5)
    assert took < 1.0
    assert answered.startswith(b"HTTP/1.1 %d " % status)
    assert b"\r\nconnection: close\r\n" in answered


def test_citegate_serve_cuts_off_slow_headers_and_slow_bodies(tmp_path: Path) -> None:
    """The command line serves with the same protocol, and the settings reach it."""
    port = free_port()
    env = {
        "CITEGATE_HEADER_TIMEOUT_SECONDS": str(HEADER_TIMEOUT),
        "CITEGATE_BODY_TIMEOUT_SECONDS": str(BODY_TIMEOUT),
    }
    served = CitegateProcess(tmp_path, ["serve", "--port", str(port)], env)
    try:
        served.wait_until_healthy(f"http://127.0.0.1:{port}")
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\n")
            took, answered = wait_closed(sock, HEADER_TIMEOUT + MARGIN)
        assert answered == b""
        assert took > HEADER_TIMEOUT - 0.2
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(headers_for("/v1/documents", "application/json", 100) + b"{")
            took, answered = wait_closed(sock, BODY_TIMEOUT + MARGIN)
        assert response_of(answered)[0] == 408
        assert took > BODY_TIMEOUT - 0.2
    finally:
        served.stop()
