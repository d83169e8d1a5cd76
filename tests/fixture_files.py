"""Where the tests' input files live: inside the repository, next to this module, so that a clone
with nothing beside it runs its own tests. See tests/fixtures/anthropic/README.md for what each
recorded response shows and tests/fixtures/pdf/NOTICE.md for the sample PDFs' licence."""

from __future__ import annotations

from pathlib import Path

FIXTURES_ROOT = Path(__file__).resolve().parent / "fixtures"
# Messages API responses recorded from the real upstream, with the documents they cite.
FIXTURES = FIXTURES_ROOT / "anthropic"
# Sample PDFs from py-pdf/sample-files (CC-BY-SA-4.0) and their manifest.
CORPUS = FIXTURES_ROOT / "pdf"
AMAZON_PDF = FIXTURES / "amazon_2023_letter.pdf"
