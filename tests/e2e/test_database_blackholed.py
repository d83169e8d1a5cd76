"""A PostgreSQL server that answers nothing (packets dropped: a host gone, a firewall) is
given up on after ``CITEGATE_DATABASE_CONNECT_TIMEOUT_SECONDS``: the request is answered 503
``database_unavailable``, not held for asyncpg's own minute, and once the server answers
again the same request succeeds. The server is blackholed through a TCP proxy the test
controls (``tests/tcp_proxy.py``), never stopped."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy.engine import make_url

from app.main import create_app
from app.settings import Settings
from tests.conftest import Served
from tests.e2e.test_documents import assert_problem
from tests.tcp_proxy import TcpProxy


def test_a_database_that_answers_nothing_is_503_after_the_connect_timeout(
    client: httpx.Client, settings: Settings, database_url: str
) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite opens a file: there is no server to wait for")
    target = make_url(database_url)
    with TcpProxy(target.host or "127.0.0.1", target.port or 5432) as proxy:
        via_proxy = target.set(host="127.0.0.1", port=proxy.port)
        configured = settings.model_copy(
            update={
                "database_url": via_proxy.render_as_string(hide_password=False),
                "database_connect_timeout_seconds": 1.0,
            }
        )
        with (
            Served(create_app(configured)) as served,
            # Far less than asyncpg's 60 s, far more than the setting's second.
            httpx.Client(base_url=served.base_url, timeout=30) as http,
        ):
            assert http.get("/v1/documents").status_code == 200
            proxy.blackhole()
            for _ in range(2):  # the pool's connection dropped, and a new one never answered
                response = http.get("/v1/documents")
                assert_problem(response, 503, "database_unavailable")
                assert response.headers["retry-after"] == "1"
            assert http.get("/readyz").status_code == 503
            assert http.get("/healthz").status_code == 200
            proxy.restore()
            assert http.get("/v1/documents").status_code == 200
            assert http.get("/readyz").status_code == 200
