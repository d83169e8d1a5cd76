"""What a served process trusts between requests (``recheck_seconds``): a document the
database vouched for, until the time is up; a key, never past its change. The rest of the
suite runs with 0, as it changes documents behind the served app's back."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import delete
from sqlalchemy.pool import NullPool

from app.db.engine import create_engine
from app.db.models import Document
from app.settings import Settings
from tests.conftest import ServedApp
from tests.e2e.test_answers import assert_problem
from tests.e2e.test_auth import assert_unauthorized, bearer, make_key, revoke
from tests.fixture_files import CORPUS


@pytest.fixture
def remembering(settings: Settings, client: httpx.Client) -> Iterator[ServedApp]:
    update = {"recheck_seconds": 3600, "whole_documents_token_budget": 12_000}
    with ServedApp(settings.model_copy(update=update)) as app:
        yield app


def delete_elsewhere(database_url: str, document_id: str) -> None:
    """Delete a document as another replica would: not through this process."""

    async def run() -> None:
        engine = create_engine(database_url, poolclass=NullPool)
        async with engine.begin() as connection:
            await connection.execute(delete(Document).where(Document.id == document_id))
        await engine.dispose()

    asyncio.run(run())


def test_a_key_revoked_elsewhere_is_refused_at_once_whatever_the_recheck(
    remembering: ServedApp, client: httpx.Client, database_url: str
) -> None:
    key_id, key = make_key(database_url, "remembered")
    with httpx.Client(base_url=remembering.base_url, headers=bearer(key)) as http:
        assert http.get("/v1/documents").status_code == 200
        revoke(database_url, key_id)  # as `citegate keys revoke` does, in another process
        assert_unauthorized(http.get("/v1/documents"))
    assert_unauthorized(client.get("/v1/documents", headers=bearer(key)))


def ask(http: httpx.Client, ids: list[str], key: str) -> httpx.Response:
    # Whole documents: what is held between questions (passages are searched every time).
    body = {"question": "What colour is it?", "document_ids": ids, "retrieval": WHOLE}
    return http.post("/v1/answers", json=body, headers=bearer(key))


WHOLE = {"mode": "documents"}


def test_documents_vouched_for_recently_are_not_looked_up_again(
    remembering: ServedApp, database_url: str
) -> None:
    # Keys first: whether any key exists is remembered too.
    _, mine = make_key(database_url, "tenant-a")
    _, theirs = make_key(database_url, "tenant-b")
    with httpx.Client(base_url=remembering.base_url, timeout=60) as http:

        def upload(name: str, data: bytes) -> str:
            files = {"file": (name, data)}
            response = http.post("/v1/documents/upload", files=files, headers=bearer(mine))
            assert response.status_code == 201, response.text
            return str(response.json()["id"])

        here = upload("grass.txt", b"The grass is green.")
        there = upload("sky.txt", b"The sky is blue.")
        for document_id in (here, there):
            assert ask(http, [document_id], mine).status_code == 200

        # Deleted through this process: refused at once.
        assert http.delete(f"/v1/documents/{here}", headers=bearer(mine)).status_code == 204
        assert_problem(ask(http, [here], mine), 404, "document_not_found")
        # Held, but not for another tenant.
        assert_problem(ask(http, [there], theirs), 404, "document_not_found")
        # Deleted through another process: answered from what is held until the recheck.
        delete_elsewhere(database_url, there)
        answer = ask(http, [there], mine)
        assert answer.status_code == 200, answer.text
        assert answer.json()["documents"][0]["document_id"] == there

        # The token budget of `auto` holds for documents held: each of these PDFs fits it
        # (about 9,700 and 6,300 tokens, 12,000 at most), both do not.
        pdfs = [
            upload(name, (CORPUS / name).read_bytes())
            for name in ("pdflatex-4-pages.pdf", "multicolumn.pdf")
        ]
        for ids in ([pdfs[0]], [pdfs[1]], [pdfs[0]], pdfs):
            body = {"question": "What colour is it?", "document_ids": ids}
            auto = http.post("/v1/answers", json=body, headers=bearer(mine))
            assert auto.status_code == 200
            assert auto.json()["retrieval"]["mode"] == ("passages" if ids == pdfs else "documents")
        # Asked as `documents`, they are sent whole.
        assert ask(http, pdfs, mine).status_code == 200
