"""Prices: a versioned table of USD per million tokens for each model, with the batch discount.

The table shipped is ``prices.json`` next to this module; ``CITEGATE_PRICES_FILE`` names one
of the operator's own, in the same shape, that replaces it. A model the table does not name is
priced by its ``"*"`` entry (none: an error when the table is read, not when it is used).
Cache writes and reads have prices of their own; an answer of a batch costs its price times
``1 - batch_discount``. Amounts are ``Decimal``: exact, and shown as decimal strings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

DEFAULT_TABLE = Path(__file__).with_name("prices.json")
PER_TOKENS = Decimal(1_000_000)
PRICED = ("input", "output", "cache_write", "cache_read")
# The token counts of a stored answer's usage, by the price that applies to them.
USAGE_PRICE = {
    "input_tokens": "input",
    "output_tokens": "output",
    "cache_creation_input_tokens": "cache_write",
    "cache_read_input_tokens": "cache_read",
}


class PriceTableError(ValueError):
    """A price table that cannot be read, or lacks what pricing needs."""


@dataclass(frozen=True, slots=True)
class Prices:
    version: str
    batch_discount: Decimal
    models: dict[str, dict[str, Decimal]]

    def cost(self, model: str, usage: dict[str, int], *, batch: bool) -> Decimal:
        """What an answer of ``model`` with this usage cost, in USD."""
        price = self.models.get(model) or self.models["*"]
        amount = sum(
            (Decimal(usage.get(field) or 0) * price[name] for field, name in USAGE_PRICE.items()),
            Decimal(0),
        )
        if batch:
            amount *= 1 - self.batch_discount
        return amount / PER_TOKENS


def load_prices(path: Path | None = None) -> Prices:
    """The table at ``path`` (the shipped one by default), checked whole."""
    path = path or DEFAULT_TABLE
    try:
        table: Any = json.loads(path.read_text(encoding="utf-8"))
        models = {
            str(model): {name: _amount(entry[name]) for name in PRICED}
            for model, entry in table["models"].items()
        }
        prices = Prices(str(table["version"]), _amount(table["batch_discount"]), models)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise PriceTableError(f"price table {path}: {type(error).__name__}: {error}") from error
    if "*" not in models:
        raise PriceTableError(f'price table {path}: no "*" entry for models it does not name')
    if not 0 <= prices.batch_discount <= 1:
        raise PriceTableError(f"price table {path}: batch_discount is not between 0 and 1")
    return prices


def _amount(value: Any) -> Decimal:
    if not isinstance(value, str | int):
        raise ValueError(f"{value!r} is not a decimal string")
    try:
        amount = Decimal(value)
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a decimal string") from None
    if not amount.is_finite() or amount < 0:
        raise ValueError(f"{value!r} is not a price")
    return amount
