"""Runs an official TypeScript SDK's check (``check.mjs`` in its folder under tests/, installed
by ``npm ci`` from its lock file) with Node.js against a served Citegate: its findings, as JSON."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.fake_upstream import GRASS
from tests.fixture_files import AMAZON_PDF


def run_node_check(
    folder: Path, package: str, base_url: str, key: str, question: str
) -> dict[str, Any]:
    """``node check.mjs`` in ``folder``, whose ``node_modules`` must hold ``package``."""
    node = shutil.which("node")
    if node is None or not (folder / "node_modules" / package).is_dir():
        pytest.fail(f"needs Node.js 20 and `npm ci` in {folder} (scripts/test runs it)")
    env = {
        **os.environ,
        "CITEGATE_BASE_URL": base_url,
        "CITEGATE_KEY": key,
        "CITEGATE_TEXT": GRASS,
        "CITEGATE_PDF": str(AMAZON_PDF),
        "CITEGATE_QUESTION": question,
    }
    result = subprocess.run(
        [node, "check.mjs"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    found: dict[str, Any] = json.loads(result.stdout)
    return found
