"""Power and capex as build and review print them: one wording for both.

Every function takes the JSON form of a :class:`~topomodel.analysis.bom.PowerSummary`
(``dataclasses.asdict``) or of :class:`~topomodel.analysis.bom.BomLine` rows, so the
review can render what the build report computed. A sum with a part lacking a figure
is printed as a *partial sum* naming the part, never as a total.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from topomodel.inputs.units import format_si


def format_usd(value_USD: float) -> str:
    """A price in US dollars, with a thousands separator or in millions.

    Examples
    --------
    >>> format_usd(3000), format_usd(12_345_678)
    ('3,000 USD', '12.35 M USD')
    """
    if abs(value_USD) >= 1e6:
        return f"{value_USD / 1e6:.4g} M USD"
    return f"{value_USD:,.0f} USD"


def _per_accelerator(value_W: float) -> str:
    return format_si(value_W, "W") if math.isfinite(value_W) else "-"


def power_headline(power: Mapping[str, Any]) -> str:
    """The total (or partial sum) with its per-accelerator share and its basis.

    Examples
    --------
    >>> power_headline({"total_W": 2e3, "complete": False, "unknown": ["nic x"],
    ...                 "typical_only": [], "total_W_per_accelerator": 250.0})
    'partial sum 2 kW (250 W per accelerator); no power figure for: nic x'
    """
    word = "total" if power["complete"] else "partial sum"
    text = (f"{word} {format_si(power['total_W'], 'W')}"
            f" ({_per_accelerator(power['total_W_per_accelerator'])} per accelerator)")
    if not power["complete"]:
        text += f"; no power figure for: {', '.join(power['unknown'])}"
    if power["typical_only"]:
        text += f"; typical, not maximum, for: {', '.join(power['typical_only'])}"
    return text


def network_headline(power: Mapping[str, Any]) -> str:
    """Every network part at its own figure, by kind, and the share inside systems."""
    parts = [(power["switches_W"], "switches"), (power["nics_W"], "NICs"),
             (power["scaleup_switches_W"], "scale-up switches"),
             (power["optics_W"], "cables and optics")]
    missing = [t["tier"] for t in power["tiers"]
               if t["tier"] not in ("systems", "accelerators") and not t["complete"]]
    text = (("partial sum " if missing else "") + f"{format_si(power['network_W'], 'W')}"
            f" ({_per_accelerator(power['network_W_per_accelerator'])} per accelerator): "
            + ", ".join(f"{label} {format_si(w, 'W')}" for w, label in parts if w))
    if power["network_in_systems_W"]:
        text += (f"; {format_si(power['network_in_systems_W'], 'W')} of it inside the"
                 " systems' own figure")
    if missing:  # parts without a figure are unknown, not zero
        text += f"; no figure for: {', '.join(missing)}"
    return text


def capex_range(low_USD: float | None, high_USD: float | None) -> str:
    """`` (range LOW-HIGH)`` where the low and high sums differ, else empty.

    Examples
    --------
    >>> capex_range(1e6, 2e6), capex_range(5.0, 5.0)
    (' (range 1 M USD-2 M USD)', '')
    """
    if low_USD is None or high_USD is None or low_USD == high_USD:
        return ""
    return f" (range {format_usd(low_USD)}-{format_usd(high_USD)})"


def capex_headline(power: Mapping[str, Any]) -> str | None:
    """The capex line with its low-high range and its network share, or ``None`` when
    no part has a price."""
    if power["capex_USD"] is None:
        return None
    capex = power["capex_USD"]
    text = (("total " if power["capex_complete"] else "partial sum ") + format_usd(capex)
            + capex_range(power.get("capex_low_USD"), power.get("capex_high_USD")))
    network = power.get("network_capex_USD")
    if network is not None and capex:
        text += f"; network {format_usd(network)} ({network / capex:.1%})"
    if power.get("assumed_prices"):
        text += f"; assumed prices for: {', '.join(power['assumed_prices'])}"
    if not power["capex_complete"]:
        text += f"; no price for: {', '.join(power['unpriced'])}"
    return text


def summary_rows(power: Mapping[str, Any]) -> list[dict[str, str]]:
    """The power, network power and (when priced) capex rows of a summary table."""
    rows = [{"item": "power", "value": power_headline(power)},
            {"item": "network power", "value": network_headline(power)}]
    capex = capex_headline(power)
    if capex is not None:
        rows.append({"item": "capex", "value": capex})
    return rows


def tier_rows(power: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per tier: parts, power (``?`` where no part of it has a figure, partial
    where some have none), and whether a system figure already covers it."""
    priced = any(t.get("capex_USD") is not None for t in power["tiers"])
    rows = []
    for t in power["tiers"]:
        row = {"tier": t["tier"], "parts": t["parts"],
               "power": "?" if not t["complete"] and not t["power_W"] else
               format_si(t["power_W"], "W") + ("" if t["complete"] else " (partial)")}
        if priced:
            row["capex"] = "?" if t.get("capex_USD") is None else (
                format_usd(t["capex_USD"]) + ("" if t["capex_complete"] else " (partial)"))
            row["capex range"] = capex_range(t.get("capex_low_USD"), t.get(
                "capex_high_USD")).removeprefix(" (range ").removesuffix(")")
        row["counted"] = "in the system figure" if t["in_system"] else "yes"
        rows.append(row)
    return rows


def bom_rows(lines: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The bill-of-materials table; price columns only when some part has a price."""
    priced = any(b["unit_price_USD"] is not None for b in lines)
    rows = []
    for b in lines:
        row: dict[str, Any] = {
            "category": b["category"], "tier": b["tier"] or "-", "model": b["model"],
            "count": b["count"],
            "power each": "?" if b["unit_power_W"] is None
            else format_si(b["unit_power_W"], "W"),
            "power": "?" if b["power_W"] is None else format_si(b["power_W"], "W")
            + (" (in system)" if b["in_system"] else ""),
            "basis": b["power_basis"],
            "pJ/bit": "" if b["energy_pJ_per_bit"] is None
            else f"{b['energy_pJ_per_bit']:.3g}",
            "provenance": b["provenance"]}
        if priced:
            row["price each"] = ("?" if b["unit_price_USD"] is None
                                 else format_usd(b["unit_price_USD"]))
            row["price basis"] = b.get("price_provenance", "")
        rows.append(row)
    return rows


def power_warnings(power: Mapping[str, Any]) -> list[str]:
    """Warnings a report prints: a partial power sum, a partial capex."""
    out = []
    if not power["complete"]:
        out.append(f"power is a partial sum, not a total: no power figure in the catalog"
                   f" for {', '.join(power['unknown'])}")
    if power["capex_USD"] is not None and not power["capex_complete"]:
        out.append(f"capex is a partial sum: no price in the catalog for"
                   f" {', '.join(power['unpriced'])}")
    return out


def cost_rows(cost: Mapping[str, Any], tokens: str = "tokens") -> list[dict[str, str]]:
    """The cost-per-token table from the JSON form of a
    :class:`~topomodel.analysis.cost.TokenCost` (``dataclasses.asdict`` plus ``text``,
    ``capex_complete`` and ``unpriced``): per hour by term, $ per million ``tokens``, J
    per token, and what it assumed."""
    rate = f"goodput {tokens}/s" if cost["goodput"] else f"{tokens}/s"
    one = tokens.removesuffix("s")
    return [
        {"item": "capex (the job's share)", "value": format_usd(cost["capex_USD"])
         + ("" if cost["capex_complete"] else
            f" (partial sum: no price for {', '.join(cost['unpriced'])})")},
        {"item": "IT power / facility power", "value":
         f"{format_si(cost['it_power_W'], 'W')} / {format_si(cost['facility_power_W'], 'W')}"},
        {"item": "capex per hour", "value": f"{cost['capex_USD_per_h']:,.2f} USD"},
        {"item": "facility per hour", "value": f"{cost['facility_USD_per_h']:,.2f} USD"},
        {"item": "energy per hour", "value": f"{cost['energy_USD_per_h']:,.2f} USD"},
        {"item": "total per hour", "value": f"{cost['USD_per_h']:,.2f} USD"},
        {"item": rate, "value": f"{cost['tokens_per_s']:,.0f}"},
        {"item": f"cost per million {tokens}", "value": f"{cost['USD_per_Mtok']:.4g} USD"},
        {"item": f"energy per {one}", "value": f"{cost['J_per_token']:.4g} J"},
        {"item": "assumed", "value": cost["text"]},
    ]
