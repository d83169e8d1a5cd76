"""The price table: the shipped one reads; one that cannot price every model is refused whole
when read (the service does not start), not when a report needs it."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from app.usage.prices import PriceTableError, load_prices


def test_the_shipped_table_prices_cache_tokens_and_batches() -> None:
    prices = load_prices()
    usage = {
        "input_tokens": 1000,
        "output_tokens": 100,
        "cache_creation_input_tokens": 2000,
        "cache_read_input_tokens": 10_000,
    }
    alone = prices.cost("claude-sonnet-4-5", usage, batch=False)
    assert alone == (1000 * 3 + 100 * 15 + 2000 * Decimal("3.75") + 10_000 * Decimal("0.3")) / (
        10**6
    )
    assert prices.cost("claude-sonnet-4-5", usage, batch=True) == alone / 2
    assert prices.cost("a-model-it-does-not-name", usage, batch=False) == alone  # "*"
    assert prices.cost("citegate-local-1", usage, batch=False) == 0


@pytest.mark.parametrize(
    "table",
    [
        {"version": "1", "batch_discount": "0.5", "models": {"m": {"input": "1"}}},
        {
            "version": "1",
            "batch_discount": "0.5",
            "models": {"m": dict.fromkeys(("input", "output", "cache_write", "cache_read"), "1")},
        },  # no "*"
        {
            "version": "1",
            "batch_discount": "2",
            "models": {"*": dict.fromkeys(("input", "output", "cache_write", "cache_read"), "1")},
        },
        {
            "version": "1",
            "batch_discount": "0.5",
            "models": {"*": dict.fromkeys(("input", "output", "cache_write", "cache_read"), "-1")},
        },
        {
            "version": "1",
            "batch_discount": "0.5",
            "models": {"*": dict.fromkeys(("input", "output", "cache_write", "cache_read"), 1.5)},
        },
    ],
)
def test_a_table_that_cannot_price_is_refused(table: object, tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(table))
    with pytest.raises(PriceTableError):
        load_prices(path)


def test_a_missing_or_broken_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PriceTableError):
        load_prices(tmp_path / "none.json")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(PriceTableError):
        load_prices(tmp_path / "broken.json")
