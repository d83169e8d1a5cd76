"""Tenants and API keys over HTTP (``/v1/admin/...``): the secret shown once and stored only as
a hash; an ``operator`` over every tenant, an ``admin`` over its own (another tenant's keys are
not found); disable, revoke, expire, rotate with a grace period; never open."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.pool import NullPool

from app.auth import keys as api_keys
from app.auth.scopes import ALL_SCOPES
from app.db.engine import create_engine, run_in_session
from tests.e2e.test_auth import assert_unauthorized, bearer, make_key, revoke


def make_operator(database_url: str) -> str:
    """A key with every scope, as the bootstrap key has."""
    _, key = run_in_session(
        database_url,
        lambda session: api_keys.create_key(session, "platform", scopes=ALL_SCOPES),
    )
    return key


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["code"] == code
    return body


class Platform:
    """An operator, two tenants, and an admin key of each."""

    def __init__(self, client: httpx.Client, database_url: str) -> None:
        self.client = client
        self.database_url = database_url
        self.operator = bearer(make_operator(database_url))
        self.a = self.post("/v1/admin/tenants", {"name": "tenant-a"}, self.operator).json()
        self.b = self.post("/v1/admin/tenants", {"name": "tenant-b"}, self.operator).json()
        self.admin_a = self.new_key(self.a["id"], ["admin", "read", "write"])
        self.admin_b = self.new_key(self.b["id"], ["admin", "read", "write"])

    def post(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> httpx.Response:
        response = self.client.post(path, json=body, headers=headers)
        assert response.status_code in (200, 201), response.text
        return response

    def new_key(
        self, tenant_id: str, scopes: list[str], by: dict[str, str] | None = None, **more: Any
    ) -> dict[str, Any]:
        body = {"tenant_id": tenant_id, "scopes": scopes, **more}
        made: dict[str, Any] = self.post("/v1/admin/api-keys", body, by or self.operator).json()
        made["headers"] = bearer(made["secret"])
        return made


@pytest.fixture
def platform(client: httpx.Client, database_url: str) -> Platform:
    return Platform(client, database_url)


def stored_key_columns(database_url: str) -> str:
    async def read() -> str:
        engine = create_engine(database_url, poolclass=NullPool)
        async with engine.connect() as connection:
            rows = (await connection.execute(text("SELECT * FROM api_keys"))).all()
        await engine.dispose()
        return repr(rows)

    return asyncio.run(read())


def test_a_key_made_over_http_is_shown_once_and_stored_as_a_hash(
    platform: Platform, client: httpx.Client, database_url: str
) -> None:
    made = platform.new_key(
        platform.a["id"], ["read"], by=platform.admin_a["headers"], name="reader"
    )
    secret = made["secret"]
    assert secret.startswith("cg_") and made["prefix"] == secret[:12]
    assert made["name"] == "reader" and made["scopes"] == ["read"]
    assert made["status"] == "active" and made["tenant_id"] == platform.a["id"]
    assert client.get("/v1/documents", headers=made["headers"]).status_code == 200
    # Never again: not when read, not when listed, not in the database.
    got = client.get(f"/v1/admin/api-keys/{made['id']}", headers=platform.admin_a["headers"])
    assert got.status_code == 200 and "secret" not in got.json()
    listed = client.get("/v1/admin/api-keys", headers=platform.admin_a["headers"])
    assert secret not in listed.text
    assert {k["id"] for k in listed.json()["data"]} == {made["id"], platform.admin_a["id"]}
    stored = stored_key_columns(database_url)
    assert secret not in stored and secret[12:] not in stored
    assert api_keys.hash_key(secret) in stored


def test_an_admin_sees_only_its_own_tenant(platform: Platform, client: httpx.Client) -> None:
    a, theirs = platform.admin_a["headers"], platform.admin_b
    missing = client.get("/v1/admin/api-keys/key_doesnotexist", headers=a)
    for method, path, body in [
        ("GET", f"/v1/admin/api-keys/{theirs['id']}", None),
        ("PATCH", f"/v1/admin/api-keys/{theirs['id']}", {"status": "disabled"}),
        ("DELETE", f"/v1/admin/api-keys/{theirs['id']}", None),
        ("POST", f"/v1/admin/api-keys/{theirs['id']}/rotate", {"grace_seconds": 0}),
    ]:
        response = client.request(method, path, json=body, headers=a)
        assert_problem(response, 404, "api_key_not_found")
        assert response.json()["detail"] == missing.json()["detail"].replace(
            "key_doesnotexist", theirs["id"]
        )
    assert_problem(
        client.get("/v1/admin/api-keys", params={"tenant_id": platform.b["id"]}, headers=a),
        404,
        "tenant_not_found",
    )
    made = client.post(
        "/v1/admin/api-keys", json={"tenant_id": platform.b["id"], "scopes": ["read"]}, headers=a
    )
    assert_problem(made, 404, "tenant_not_found")
    # B's key still works, untouched; the operator sees both tenants' keys.
    assert client.get("/v1/documents", headers=theirs["headers"]).status_code == 200
    every = client.get("/v1/admin/api-keys", headers=platform.operator).json()["data"]
    assert {platform.admin_a["id"], theirs["id"]} <= {k["id"] for k in every}
    # Tenants are the operator's alone.
    assert_problem(client.get("/v1/admin/tenants", headers=a), 403, "insufficient_scope")


def test_only_an_operator_grants_operator(platform: Platform, client: httpx.Client) -> None:
    a = platform.admin_a["headers"]
    escalate = {"tenant_id": platform.a["id"], "scopes": ["operator"]}
    assert_problem(
        client.post("/v1/admin/api-keys", json=escalate, headers=a), 403, "insufficient_scope"
    )
    reader = platform.new_key(platform.a["id"], ["read"], by=a)
    patch = client.patch(
        f"/v1/admin/api-keys/{reader['id']}", json={"scopes": ["operator"]}, headers=a
    )
    assert_problem(patch, 403, "insufficient_scope")
    # The read-only key cannot write, nor administer.
    write = client.post(
        "/v1/documents", json={"source": {"type": "text", "data": "x"}}, headers=reader["headers"]
    )
    assert_problem(write, 403, "insufficient_scope")
    assert_problem(
        client.get("/v1/admin/api-keys", headers=reader["headers"]), 403, "insufficient_scope"
    )
    # Rescoped, it writes at once.
    widened = client.patch(
        f"/v1/admin/api-keys/{reader['id']}", json={"scopes": ["read", "write"]}, headers=a
    )
    assert widened.status_code == 200 and widened.json()["scopes"] == ["read", "write"]
    again = client.post(
        "/v1/documents", json={"source": {"type": "text", "data": "x"}}, headers=reader["headers"]
    )
    assert again.status_code == 201, again.text


def test_disable_enable_and_revoke(platform: Platform, client: httpx.Client) -> None:
    a = platform.admin_a["headers"]
    key = platform.new_key(platform.a["id"], ["read"], by=a)
    path = f"/v1/admin/api-keys/{key['id']}"
    disabled = client.patch(path, json={"status": "disabled"}, headers=a)
    assert disabled.status_code == 200 and disabled.json()["status"] == "disabled"
    assert_unauthorized(client.get("/v1/documents", headers=key["headers"]))
    assert client.patch(path, json={"status": "active"}, headers=a).json()["status"] == "active"
    assert client.get("/v1/documents", headers=key["headers"]).status_code == 200
    revoked = client.delete(path, headers=a)
    assert revoked.status_code == 200
    assert revoked.json()["status"] == "revoked" and revoked.json()["revoked_at"]
    assert_unauthorized(client.get("/v1/documents", headers=key["headers"]))
    assert client.delete(path, headers=a).json() == revoked.json()  # revoked once, for good
    assert_problem(client.patch(path, json={"status": "active"}, headers=a), 409, "api_key_revoked")
    assert_problem(client.post(f"{path}/rotate", json={}, headers=a), 409, "api_key_revoked")
    assert_unauthorized(client.get("/v1/documents", headers=key["headers"]))


def test_rotation_with_and_without_grace(platform: Platform, client: httpx.Client) -> None:
    a = platform.admin_a["headers"]
    key = platform.new_key(platform.a["id"], ["read"], by=a)
    path = f"/v1/admin/api-keys/{key['id']}/rotate"
    for wrong in (False, "60", -1, 1.5):  # refused, and the key is not rotated
        refused = client.post(path, json={"grace_seconds": wrong}, headers=a)
        assert_problem(refused, 422, "validation_error")
    assert client.get("/v1/documents", headers=key["headers"]).status_code == 200
    rotated = client.post(path, json={"grace_seconds": 0}, headers=a)
    assert rotated.status_code == 200
    new = rotated.json()
    assert new["id"] == key["id"] and new["secret"] != key["secret"]
    assert new["previous_secret_expires_at"] is None
    assert_unauthorized(client.get("/v1/documents", headers=key["headers"]))
    assert client.get("/v1/documents", headers=bearer(new["secret"])).status_code == 200

    graced = client.post(path, json={"grace_seconds": 3}, headers=a).json()
    ends = datetime.fromisoformat(graced["previous_secret_expires_at"])
    old, newest = bearer(new["secret"]), bearer(graced["secret"])
    assert client.get("/v1/documents", headers=old).status_code == 200
    assert client.get("/v1/documents", headers=newest).status_code == 200
    while datetime.now(UTC) < ends:
        status = client.get("/v1/documents", headers=old).status_code
        if datetime.now(UTC) < ends:  # answered within the grace, so let in
            assert status == 200
        time.sleep(0.2)
    time.sleep(max(0.0, (ends - datetime.now(UTC)).total_seconds()) + 0.05)
    assert_unauthorized(client.get("/v1/documents", headers=old))
    assert client.get("/v1/documents", headers=newest).status_code == 200


def test_a_key_expires(platform: Platform, client: httpx.Client) -> None:
    ends = datetime.now(UTC) + timedelta(seconds=2)
    key = platform.new_key(platform.a["id"], ["read"], expires_at=ends.isoformat())
    assert client.get("/v1/documents", headers=key["headers"]).status_code == 200
    time.sleep(max(0.0, (ends - datetime.now(UTC)).total_seconds()) + 0.05)
    assert_unauthorized(client.get("/v1/documents", headers=key["headers"]))
    shown = client.get(f"/v1/admin/api-keys/{key['id']}", headers=platform.operator).json()
    assert shown["status"] == "expired"
    past = {"tenant_id": platform.a["id"], "expires_at": "2000-01-01T00:00:00Z"}
    assert_problem(
        client.post("/v1/admin/api-keys", json=past, headers=platform.operator),
        422,
        "validation_error",
    )


def test_tenants(platform: Platform, client: httpx.Client) -> None:
    op = platform.operator
    listed = client.get("/v1/admin/tenants", headers=op).json()["data"]
    assert {platform.a["id"], platform.b["id"]} <= {t["id"] for t in listed}
    renamed = client.patch(
        f"/v1/admin/tenants/{platform.a['id']}", json={"name": "tenant-a2"}, headers=op
    )
    assert renamed.status_code == 200 and renamed.json()["name"] == "tenant-a2"
    got = client.get(f"/v1/admin/tenants/{platform.a['id']}", headers=op)
    assert got.json() == renamed.json()
    taken = client.post("/v1/admin/tenants", json={"name": "tenant-b"}, headers=op)
    assert_problem(taken, 409, "tenant_name_taken")
    # Renamed to a taken name, alone or with a new budget: 409, and nothing changes.
    path = f"/v1/admin/tenants/{platform.a['id']}"
    for change in ({}, {"budget": {"usd": "5", "period": "day"}}):
        clash = client.patch(path, json={"name": "tenant-b", **change}, headers=op)
        assert_problem(clash, 409, "tenant_name_taken")
        assert client.get(path, headers=op).json() == renamed.json()
    assert_problem(client.get("/v1/admin/tenants/ten_nope", headers=op), 404, "tenant_not_found")


def test_admin_routes_are_never_open(client: httpx.Client) -> None:
    assert client.get("/readyz").json()["auth"] == "open"
    assert client.get("/v1/documents").status_code == 200
    for method, path in [
        ("GET", "/v1/admin/tenants"),
        ("POST", "/v1/admin/api-keys"),
        ("GET", "/v1/admin/api-keys"),
    ]:
        assert_unauthorized(client.request(method, path, json={}))


def test_every_admin_action_is_an_audit_event_with_no_secret(
    platform: Platform, client: httpx.Client, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    a, op = platform.admin_a["headers"], platform.operator
    secrets = [platform.admin_a["secret"], platform.admin_b["secret"]]
    request_ids: dict[str, str] = {}

    def act(method: str, path: str, headers: dict[str, str], body: Any = None) -> Any:
        response = client.request(method, path, json=body, headers=headers)
        assert response.status_code in (200, 201), response.text
        made = response.json()
        if "secret" in made:
            secrets.append(made["secret"])
        request_ids[f"{method} {path}"] = response.headers["x-request-id"]
        return made

    key = act("POST", "/v1/admin/api-keys", a, {"scopes": ["read"], "name": "audited"})
    path = f"/v1/admin/api-keys/{key['id']}"
    act("PATCH", path, a, {"status": "disabled", "name": "still audited"})
    act("POST", f"{path}/rotate", a, {"grace_seconds": 60})
    act("DELETE", path, a)
    act("PATCH", f"/v1/admin/tenants/{platform.a['id']}", op, {"name": "tenant-a-renamed"})
    cli_id, cli_secret = make_key(database_url, "tenant-a-renamed")  # the command line
    secrets.append(cli_secret)
    revoke(database_url, cli_id)
    # A wrong secret is refused without being echoed.
    wrong = client.get("/v1/documents", headers=bearer(key["secret"] + "x"))
    assert wrong.status_code == 401 and key["secret"] not in wrong.text

    listed = client.get("/v1/admin/audit-events", headers=a)
    assert listed.status_code == 200, listed.text
    events = listed.json()["data"]
    mine = [(e["action"], e["target_id"]) for e in events if e["target_id"] == key["id"]]
    assert mine == [
        ("api_key.revoked", key["id"]),
        ("api_key.rotated", key["id"]),
        ("api_key.updated", key["id"]),
        ("api_key.created", key["id"]),
    ]
    by_action = {e["action"]: e for e in events if e["target_id"] == key["id"]}
    for event in by_action.values():
        assert event["actor_key_id"] == platform.admin_a["id"]
        assert event["actor_tenant_id"] == platform.a["id"] == event["tenant_id"]
        assert event["via"] == "http" and event["client_address"] == "127.0.0.1"
    assert by_action["api_key.created"]["request_id"] == request_ids["POST /v1/admin/api-keys"]
    assert by_action["api_key.created"]["details"]["scopes"] == ["read"]
    assert by_action["api_key.updated"]["details"] == {
        "name": "still audited",
        "status": "disabled",
    }
    assert by_action["api_key.rotated"]["details"]["grace_seconds"] == 60
    cli = [e for e in events if e["target_id"] == cli_id]
    assert [(e["action"], e["via"], e["actor_key_id"]) for e in cli] == [
        ("api_key.revoked", "cli", None),
        ("api_key.created", "cli", None),
    ]
    # A's admin sees A's events only; the operator sees the tenants' too, and B's.
    assert all(e["tenant_id"] == platform.a["id"] for e in events)
    every = client.get("/v1/admin/audit-events", params={"limit": 100}, headers=op).json()["data"]
    actions = {(e["action"], e["target_id"]) for e in every}
    assert ("tenant.created", platform.b["id"]) in actions
    assert ("tenant.updated", platform.a["id"]) in actions
    assert ("api_key.created", platform.admin_b["id"]) in actions
    theirs = client.get("/v1/admin/audit-events", params={"tenant_id": platform.b["id"]}, headers=a)
    assert_problem(theirs, 404, "tenant_not_found")
    # No secret in an event, a log line (at DEBUG), or an error; nor its hash in an event.
    recorded = json.dumps(every) + caplog.text
    assert "POST /v1/admin/api-keys" in caplog.text  # the requests were logged
    for secret in secrets:
        assert secret not in recorded and secret[3:] not in recorded
        assert api_keys.hash_key(secret) not in json.dumps(every)
