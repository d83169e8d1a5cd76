"""Collections through real HTTP, on the configured database."""

from __future__ import annotations

import httpx

from tests.e2e.test_auth import bearer, make_key
from tests.e2e.test_documents import assert_problem, upload


def new_document(client: httpx.Client, text: str) -> str:
    response = upload(client, "note.txt", text.encode())
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def new_collection(
    client: httpx.Client, name: str = "Handbook", **body: object
) -> dict[str, object]:
    response = client.post("/v1/collections", json={"name": name, **body})
    assert response.status_code == 201, response.text
    return dict(response.json())


def test_create_get_list_and_delete(client: httpx.Client) -> None:
    created = new_collection(client, "Policies", description="All of them", metadata={"t": 1})
    assert str(created["id"]).startswith("col_")
    assert (created["name"], created["description"], created["metadata"]) == (
        "Policies",
        "All of them",
        {"t": 1},
    )
    assert created["document_count"] == 0
    assert client.get(f"/v1/collections/{created['id']}").json() == created
    second = new_collection(client, "Second")
    listed = client.get("/v1/collections").json()
    assert [c["id"] for c in listed["data"]] == [second["id"], created["id"]]  # newest first
    first_page = client.get("/v1/collections", params={"limit": 1}).json()
    assert [c["id"] for c in first_page["data"]] == [second["id"]]
    rest = client.get(
        "/v1/collections", params={"limit": 1, "cursor": first_page["next_cursor"]}
    ).json()
    assert [c["id"] for c in rest["data"]] == [created["id"]] and rest["next_cursor"] is None

    assert client.delete(f"/v1/collections/{created['id']}").status_code == 204
    assert_problem(client.get(f"/v1/collections/{created['id']}"), 404, "collection_not_found")
    assert_problem(client.delete(f"/v1/collections/{created['id']}"), 404, "collection_not_found")


def test_documents_are_added_once_listed_removed_and_stay_when_the_collection_goes(
    client: httpx.Client,
) -> None:
    one = new_document(client, "The first note.")
    two = new_document(client, "The second note.")
    collection = new_collection(client)
    path = f"/v1/collections/{collection['id']}/documents"
    added = client.post(path, json={"document_ids": [one, two, one]})
    assert added.status_code == 200, added.text
    assert added.json()["document_count"] == 2
    again = client.post(path, json={"document_ids": [two]})  # idempotent
    assert again.status_code == 200 and again.json()["document_count"] == 2
    listed = client.get(path).json()
    assert [d["id"] for d in listed["data"]] == [two, one]  # newest first
    assert listed["data"][0]["chunk_count"] == 1  # a Document, as getDocument shows it
    paged = client.get(path, params={"limit": 1}).json()
    assert [d["id"] for d in paged["data"]] == [two] and paged["next_cursor"]

    assert client.delete(f"{path}/{one}").status_code == 204
    assert_problem(client.delete(f"{path}/{one}"), 404, "document_not_found")
    assert [d["id"] for d in client.get(path).json()["data"]] == [two]
    assert client.get(f"/v1/collections/{collection['id']}").json()["document_count"] == 1
    assert client.get(f"/v1/documents/{one}").status_code == 200  # the document stays

    assert client.delete(f"/v1/collections/{collection['id']}").status_code == 204
    assert client.get(f"/v1/documents/{two}").status_code == 200


def test_an_unknown_document_adds_nothing(client: httpx.Client) -> None:
    known = new_document(client, "A known note.")
    collection = new_collection(client)
    path = f"/v1/collections/{collection['id']}/documents"
    response = client.post(path, json={"document_ids": [known, "doc_doesnotexist"]})
    body = assert_problem(response, 404, "document_not_found")
    assert "doc_doesnotexist" in body["detail"]
    assert client.get(path).json()["data"] == []
    assert client.get(f"/v1/collections/{collection['id']}").json()["document_count"] == 0


def test_deleting_a_document_takes_it_out_of_its_collections(client: httpx.Client) -> None:
    document = new_document(client, "Soon gone.")
    kept = new_document(client, "Still here.")
    first, second = new_collection(client, "One"), new_collection(client, "Two")
    for collection in (first, second):
        path = f"/v1/collections/{collection['id']}/documents"
        assert client.post(path, json={"document_ids": [document, kept]}).status_code == 200
    assert client.delete(f"/v1/documents/{document}").status_code == 204
    for collection in (first, second):
        path = f"/v1/collections/{collection['id']}/documents"
        assert [d["id"] for d in client.get(path).json()["data"]] == [kept]
        assert client.get(f"/v1/collections/{collection['id']}").json()["document_count"] == 1


def test_bodies_are_validated(client: httpx.Client) -> None:
    assert_problem(client.post("/v1/collections", json={}), 422, "validation_error")
    assert_problem(client.post("/v1/collections", json={"name": ""}), 422, "validation_error")
    collection = new_collection(client)
    path = f"/v1/collections/{collection['id']}/documents"
    assert_problem(client.post(path, json={"document_ids": []}), 422, "validation_error")


def test_another_tenants_collection_and_documents_are_not_found(
    client: httpx.Client, database_url: str
) -> None:
    _, a_key = make_key(database_url, "tenant-a")
    _, b_key = make_key(database_url, "tenant-b")
    a, b = bearer(a_key), bearer(b_key)
    a_document = client.post(
        "/v1/documents/upload", files={"file": ("a.txt", b"The grass is green.")}, headers=a
    ).json()["id"]
    b_document = client.post(
        "/v1/documents/upload", files={"file": ("b.txt", b"The sky is blue.")}, headers=b
    ).json()["id"]
    a_collection = client.post("/v1/collections", json={"name": "A"}, headers=a).json()["id"]
    b_collection = client.post("/v1/collections", json={"name": "B"}, headers=b).json()["id"]
    a_path = f"/v1/collections/{a_collection}/documents"
    assert client.post(a_path, json={"document_ids": [a_document]}, headers=a).status_code == 200

    # A's collection from B, in every path.
    for method, path in [
        ("GET", f"/v1/collections/{a_collection}"),
        ("DELETE", f"/v1/collections/{a_collection}"),
        ("GET", a_path),
        ("POST", a_path),
        ("DELETE", f"{a_path}/{a_document}"),
    ]:
        body = {"document_ids": [b_document]} if method == "POST" else None
        response = client.request(method, path, headers=b, json=body)
        assert_problem(response, 404, "collection_not_found")
    # A's document in B's own collection, in a body and in a path.
    b_path = f"/v1/collections/{b_collection}/documents"
    added = client.post(b_path, json={"document_ids": [b_document, a_document]}, headers=b)
    assert_problem(added, 404, "document_not_found")
    assert client.get(b_path, headers=b).json()["data"] == []
    assert_problem(client.delete(f"{b_path}/{a_document}", headers=b), 404, "document_not_found")
    # And in searches: by collection, by documents.
    search = client.post(
        "/v1/search", json={"query": "grass", "collection_id": a_collection}, headers=b
    )
    assert_problem(search, 404, "collection_not_found")
    search = client.post(
        "/v1/search", json={"query": "grass", "document_ids": [a_document]}, headers=b
    )
    assert_problem(search, 404, "document_not_found")
    # And in questions and conversations, whatever the retrieval mode.
    for mode in ("auto", "documents", "passages"):
        question = {
            "question": "Grass?",
            "collection_id": a_collection,
            "retrieval": {"mode": mode},
        }
        for path in ("/v1/answers", "/v1/answers/count-tokens"):
            asked = client.post(path, json=question, headers=b)
            assert_problem(asked, 404, "collection_not_found")
    started = client.post("/v1/conversations", json={"collection_id": a_collection}, headers=b)
    assert_problem(started, 404, "collection_not_found")
    assert client.get("/v1/collections", headers=b).json()["data"][0]["id"] == b_collection
    assert len(client.get("/v1/collections", headers=b).json()["data"]) == 1
    # Nothing of A's changed.
    mine = client.get(f"/v1/collections/{a_collection}", headers=a).json()
    assert mine["document_count"] == 1
    found = client.post(
        "/v1/search", json={"query": "grass", "collection_id": a_collection}, headers=a
    ).json()["data"]
    assert [p["document_id"] for p in found] == [a_document]
