"""A worker imports the libraries of the document kinds when it first reads such a document,
and coredis only for a Redis store, not when it starts; Alembic not at all (``citegate serve``
migrates in a process of its own). So a fresh process serving answers holds none of them.
That each kind still finds its library is what tests/e2e/test_formats.py shows, uploading
every format."""

from __future__ import annotations

import subprocess
import sys

from app.documents.kinds import LAZY_LIBRARIES

NOT_AT_START = (*LAZY_LIBRARIES, "coredis", "alembic")


def test_starting_the_service_imports_no_format_library() -> None:
    # A process of its own: this one has imported them all for other tests.
    script = (
        "import sys, app.cli, app.main; app.main.create_app(); "
        f"print(' '.join(m for m in {NOT_AT_START!r} if m in sys.modules))"
    )
    found = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True
    ).stdout.split()
    assert found == []
