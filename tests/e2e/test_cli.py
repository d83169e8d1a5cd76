"""`citegate serve` migrates a new database and serves; `citegate migrate` alone migrates."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port

CITEGATE = shutil.which("citegate", path=str(Path(sys.executable).parent))


@pytest.fixture
def fresh_sqlite(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    env["CITEGATE_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp_path}/new/citegate.db"
    return env


def test_serve_migrates_then_answers(fresh_sqlite: dict[str, str]) -> None:
    assert CITEGATE, "the console script is installed"
    port = free_port()
    process = subprocess.Popen(
        [CITEGATE, "serve", "--port", str(port)],
        env=fresh_sqlite,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2)
                break
            except httpx.TransportError:
                assert process.poll() is None, process.stdout.read() if process.stdout else ""
                assert time.monotonic() < deadline, "citegate serve did not start"
                time.sleep(0.1)
        assert ready.json() == {
            "status": "ready",
            "database": "ok",
            "upstream": "local",
            "auth": "open",
            "rate_limits": "memory",
        }
        created = httpx.post(
            f"http://127.0.0.1:{port}/v1/documents",
            json={"source": {"type": "text", "data": "Served by the CLI."}},
        )
        assert created.status_code == 201
    finally:
        process.terminate()
        output = process.communicate(timeout=20)[0].decode()
    assert "local engine" in output  # it says which upstream answers


def test_migrate_creates_the_schema(fresh_sqlite: dict[str, str], tmp_path: Path) -> None:
    assert CITEGATE
    subprocess.run([CITEGATE, "migrate"], env=fresh_sqlite, check=True, timeout=60)
    with sqlite3.connect(tmp_path / "new" / "citegate.db") as connection:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
        tenants = connection.execute("SELECT id FROM tenants").fetchall()
    assert {"documents", "document_blobs", "document_chunks", "tenants"} <= tables
    assert tenants == [("ten_default",)]


def test_keys_create_list_revoke(fresh_sqlite: dict[str, str]) -> None:
    assert CITEGATE

    def run(*args: str) -> str:
        done = subprocess.run(
            [CITEGATE, "keys", *args], env=fresh_sqlite, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    created = dict(line.split(": ", 1) for line in run("create", "--tenant", "acme").splitlines())
    assert created["key"].startswith("cg_") and len(created["key"]) >= 40
    assert created["key"].startswith(created["prefix"])
    assert created["scopes"] == "admin read write"  # every scope over its own tenant
    operator = run("create", "--tenant", "platform", "--scope", "operator", "--name", "ops")
    assert "scopes: operator\n" in operator
    listed = run("list")
    assert "active  admin,read,write  -  -" in listed and "active  operator  -  -" in listed
    assert created["id"] in listed and "acme" in listed and created["prefix"] in listed
    assert created["key"] not in listed  # shown once, never again
    with sqlite3.connect(fresh_sqlite["CITEGATE_DATABASE_URL"].split("///", 1)[1]) as database:
        database.execute(  # a budget, as updateApiKey sets it: 12.5 USD a month
            "UPDATE api_keys SET budget_nano_usd = 12500000000, budget_period = 'month' "
            "WHERE id = ?",
            (created["id"],),
        )
    assert "active  admin,read,write  12.50 USD/month  -" in run("list")
    assert run("revoke", created["id"]).strip() == f"revoked {created['id']}"
    revoked_line = next(line for line in run("list").splitlines() if created["id"] in line)
    assert revoked_line.split()[-1] != "-"
    missing = subprocess.run(
        [CITEGATE, "keys", "revoke", "key_nope"], env=fresh_sqlite, capture_output=True, timeout=60
    )
    assert missing.returncode == 1


def test_auth_required_refuses_to_start_open(fresh_sqlite: dict[str, str]) -> None:
    assert CITEGATE
    env = dict(fresh_sqlite, CITEGATE_AUTH="required")
    done = subprocess.run(
        [CITEGATE, "serve", "--port", str(free_port())], env=env, capture_output=True, timeout=60
    )
    assert done.returncode != 0
    assert b"CITEGATE_AUTH=required but no API key exists" in done.stdout + done.stderr


def test_serve_with_workers_adds_up_their_metrics(
    fresh_sqlite: dict[str, str], tmp_path: Path
) -> None:
    """Two worker processes share the port; /metrics, whichever worker answers it, counts the
    requests both served, and a list cursor made by either is good at the other."""
    assert CITEGATE
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    env = fresh_sqlite | {"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    process = subprocess.Popen(
        [CITEGATE, "serve", "--port", str(port), "--workers", "2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 180  # two processes importing everything, on a busy CI
        while True:
            try:
                httpx.get(f"{base}/healthz", timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
                assert process.poll() is None, process.stdout.read() if process.stdout else ""
                assert time.monotonic() < deadline, "citegate serve --workers 2 did not start"
                time.sleep(0.2)
        workers = {
            int(child)
            for child in Path(f"/proc/{process.pid}/task/{process.pid}/children")
            .read_text()
            .split()
        }
        assert len(workers) >= 2  # the two workers (and multiprocessing's resource tracker)
        # Requests in bursts, each on a new connection, until both workers have served some
        # (the second may still be starting when the first answers): each writes its own
        # counters, in a file of its own that names what it counted.
        sent, deadline = 0, time.monotonic() + 120
        with ThreadPoolExecutor(8) as pool:
            while len(served_readyz(metrics_dir)) < 2:
                assert time.monotonic() < deadline, "one worker served everything"
                burst = pool.map(lambda _: httpx.get(f"{base}/readyz", timeout=30), range(16))
                assert {response.status_code for response in burst} == {200}
                sent += 16
        pattern = re.compile(
            r'citegate_http_requests_total\{method="GET",route="/readyz",status="200"\} (\S+)'
        )
        for _ in range(6):  # each scrape may land on either worker: all of them add up
            scraped = httpx.get(f"{base}/metrics", timeout=5).text
            found = pattern.search(scraped)
            assert found is not None, scraped[:2000]
            assert float(found.group(1)) == sent
        # Both workers sign cursors with one secret (none is set): a cursor that one worker
        # made, the other takes.
        for n in range(2):
            created = httpx.post(
                f"{base}/v1/documents", json={"source": {"type": "text", "data": f"Doc {n}."}}
            )
            assert created.status_code == 201, created.text
        cursor = httpx.get(f"{base}/v1/documents", params={"limit": 1}).json()["next_cursor"]
        with ThreadPoolExecutor(8) as pool:
            pages = pool.map(
                lambda _: httpx.get(f"{base}/v1/documents", params={"cursor": cursor}, timeout=30),
                range(32),
            )
            assert {page.status_code for page in pages} == {200}
    finally:
        process.terminate()
        output = process.communicate(timeout=30)[0].decode()
    assert process.returncode == 0, output


def served_readyz(metrics_dir: Path) -> set[str]:
    """The worker processes whose counters have counted a /readyz request."""
    return {
        path.stem for path in metrics_dir.glob("counter_*.db") if b'"/readyz"' in path.read_bytes()
    }
