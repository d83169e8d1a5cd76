"""List cursors are signed with the server's secret, for one list: a cursor that was altered,
forged, made by a server with another secret, or made for another list (another route,
another document's chunks, another tenant) is 422 ``invalid_cursor``, never another page."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from app.pagination import encode_cursor
from app.settings import Settings
from tests.conftest import ServedApp
from tests.e2e.test_auth import bearer, make_key
from tests.e2e.test_documents import assert_problem, upload

SENTENCES = "".join(f"Sentence number {n} is here. " for n in range(7))


def _pages(client: httpx.Client, path: str, **params: Any) -> Iterator[dict[str, Any]]:
    cursor = None
    while True:
        page = client.get(path, params=params | ({"cursor": cursor} if cursor else {}))
        assert page.status_code == 200, page.text
        yield page.json()
        if (cursor := page.json()["next_cursor"]) is None:
            return


def _documents(client: httpx.Client, count: int) -> list[str]:
    """Ids of ``count`` new documents, newest first."""
    ids = [
        upload(client, f"{n}.txt", f"Document {n}. {SENTENCES}".encode()).json()["id"]
        for n in range(count)
    ]
    return ids[::-1]


def _refused(response: httpx.Response) -> None:
    assert_problem(response, 422, "invalid_cursor")


def test_signed_cursors_page_through_every_row_once(client: httpx.Client) -> None:
    ids = _documents(client, 5)
    pages = list(_pages(client, "/v1/documents", limit=2))
    assert [d["id"] for page in pages for d in page["data"]] == ids
    cursors = [page["next_cursor"] for page in pages[:-1]]
    assert all(cursor.count(".") == 1 for cursor in cursors)
    chunks = [
        c["index"]
        for p in _pages(client, f"/v1/documents/{ids[0]}/chunks", limit=3)
        for c in p["data"]
    ]
    assert chunks == list(range(8))


def _altered(cursor: str) -> list[str]:
    inner, _, tag = cursor.partition(".")
    flipped = tag[:-1] + ("A" if tag[-1] != "A" else "B")
    return [
        inner,  # unsigned, as every cursor was
        f"{inner}.{flipped}",
        f"{inner}.{tag[:-1]}",
        f"{inner}.{tag}A",
        f"{inner}.",
        f".{tag}",
        f"{inner}.{tag}.{tag}",
        f"{inner}x.{tag}",
        f"{inner}.{tag.upper()}",
        f"{inner}.{'é' * len(tag)}",
    ]


def test_an_altered_cursor_is_refused(client: httpx.Client) -> None:
    _documents(client, 3)
    cursor = client.get("/v1/documents", params={"limit": 1}).json()["next_cursor"]
    for altered in _altered(cursor):
        _refused(client.get("/v1/documents", params={"limit": 1, "cursor": altered}))
    assert client.get("/v1/documents", params={"limit": 1, "cursor": cursor}).status_code == 200


def test_a_cursor_forged_around_another_key_is_refused(client: httpx.Client) -> None:
    ids = _documents(client, 4)
    cursor = client.get("/v1/documents", params={"limit": 1}).json()["next_cursor"]
    _, _, tag = cursor.partition(".")
    # The signature of the first page's cursor around the key of a row further down: the
    # page after that row would be another page than the one this cursor was made for.
    for forged in (encode_cursor(ids[2]), encode_cursor("~"), encode_cursor("")):
        _refused(client.get("/v1/documents", params={"cursor": f"{forged}.{tag}"}))
    index = client.get(f"/v1/documents/{ids[0]}/chunks", params={"limit": 1}).json()
    _, _, chunk_tag = index["next_cursor"].partition(".")
    _refused(
        client.get(
            f"/v1/documents/{ids[0]}/chunks", params={"cursor": f"{encode_cursor('5')}.{chunk_tag}"}
        )
    )


def test_a_cursor_is_good_for_its_own_list_only(client: httpx.Client) -> None:
    first, second = _documents(client, 2)
    chunks_of_first = client.get(f"/v1/documents/{first}/chunks", params={"limit": 2}).json()
    cursor = chunks_of_first["next_cursor"]
    assert client.get(f"/v1/documents/{first}/chunks", params={"cursor": cursor}).status_code == 200
    _refused(client.get(f"/v1/documents/{second}/chunks", params={"cursor": cursor}))
    documents_cursor = client.get("/v1/documents", params={"limit": 1}).json()["next_cursor"]
    for path in ("/v1/conversations", "/v1/collections", "/v1/answer-batches"):
        _refused(client.get(path, params={"cursor": documents_cursor}))
    collection = client.post("/v1/collections", json={"name": "Both"}).json()
    added = client.post(
        f"/v1/collections/{collection['id']}/documents", json={"document_ids": [first, second]}
    )
    assert added.status_code == 200
    members = f"/v1/collections/{collection['id']}/documents"
    _refused(client.get(members, params={"cursor": documents_cursor}))
    inner = client.get(members, params={"limit": 1}).json()["next_cursor"]
    _refused(client.get("/v1/documents", params={"cursor": inner}))
    assert [d["id"] for p in _pages(client, members, limit=1) for d in p["data"]] == [first, second]


def test_a_cursor_is_good_for_its_own_tenant_only(client: httpx.Client, database_url: str) -> None:
    _, a = make_key(database_url, "tenant-a")
    _, b = make_key(database_url, "tenant-b")
    for key in (a, b):
        for n in range(2):
            stored = client.post(
                "/v1/documents/upload",
                files={"file": (f"{n}.txt", f"{key[:8]} {n}. {SENTENCES}".encode())},
                headers=bearer(key),
            )
            assert stored.status_code == 201, stored.text
    cursor = client.get("/v1/documents", params={"limit": 1}, headers=bearer(a)).json()
    assert cursor["next_cursor"]
    mine = client.get("/v1/documents", params={"cursor": cursor["next_cursor"]}, headers=bearer(a))
    assert mine.status_code == 200 and len(mine.json()["data"]) == 1
    _refused(
        client.get("/v1/documents", params={"cursor": cursor["next_cursor"]}, headers=bearer(b))
    )


@pytest.fixture
def elsewhere(settings: Settings) -> Iterator[ServedApp]:
    """Another server on the same database, with a secret of its own."""
    other = settings.model_copy(update={"cursor_secret": SecretStr("an-other-secret-" * 3)})
    with ServedApp(other) as served:
        yield served


def test_a_cursor_from_a_server_with_another_secret_is_refused(
    client: httpx.Client, elsewhere: ServedApp
) -> None:
    ids = _documents(client, 3)
    cursor = client.get("/v1/documents", params={"limit": 1}).json()["next_cursor"]
    with httpx.Client(base_url=elsewhere.base_url, timeout=60) as other:
        _refused(other.get("/v1/documents", params={"cursor": cursor}))
        theirs = other.get("/v1/documents", params={"limit": 1}).json()["next_cursor"]
        rest = other.get("/v1/documents", params={"cursor": theirs}).json()
        assert [d["id"] for d in rest["data"]] == ids[1:]
    _refused(client.get("/v1/documents", params={"cursor": theirs}))


def test_without_a_secret_each_process_makes_its_own(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CITEGATE_CURSOR_SECRET", raising=False)
    made = {Settings().cursor_secret.get_secret_value() for _ in range(3)}
    assert len(made) == 3 and all(len(secret) >= 32 for secret in made)
    monkeypatch.setenv("CITEGATE_CURSOR_SECRET", "s" * 32)
    assert Settings().cursor_secret.get_secret_value() == "s" * 32
    monkeypatch.setenv("CITEGATE_CURSOR_SECRET", "too short")
    with pytest.raises(ValueError, match="cursor_secret"):
        Settings()


def test_a_cursor_that_is_not_ascii_or_base64_is_refused(client: httpx.Client) -> None:
    _documents(client, 2)
    for cursor in ("é", "\U0001f600.x", "%%%", base64.urlsafe_b64encode(b"\xff").decode(), "."):
        _refused(client.get("/v1/documents", params={"cursor": cursor}))
