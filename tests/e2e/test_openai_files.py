"""Files and vector stores through the official OpenAI Python SDK: a file is a document and a
vector store a collection (the same ids through /v1), search finds passages whose offsets
point at the stored text, another tenant's ids are not found, and what Citegate cannot keep
is refused naming the parameter."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.conftest import Served
from tests.e2e.test_auth import make_key
from tests.e2e.test_openai_chat import document_text, sdk
from tests.fake_upstream import GRASS
from tests.fixture_files import AMAZON_PDF

SEA = "The sea is deep and salty. Fish swim in it."


def test_files_are_documents(client: httpx.Client, served: Served) -> None:
    with sdk(served.base_url) as api:
        grass = api.files.create(file=("grass.txt", GRASS.encode()), purpose="assistants")
        pdf = api.files.create(
            file=(AMAZON_PDF.name, AMAZON_PDF.read_bytes(), "application/pdf"),
            purpose="user_data",
        )
        assert (grass.object, grass.filename, grass.bytes, grass.status) == (
            "file",
            "grass.txt",
            len(GRASS),
            "processed",
        )
        assert api.files.retrieve(pdf.id).bytes == AMAZON_PDF.stat().st_size
        assert api.files.content(pdf.id).read() == AMAZON_PDF.read_bytes()
        # A file id is a document id.
        document = client.get(f"/v1/documents/{grass.id}").json()
        assert (document["kind"], document["filename"]) == ("text", "grass.txt")

        # Newest first, one a page: the SDK follows the pages itself (after=the last id).
        assert [f.id for f in api.files.list(limit=1)] == [pdf.id, grass.id]
        first = api.files.list(limit=1)
        assert first.has_more is True and [f.id for f in first.data] == [pdf.id]
        assert [f.id for f in api.files.list(purpose="batch")] == []

        deleted = api.files.delete(grass.id)
        assert (deleted.id, deleted.deleted) == (grass.id, True)
        with pytest.raises(openai.NotFoundError) as missing:
            api.files.retrieve(grass.id)
        assert missing.value.code == "document_not_found"
        assert client.get(f"/v1/documents/{grass.id}").status_code == 404
        assert [f.id for f in api.files.list()] == [pdf.id]

        with pytest.raises(openai.BadRequestError) as refused:
            api.files.create(file=("x.txt", b"abc"), purpose="fine-tune")
        assert (refused.value.param, refused.value.code) == ("purpose", "invalid_parameter")
        with pytest.raises(openai.BadRequestError) as refused:
            api.files.list(order="asc")
        assert refused.value.param == "order"
    assert [d["id"] for d in client.get("/v1/documents").json()["data"]] == [pdf.id]


def test_vector_stores_are_collections_and_search_cites_stored_text(
    client: httpx.Client, served: Served
) -> None:
    with sdk(served.base_url) as api:
        grass = api.files.create(file=("grass.txt", GRASS.encode()), purpose="assistants")
        sea = api.files.create(file=("sea.txt", SEA.encode()), purpose="assistants")
        store = api.vector_stores.create(
            name="Nature", file_ids=[grass.id], metadata={"team": "outdoors"}
        )
        assert (store.object, store.name, store.status, store.file_counts.completed) == (
            "vector_store",
            "Nature",
            "completed",
            1,
        )
        collection = client.get(f"/v1/collections/{store.id}").json()
        assert (collection["name"], collection["metadata"], collection["document_count"]) == (
            "Nature",
            {"team": "outdoors"},
            1,
        )
        added = api.vector_stores.files.create_and_poll(vector_store_id=store.id, file_id=sea.id)
        assert (added.id, added.status, added.vector_store_id) == (sea.id, "completed", store.id)
        listed = api.vector_stores.files.list(vector_store_id=store.id)
        assert [f.id for f in listed] == [sea.id, grass.id]
        assert api.vector_stores.retrieve(store.id).file_counts.total == 2
        assert [s.id for s in api.vector_stores.list()] == [store.id]

        results = api.vector_stores.search(
            vector_store_id=store.id, query="What color is the grass?", max_num_results=3
        )
        best = results.data[0]
        assert (best.file_id, best.filename) == (grass.id, "grass.txt")
        where = best.model_extra["citegate"] if best.model_extra else {}
        text = document_text(served.base_url, grass.id)
        assert best.content[0].text == text[where["start_char"] : where["end_char"]]
        assert "green" in best.content[0].text

        removed = api.vector_stores.files.delete(file_id=sea.id, vector_store_id=store.id)
        assert (removed.id, removed.deleted) == (sea.id, True)
        assert [f.id for f in api.vector_stores.files.list(vector_store_id=store.id)] == [grass.id]
        assert api.files.retrieve(sea.id).id == sea.id  # the file stays

        for call, param in (
            (
                lambda: api.vector_stores.create(
                    chunking_strategy={
                        "type": "static",
                        "static": {"max_chunk_size_tokens": 100, "chunk_overlap_tokens": 0},
                    }
                ),
                "chunking_strategy",
            ),
            (lambda: api.vector_stores.create(extra_body={"colour": "blue"}), "colour"),
            (
                lambda: api.vector_stores.search(
                    vector_store_id=store.id,
                    query="grass",
                    filters={"type": "eq", "key": "a", "value": "b"},
                ),
                "filters",
            ),
            (
                lambda: api.vector_stores.search(
                    vector_store_id=store.id, query="grass", max_num_results=51
                ),
                "max_num_results",
            ),
        ):
            with pytest.raises(openai.BadRequestError) as refused:
                call()
            assert refused.value.param == param

        deleted = api.vector_stores.delete(store.id)
        assert (deleted.id, deleted.deleted) == (store.id, True)
        with pytest.raises(openai.NotFoundError) as missing:
            api.vector_stores.retrieve(store.id)
        assert missing.value.code == "collection_not_found"


def test_another_tenants_files_and_stores_are_not_found(
    client: httpx.Client, served: Served, database_url: str
) -> None:
    _, key = make_key(database_url, "openai-files-a")
    _, other_key = make_key(database_url, "openai-files-b")
    with sdk(served.base_url, key) as api, sdk(served.base_url, other_key) as other:
        mine = api.files.create(file=("grass.txt", GRASS.encode()), purpose="user_data")
        store = api.vector_stores.create(name="Mine", file_ids=[mine.id])
        calls = (
            lambda: other.files.retrieve(mine.id),
            lambda: other.files.content(mine.id),
            lambda: other.files.delete(mine.id),
            lambda: other.vector_stores.retrieve(store.id),
            lambda: other.vector_stores.delete(store.id),
            lambda: other.vector_stores.files.list(vector_store_id=store.id),
            lambda: other.vector_stores.search(vector_store_id=store.id, query="grass"),
            lambda: other.vector_stores.create(name="Theirs", file_ids=[mine.id]),
        )
        for call in calls:
            with pytest.raises(openai.NotFoundError) as missing:
                call()
            assert missing.value.body["type"] == "invalid_request_error"  # type: ignore[index]
        theirs = other.vector_stores.create(name="Theirs")
        with pytest.raises(openai.NotFoundError):
            other.vector_stores.files.create(vector_store_id=theirs.id, file_id=mine.id)
        assert [s.id for s in other.vector_stores.list()] == [theirs.id]  # none made above
        assert other.vector_stores.files.list(vector_store_id=theirs.id).data == []
        assert [f.id for f in other.files.list()] == []
        assert api.files.retrieve(mine.id).id == mine.id
