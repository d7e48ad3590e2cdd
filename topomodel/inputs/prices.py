"""Prices of catalog parts: one record per priced part, read from a catalog file's
``prices`` section (the built-in ones in ``catalogs/prices.yaml``).

A price is per item in US dollars: a published list or street price with its source and
date, or an assumption (``provenance: assumed``) that must give a ``range`` (low and
high, US dollars) and its reason in ``notes``. A later catalog file's price of a part
replaces an earlier one, so an overlay can re-price any part without repeating the
part's entry. A fibre's price is per fibre cable (one per optical link).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from topomodel.inputs.parts import PROVENANCES
from topomodel.inputs.records import Invalid, Reading, choice, quantity, read_record, spec, text
from topomodel.inputs.yamlsource import KeyPath

SECTION = "prices"
"""The catalog section that holds prices, by part id."""

_PRICE = quantity("price")


def price_range(reading: Reading, path: KeyPath, value: Any) -> tuple[float, float]:
    """``[low, high]``: two prices in US dollars, low not above high."""
    if not isinstance(value, list) or len(value) != 2:
        raise Invalid('expected a pair [low, high], e.g. ["20000 USD", "40000 USD"]')
    low, high = (_PRICE(reading, (*path, i), v) for i, v in enumerate(value))
    if low > high:
        raise Invalid("low is above high")
    return low, high


def date_text(reading: Reading, path: KeyPath, value: Any) -> str:
    """A year or a year and month, ``2024`` or ``2024-08``."""
    if isinstance(value, int):
        value = str(value)
    found = text(reading, path, value)
    year, _, month = found.partition("-")
    if not (len(year) == 4 and year.isdigit()
            and (not month or (len(month) == 2 and month.isdigit()
                               and 1 <= int(month) <= 12))):
        raise Invalid(f"expected a year or year-month (2024, 2024-08), got {found!r}")
    return found


@dataclass(frozen=True, kw_only=True)
class Price:
    """The price of one part per item, US dollars, with its source, date and range.

    ``range_USD`` is required when the price is assumed (the low and high a reader can
    try); a published price may give one too (list vs street price).
    """

    part: str
    file: str
    line: int | None
    price_USD: float = spec(_PRICE, key="price", doc="per item, US dollars")
    range_USD: tuple[float, float] | None = spec(
        price_range, key="range", default=None, doc="[low, high] per item, US dollars")
    date: str = spec(date_text, doc="when the price was published or assumed")
    source: str = spec(text, doc="a citation a reader can follow")
    provenance: str = spec(choice(*PROVENANCES))
    notes: str = spec(text, default="")

    def __post_init__(self) -> None:
        if self.provenance == "assumed" and self.range_USD is None:
            raise Invalid("an assumed price needs a range [low, high] and its reason in"
                          " notes", "range")
        if self.range_USD and not self.range_USD[0] <= self.price_USD <= self.range_USD[1]:
            raise Invalid("the price is outside its range", "range")

    @property
    def low_USD(self) -> float:
        """The low end of the range, or the price."""
        return self.range_USD[0] if self.range_USD else self.price_USD

    @property
    def high_USD(self) -> float:
        """The high end of the range, or the price."""
        return self.range_USD[1] if self.range_USD else self.price_USD


def read_prices(reading: Reading) -> Iterator[Price]:
    """The prices of one catalog file's ``prices`` section (problems recorded in the
    reading's source)."""
    source = reading.source
    data = source.data
    if not isinstance(data, dict) or SECTION not in data:
        return
    items = data[SECTION]
    if not isinstance(items, dict):
        source.problem((SECTION,), "expected a mapping from part ids to prices")
        return
    for ident, item in items.items():
        path = (SECTION, ident)
        found = read_record(reading, path, item, Price, part=str(ident), file=source.file,
                            line=source.line(path))
        if found is not None:
            yield found
