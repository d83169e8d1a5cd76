"""The garbage collector is tuned only in a process the service has to itself: an app embedded
in another program leaves its host's collector as it was."""

from __future__ import annotations

import gc

import httpx

from app.main import GC_THRESHOLDS, create_app
from app.settings import Settings
from tests.conftest import Served


def collector() -> tuple[tuple[int, ...], int]:
    return gc.get_threshold(), gc.get_freeze_count()


def test_an_embedded_app_leaves_its_hosts_collector_alone(settings: Settings) -> None:
    before = collector()
    with Served(create_app(settings)) as served:
        assert httpx.get(f"{served.base_url}/healthz").status_code == 200
        assert collector() == before
    assert collector() == before


def test_the_app_of_a_process_of_its_own_tunes_the_collector_once_started(
    settings: Settings,
) -> None:
    thresholds = gc.get_threshold()
    assert thresholds != GC_THRESHOLDS and gc.get_freeze_count() == 0
    app = create_app(settings, own_process=True)
    assert gc.get_threshold() == thresholds  # not before it starts
    try:
        with Served(app) as served:
            assert httpx.get(f"{served.base_url}/healthz").status_code == 200
            assert gc.get_threshold() == GC_THRESHOLDS
            assert gc.get_freeze_count() > 0  # what start-up made, its engine included
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
