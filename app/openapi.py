"""Write Citegate's OpenAPI document, as the service serves it at ``/openapi.json``.

    python -m app.openapi [PATH]

writes it to PATH, by default ``openapi.json`` at the repository root, pretty-printed with
sorted keys so that a change to the API shows as a readable diff in review. The app is built
but not started: no database, no upstream.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from app.main import create_app
from app.settings import Settings

DEFAULT_PATH = Path(__file__).resolve().parents[1] / "openapi.json"
COMMAND = "python -m app.openapi"


def document() -> dict[str, Any]:
    """The OpenAPI document of the app."""
    return create_app(Settings()).openapi()


def render(spec: dict[str, Any]) -> str:
    """The document as committed: two-space indents, sorted keys, a trailing newline."""
    return json.dumps(spec, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1 or any(arg.startswith("-") for arg in args):
        print(f"usage: {COMMAND} [PATH]   (default: {DEFAULT_PATH})", file=sys.stderr)
        return 2
    path = Path(args[0]) if args else DEFAULT_PATH
    path.write_text(render(document()), encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
