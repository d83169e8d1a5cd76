"""Revocation with no window: two `citegate serve` processes on one database (PostgreSQL when
the suite runs on it), each holding a key it has accepted before; a key disabled, revoked or
rotated through one is refused by the other on the very next request, and a rotation's old
secret works there until its grace period ends, then not. With a Redis for the rate limits
and without one: the change travels through the database either way."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from app.auth.scopes import ALL_SCOPES
from tests.conftest import REDIS_URL, free_port
from tests.e2e.test_auth import assert_unauthorized, bearer, make_key
from tests.e2e.test_shutdown import CitegateProcess


class Replica:
    """`citegate serve` on the test database; ``operator`` is a key with every scope."""

    def __init__(self, tmp_path: Path, env: dict[str, str], operator: str) -> None:
        self.operator = operator
        port = free_port()
        self.base_url = f"http://127.0.0.1:{port}"
        self.process = CitegateProcess(tmp_path, ["serve", "--port", str(port)], env)
        self.process.wait_until_healthy(self.base_url)

    def get(self, secret: str) -> httpx.Response:
        return httpx.get(f"{self.base_url}/v1/documents", headers=bearer(secret), timeout=30)


@pytest.fixture(params=["without Redis", "with Redis"])
def replicas(
    request: pytest.FixtureRequest, client: httpx.Client, database_url: str, tmp_path: Path
) -> Iterator[tuple[Replica, Replica]]:
    env = {"CITEGATE_DATABASE_URL": database_url, "CITEGATE_AUTH": "required"}
    if request.param == "with Redis":
        env["CITEGATE_REDIS_URL"] = REDIS_URL
    _, operator = make_key(database_url, "platform", scopes=ALL_SCOPES)
    with ExitStack() as stack:
        started = []
        for _ in range(2):
            replica = Replica(tmp_path, env, operator)
            stack.callback(replica.process.stop)
            started.append(replica)
        yield started[0], started[1]


def admin(replica: Replica, method: str, path: str, **body: object) -> dict[str, object]:
    response = httpx.request(
        method,
        f"{replica.base_url}/v1/admin{path}",
        json=body or None,
        headers=bearer(replica.operator),
        timeout=30,
    )
    assert response.status_code in (200, 201), response.text
    result: dict[str, object] = response.json()
    return result


def test_a_change_through_one_process_is_seen_by_the_other_on_its_next_request(
    replicas: tuple[Replica, Replica],
) -> None:
    one, two = replicas
    made = admin(one, "POST", "/api-keys", scopes=["read"])
    secret, path = str(made["secret"]), f"/api-keys/{made['id']}"
    for _ in range(3):  # accepted, and remembered, by both
        assert one.get(secret).status_code == 200
        assert two.get(secret).status_code == 200

    admin(one, "PATCH", path, status="disabled")
    assert_unauthorized(two.get(secret))
    admin(two, "PATCH", path, status="active")  # and back, through the other
    assert one.get(secret).status_code == 200

    admin(one, "DELETE", path)
    assert_unauthorized(two.get(secret))
    assert_unauthorized(one.get(secret))


def test_rotation_honours_its_grace_period_on_every_process(
    replicas: tuple[Replica, Replica],
) -> None:
    one, two = replicas
    made = admin(one, "POST", "/api-keys", scopes=["read"])
    old, rotate = str(made["secret"]), f"/api-keys/{made['id']}/rotate"
    assert two.get(old).status_code == 200

    rotated = admin(one, "POST", rotate, grace_seconds=3)
    new = str(rotated["secret"])
    ends = datetime.fromisoformat(str(rotated["previous_secret_expires_at"]))
    assert two.get(new).status_code == 200  # the new secret at once
    while datetime.now(UTC) < ends:
        status = two.get(old).status_code
        if datetime.now(UTC) < ends:  # answered within the grace, so let in
            assert status == 200
        time.sleep(0.25)
    time.sleep(max(0.0, (ends - datetime.now(UTC)).total_seconds()) + 0.05)
    assert_unauthorized(two.get(old))  # to the second: not a moment past its grace
    assert_unauthorized(one.get(old))
    assert two.get(new).status_code == 200

    # Rotated with no grace: the secret just given out stops on the other process at once.
    newest = str(admin(one, "POST", rotate, grace_seconds=0)["secret"])
    assert_unauthorized(two.get(new))
    assert two.get(newest).status_code == 200
