"""Tenants and API keys: every /v1 route refuses callers without a valid key once keys exist,
and no tenant sees, changes or cites another tenant's data."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.auth import keys as api_keys
from app.auth.scopes import TENANT_SCOPES
from app.db.engine import run_in_session
from app.settings import Settings
from tests.conftest import ServedApp, free_port

GRASS = b"The grass is green. The sky is blue."


def make_key(
    database_url: str, tenant: str, scopes: Iterable[str] = TENANT_SCOPES
) -> tuple[str, str]:
    """(key id, key) for a tenant, made as `citegate keys create` makes them."""
    row, key = run_in_session(
        database_url, lambda session: api_keys.create_key(session, tenant, scopes=scopes)
    )
    return row.id, key


def revoke(database_url: str, key_id: str) -> None:
    run_in_session(database_url, lambda session: api_keys.revoke_key(session, key_id))


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


class Tenants:
    """Tenant A with a document, tenant B, and a revoked key of A's."""

    def __init__(self, client: httpx.Client, database_url: str) -> None:
        self.a_id, self.a = make_key(database_url, "tenant-a")
        self.b_id, self.b = make_key(database_url, "tenant-b")
        revoked_id, self.revoked = make_key(database_url, "tenant-a")
        revoke(database_url, revoked_id)
        upload = client.post(
            "/v1/documents/upload", files={"file": ("a.txt", GRASS)}, headers=bearer(self.a)
        )
        assert upload.status_code == 201, upload.text
        self.document = upload.json()
        answer = client.post(
            "/v1/answers",
            json={"question": "What color is the grass?", "document_ids": [self.document["id"]]},
            headers=bearer(self.a),
        )
        assert answer.status_code == 200, answer.text
        self.answer = answer.json()
        conversation = client.post(
            "/v1/conversations",
            json={"document_ids": [self.document["id"]]},
            headers=bearer(self.a),
        )
        assert conversation.status_code == 201, conversation.text
        self.conversation = conversation.json()
        collection = client.post("/v1/collections", json={"name": "A's"}, headers=bearer(self.a))
        assert collection.status_code == 201, collection.text
        self.collection = collection.json()
        added = client.post(
            f"/v1/collections/{self.collection['id']}/documents",
            json={"document_ids": [self.document["id"]]},
            headers=bearer(self.a),
        )
        assert added.status_code == 200, added.text
        question = {"custom_id": "a", "question": "Green?", "document_ids": [self.document["id"]]}
        batch = client.post(
            "/v1/answer-batches", json={"requests": [question]}, headers=bearer(self.a)
        )
        assert batch.status_code == 201, batch.text
        self.batch = batch.json()
        self.ids = {
            "document_id": self.document["id"],
            "answer_id": self.answer["id"],
            "conversation_id": self.conversation["id"],
            "collection_id": self.collection["id"],
            "batch_id": self.batch["id"],
            "key_id": self.a_id,
        }


@pytest.fixture
def tenants(client: httpx.Client, database_url: str) -> Tenants:
    return Tenants(client, database_url)


def contract_operations(client: httpx.Client) -> list[tuple[str, str]]:
    """Every (method, path) under /v1 that the served OpenAPI document declares."""
    spec = client.get("/openapi.json").json()
    operations = [
        (method.upper(), path)
        for path, item in spec["paths"].items()
        if path.startswith("/v1/")
        for method in item
    ]
    assert len(operations) >= 7
    return operations


MISSING = {
    "document_id": "doc_doesnotexist",
    "answer_id": "ans_doesnotexist",
    "conversation_id": "conv_doesnotexist",
    "collection_id": "col_doesnotexist",
    "batch_id": "batch_doesnotexist",
    "key_id": "key_doesnotexist",
    "tenant_id": "ten_doesnotexist",
}


ADMIN_BODIES = {
    ("POST", "/v1/admin/tenants"): {"name": "made-by-a-test"},
    ("PATCH", "/v1/admin/tenants/{tenant_id}"): {"name": "renamed"},
    ("POST", "/v1/admin/api-keys"): {"scopes": ["read"]},
    ("PATCH", "/v1/admin/api-keys/{key_id}"): {"name": "renamed"},
    ("POST", "/v1/admin/api-keys/{key_id}/rotate"): {"grace_seconds": 0},
}


def call(
    client: httpx.Client, method: str, path: str, ids: dict[str, str], headers: dict[str, str]
) -> httpx.Response:
    """The operation on these ids, with a valid body for it."""
    url = re.sub(r"\{([a-z_]+_id)\}", lambda m: ids.get(m.group(1), MISSING[m.group(1)]), path)
    url = url.replace("{page_number}", "1")
    body: dict[str, Any] = {}
    if method == "POST" and path.endswith("/upload"):
        body["files"] = {"file": ("b.txt", b"Tenant B writes this.")}
    elif method == "POST" and path.startswith("/v1/documents"):
        body["json"] = {"source": {"type": "text", "data": "Tenant B writes this."}}
    elif method == "POST" and path.endswith("/share-links"):
        body["json"] = {"expires_in": 3600}
    elif method == "POST" and path.startswith("/v1/answers"):
        body["json"] = {"question": "What color?", "document_ids": [ids["document_id"]]}
    elif method == "POST" and path.startswith("/v1/conversations"):
        body["json"] = {"document_ids": [ids["document_id"]]}
    elif method == "POST" and path == "/v1/collections":
        body["json"] = {"name": "Tenant B's"}
    elif method == "POST" and path.startswith("/v1/collections"):
        body["json"] = {"document_ids": [ids["document_id"]]}
    elif method == "POST" and path.startswith("/v1/search"):
        body["json"] = {"query": "grass", "collection_id": ids["collection_id"]}
    elif path.startswith("/v1/admin/"):
        body["json"] = ADMIN_BODIES.get((method, path))
    elif method == "POST" and path == "/v1/answer-batches":
        question = {
            "custom_id": "b",
            "question": "What color?",
            "document_ids": [ids["document_id"]],
        }
        body["json"] = {"requests": [question]}
    return client.request(method, url, headers=headers, **body)


def refers_to_ids(method: str, path: str) -> bool:
    """Whether the operation names an existing resource, in its path or in its body."""
    return "{" in path or (
        method == "POST" and path.startswith(("/v1/answers", "/v1/conversations", "/v1/search"))
    )


def assert_unauthorized(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 401, response.text
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["code"] == "unauthorized"
    return body


BAD_HEADERS = {
    "missing": {},
    "unknown key": bearer("cg_" + "x" * 43),
    "malformed scheme": {"Authorization": "Basic dXNlcjpwYXNz"},
    "bearer without key": {"Authorization": "Bearer"},
    "overlong key": bearer("cg_" + "y" * 5000),
}


def test_every_route_refuses_callers_without_a_valid_key(
    client: httpx.Client, tenants: Tenants
) -> None:
    operations = contract_operations(client)
    bodies = []
    for method, path in operations:
        for headers in [*BAD_HEADERS.values(), bearer(tenants.revoked)]:
            response = call(client, method, path, tenants.ids, headers)
            bodies.append(assert_unauthorized(response))
    # One answer for every failure: nothing tells whether a key exists or was revoked.
    assert len({(b["detail"], b["title"], b["status"]) for b in bodies}) == 1
    assert len(bodies) == len(operations) * (len(BAD_HEADERS) + 1)


def test_another_tenants_ids_are_not_found_and_nothing_changes(
    client: httpx.Client, tenants: Tenants
) -> None:
    document_id = tenants.document["id"]
    mine_before = client.get(f"/v1/documents/{document_id}/chunks", headers=bearer(tenants.a))
    for method, path in contract_operations(client):
        if path.startswith("/v1/admin/"):
            continue  # keys and tenants: tests/e2e/test_admin.py
        response = call(client, method, path, tenants.ids, bearer(tenants.b))
        if refers_to_ids(method, path):
            assert response.status_code == 404, (method, path, response.text)
            assert response.json()["code"] in (
                "document_not_found",
                "answer_not_found",
                "conversation_not_found",
                "collection_not_found",
                "answer_batch_not_found",
            )
            # Exactly the answer for an id that does not exist.
            missing = call(client, method, path, MISSING, bearer(tenants.b))
            redacted = response.text
            for name, value in tenants.ids.items():
                redacted = redacted.replace(value, MISSING[name])
            assert redacted == missing.text
        elif method == "GET":
            assert response.status_code == 200
            assert document_id not in response.text
        else:
            assert response.status_code in (200, 201), (method, path, response.text)
    # B's question about A's document in a batch: errored, as about a document that does not exist.
    [theirs] = client.get("/v1/answer-batches", headers=bearer(tenants.b)).json()["data"]
    results = client.get(f"/v1/answer-batches/{theirs['id']}/results", headers=bearer(tenants.b))
    [error] = [result["error"] for result in results.json()["data"]]
    assert error["code"] == "document_not_found"
    assert error["detail"] == f"No document with id {document_id!r}."
    a = bearer(tenants.a)
    [mine] = client.get("/v1/answer-batches", headers=a).json()["data"]
    assert mine["id"] == tenants.batch["id"]
    assert client.get(f"/v1/documents/{document_id}", headers=a).json() == tenants.document
    assert client.get(f"/v1/documents/{document_id}/chunks", headers=a).json() == (
        mine_before.json()
    )
    assert client.get(f"/v1/documents/{document_id}/content", headers=a).content == GRASS
    listed = client.get("/v1/documents", headers=a).json()["data"]
    assert [d["id"] for d in listed] == [document_id]
    assert client.get(f"/v1/answers/{tenants.answer['id']}", headers=a).json() == tenants.answer
    conversation = client.get(f"/v1/conversations/{tenants.conversation['id']}", headers=a)
    assert conversation.status_code == 200
    # A follow-up from another tenant on this conversation: not found, nothing added.
    follow_up = client.post(
        "/v1/answers",
        json={"question": "And?", "conversation_id": tenants.conversation["id"]},
        headers=bearer(tenants.b),
    )
    assert follow_up.status_code == 404
    assert follow_up.json()["code"] == "conversation_not_found"
    again = client.get(f"/v1/conversations/{tenants.conversation['id']}", headers=a).json()
    assert again["answers"] == []


def test_deduplication_is_per_tenant(client: httpx.Client, tenants: Tenants) -> None:
    theirs = client.post(
        "/v1/documents/upload", files={"file": ("same.txt", GRASS)}, headers=bearer(tenants.b)
    )
    assert theirs.status_code == 201
    assert theirs.json()["id"] != tenants.document["id"]
    again = client.post(
        "/v1/documents/upload", files={"file": ("same.txt", GRASS)}, headers=bearer(tenants.a)
    )
    assert (again.status_code, again.json()["id"]) == (200, tenants.document["id"])


def test_open_until_the_first_key(client: httpx.Client, database_url: str) -> None:
    assert client.get("/readyz").json()["auth"] == "open"
    assert client.get("/v1/documents").status_code == 200
    key_id, key = make_key(database_url, "first")
    assert client.get("/readyz").json()["auth"] == "keys"
    assert_unauthorized(client.get("/v1/documents"))
    assert client.get("/v1/documents", headers=bearer(key)).status_code == 200
    revoke(database_url, key_id)
    # Revoking the last key does not open the service again.
    assert_unauthorized(client.get("/v1/documents"))
    assert_unauthorized(client.get("/v1/documents", headers=bearer(key)))


def test_openapi_declares_the_bearer_scheme(client: httpx.Client) -> None:
    spec = client.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["ApiKey"] == {
        "type": "http",
        "scheme": "bearer",
        "description": spec["components"]["securitySchemes"]["ApiKey"]["description"],
    }
    for method, path in contract_operations(client):
        assert spec["paths"][path][method.lower()]["security"] == [{"ApiKey": []}]


@pytest.fixture
def limited(settings: Settings, client: httpx.Client) -> Iterator[ServedApp]:
    with ServedApp(settings.model_copy(update={"rate_limit_per_minute": 3})) as app:
        yield app


def assert_rate_limited(response: httpx.Response) -> None:
    assert response.status_code == 429, response.text
    retry_after = int(response.headers["retry-after"])
    assert 1 <= retry_after <= 60
    body = response.json()
    assert body["code"] == "rate_limited" and body["retry_after"] == retry_after


def test_requests_per_minute_in_memory(limited: ServedApp, database_url: str) -> None:
    _, key = make_key(database_url, "busy")
    _, other = make_key(database_url, "calm")
    with httpx.Client(base_url=limited.base_url) as http:
        assert [http.get("/v1/documents", headers=bearer(key)).status_code for _ in range(3)] == [
            200
        ] * 3
        assert_rate_limited(http.get("/v1/documents", headers=bearer(key)))
        # The limit is per key.
        assert http.get("/v1/documents", headers=bearer(other)).status_code == 200


def test_requests_per_minute_shared_through_redis(
    settings: Settings, client: httpx.Client, database_url: str
) -> None:
    shared = settings.model_copy(
        update={"rate_limit_per_minute": 4, "redis_url": "redis://127.0.0.1:6379/0"}
    )
    _, key = make_key(database_url, "replicated")  # a new key id: a fresh counter in Redis
    with ServedApp(shared) as one, ServedApp(shared) as two:
        statuses = [
            httpx.get(f"{replica.base_url}/v1/documents", headers=bearer(key)).status_code
            for replica in (one, two, one, two)
        ]
        assert statuses == [200] * 4
        # Two replicas, one counter: the fifth request is refused by either.
        assert_rate_limited(httpx.get(f"{two.base_url}/v1/documents", headers=bearer(key)))


def test_keys_never_reach_the_logs(tmp_path: Path) -> None:
    key = "cg_bootstrap-" + os.urandom(16).hex()
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    env |= {
        "CITEGATE_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/logs.db",
        "CITEGATE_LOG_LEVEL": "DEBUG",
        "CITEGATE_AUTH": "required",
        "CITEGATE_BOOTSTRAP_API_KEY": key,
    }
    port = free_port()
    citegate = Path(sys.executable).parent / "citegate"
    log_file = (tmp_path / "server.log").open("wb")  # a pipe could fill up and stall it
    server = subprocess.Popen(
        [str(citegate), "serve", "--port", str(port)],
        env=env,
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                httpx.get(f"{base}/healthz")
                break
            except httpx.TransportError:
                time.sleep(0.1)
        with httpx.Client(base_url=base, headers=bearer(key)) as http:
            document = http.post("/v1/documents/upload", files={"file": ("a.txt", GRASS)}).json()
            assert http.get(f"/v1/documents/{document['id']}/chunks").status_code == 200
            assert http.get("/v1/documents").status_code == 200
            assert http.get("/readyz").json()["auth"] == "keys"
            assert http.delete(f"/v1/documents/{document['id']}").status_code == 204
            wrong = http.get("/v1/documents", headers=bearer(key + "x"))
            assert wrong.status_code == 401
            assert key not in wrong.text
    finally:
        server.terminate()
        server.wait(timeout=30)
        log_file.close()
    output = (tmp_path / "server.log").read_text()
    # The log did record the cycle, at every level.
    assert "DEBUG" in output and "GET /v1/documents" in output
    assert key not in output
    assert key[len("cg_") :] not in output
    assert api_keys.hash_key(key) not in output  # the database driver's DEBUG lines are off
