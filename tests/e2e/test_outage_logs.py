"""While the database is away, the background loops that poll it every round (the answer batch
poller, the local engine's look for batches) say so once, without a traceback, and once more
when it is back: not a traceback a round. PostgreSQL cut through a proxy, as
test_database_down cuts it. (SQLite's cut there drops the pool once no request holds its
connection, which a loop polling every 50 ms races; the log's logic is the same for both.)"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import httpx
import pytest

from app.settings import Settings
from tests.e2e.test_database_down import cut_off

POLLER = "app.batches.poller"
LOCAL_BATCHES = "app.local_engine.batches"


def poll_errors(http: httpx.Client) -> int:
    metrics = http.get("/metrics").text
    found = re.search(r"^citegate_answer_batch_poll_errors_total (\S+)$", metrics, re.MULTILINE)
    return int(float(found.group(1))) if found else 0


def wait_for(condition: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the poller did not get there"
        time.sleep(0.05)


def test_an_outage_is_logged_once_by_the_batch_poller(
    client: httpx.Client,
    settings: Settings,
    database_url: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite's cut races a loop that polls every 50 ms (see the module)")
    polling = settings.model_copy(update={"batch_poller": True, "batch_poll_seconds": 0.05})
    caplog.set_level(logging.INFO, logger="app")
    with (
        cut_off(polling, database_url, tmp_path) as cuttable,
        httpx.Client(base_url=cuttable.served.base_url, timeout=30) as http,
    ):
        before = poll_errors(http)
        cuttable.cut()
        try:
            wait_for(lambda: poll_errors(http) >= before + 5)  # five rounds failed at least
        finally:
            cuttable.restore()
        polled = [r for r in caplog.records if r.name == POLLER]
        away = [r for r in polled if "cannot be reached" in r.getMessage()]
        assert len(away) == 1 and away[0].levelno == logging.WARNING
        assert not any(r.exc_info for r in polled)
        wait_for(lambda: any("answers again" in r.getMessage() for r in caplog.records))
        errors = poll_errors(http)
        time.sleep(0.5)  # rounds that succeed
        assert poll_errors(http) == errors
    polled = [r for r in caplog.records if r.name == POLLER]
    assert [r.getMessage() for r in polled if "answers again" in r.getMessage()] == [
        "polling answer batches: the database answers again"
    ]
    assert len([r for r in polled if "cannot be reached" in r.getMessage()]) == 1
    # The local engine's look for batches (every batch_poll_seconds too) no more than that.
    local = [r for r in caplog.records if r.name == LOCAL_BATCHES]
    assert not any(r.exc_info for r in local)
    assert len([r for r in local if "cannot be reached" in r.getMessage()]) <= 1
