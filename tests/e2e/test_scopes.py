"""Every route refuses a key without its scope, with ``403 insufficient_scope``, and lets in one
that has it. The routes come from the served OpenAPI document, so a new route is walked too;
the scope each needs is the contract's rule, written here independently of the service's."""

from __future__ import annotations

import httpx
import pytest

from app.auth.scopes import ALL_SCOPES
from tests.e2e.test_admin import Platform, assert_problem
from tests.e2e.test_auth import MISSING, bearer, call


def contract_scope(method: str, path: str) -> str:
    """API.md: `read` documents, answers, search; `write` upload, delete, ask, batches;
    `admin` keys and reports of its tenant; `operator` tenants."""
    if path.startswith("/v1/admin/tenants"):
        return "operator"
    if path.startswith("/v1/admin/"):
        return "admin"
    if method == "GET" or path in ("/v1/search", "/v1/answers/count-tokens"):
        return "read"
    return "write"


def operations(client: httpx.Client) -> list[tuple[str, str]]:
    spec = client.get("/openapi.json").json()
    found = [
        (method.upper(), path)
        for path, item in spec["paths"].items()
        if path.startswith("/v1/")
        for method in item
    ]
    assert ("GET", "/v1/admin/api-keys") in found and ("POST", "/v1/answers") in found
    return found


def request(
    client: httpx.Client, method: str, path: str, headers: dict[str, str]
) -> httpx.Response:
    """The operation on ids that do not exist, with a valid body for it."""
    return call(client, method, path, MISSING, headers)


@pytest.fixture
def platform(client: httpx.Client, database_url: str) -> Platform:
    return Platform(client, database_url)


def test_every_route_refuses_a_key_without_its_scope(
    platform: Platform, client: httpx.Client
) -> None:
    tenant = platform.a["id"]
    # For each scope: a key with every other scope, and a key with that scope alone.
    # (operator includes admin: the key lacking admin lacks operator too.)
    lacking = {
        scope: platform.new_key(tenant, sorted(ALL_SCOPES - {scope, "operator"}))["headers"]
        for scope in ("read", "write", "admin")
    }
    # Without operator, but with admin: the operator's routes are still refused.
    lacking["operator"] = platform.new_key(tenant, ["admin", "read", "write"])["headers"]
    having = {str(s): platform.new_key(tenant, [str(s)])["headers"] for s in ALL_SCOPES}
    checked = 0
    for method, path in operations(client):
        scope = contract_scope(method, path)
        refused = request(client, method, path, lacking[scope])
        assert_problem(refused, 403, "insufficient_scope")
        assert scope in refused.json()["detail"]
        let_in = request(client, method, path, having[scope])
        assert let_in.status_code not in (401, 403), (method, path, let_in.text)
        checked += 1
    assert checked >= 40


def test_the_compatible_api_checks_scopes_too(platform: Platform, client: httpx.Client) -> None:
    reader = platform.new_key(platform.a["id"], ["read"])["secret"]
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "Hello"}],
    }
    refused = client.post("/anthropic/v1/messages", json=body, headers={"x-api-key": reader})
    assert refused.status_code == 403
    assert refused.json()["error"]["type"] == "permission_error"
    counting = {k: v for k, v in body.items() if k != "max_tokens"}
    counted = client.post(
        "/anthropic/v1/messages/count_tokens", json=counting, headers={"x-api-key": reader}
    )
    assert counted.status_code == 200, counted.text
    assert client.get("/anthropic/v1/files", headers=bearer(reader)).status_code == 200


def test_the_openai_api_checks_scopes_too(platform: Platform, client: httpx.Client) -> None:
    reader = bearer(platform.new_key(platform.a["id"], ["read"])["secret"])
    writer = bearer(platform.new_key(platform.a["id"], ["write"])["secret"])
    body = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "Hello"}]}
    refused = client.post("/openai/v1/chat/completions", json=body, headers=reader)
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]  # in OpenAI's shape
    assert (error["type"], error["code"]) == ("permission_error", "insufficient_scope")
    store = client.post("/openai/v1/vector_stores", json={"name": "s"}, headers=writer)
    assert store.status_code == 200, store.text
    search = f"/openai/v1/vector_stores/{store.json()['id']}/search"
    searched = client.post(search, json={"query": "grass"}, headers=reader)  # only reads
    assert searched.status_code == 200, searched.text
    assert client.get("/openai/v1/files", headers=reader).status_code == 200
