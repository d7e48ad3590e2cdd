"""The words and units every report uses for the bisection and the oversubscription:
rates in TB/s (and Tb/s) per direction, the bisection as "x % of injection", ratios as
"down:up" with three significant digits."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from topomodel.fabric.tables import Fabric
from topomodel.inputs.units import format_rate

NOT_JOINED = "no network joins the halves (separate scale-up domains and no scale-out)"
"""The words for a bisection across scale-up domains that nothing connects."""


def share_of_injection(ratio: float | None) -> str:
    """A bisection's per-accelerator share of the injection, as a percentage.

    Examples
    --------
    >>> share_of_injection(0.234375), share_of_injection(1.0), share_of_injection(None)
    ('23.4 % of injection', '100 % of injection', 'no injection to compare')
    """
    if ratio is None or not math.isfinite(ratio):
        return "no injection to compare"
    return f"{100 * ratio:.3g} % of injection"


def rate_text(rate_Bps: float | None) -> str:
    """A rate as :func:`~topomodel.inputs.units.format_rate` gives it, or ``not computed``.

    Examples
    --------
    >>> rate_text(None), rate_text(0.0)
    ('not computed', '0 B/s (0 b/s)')
    """
    return "not computed" if rate_Bps is None else format_rate(rate_Bps)


def bisection_text(cut: Mapping[str, Any]) -> str:
    """The bisection in one line: rate per direction, share of the injection, and the
    injection per accelerator (``cut`` is :class:`~topomodel.analysis.bisection.Bisection`
    as a mapping, as in the build JSON).

    Examples
    --------
    >>> bisection_text({"bisection_Bps": 3e12, "ratio": 0.234375, "injection_Bps": 50e9})
    '3 TB/s (24 Tb/s) per direction; 23.4 % of injection (50 GB/s (400 Gb/s) per accelerator)'
    """
    if cut["bisection_Bps"] is None:
        return cut.get("method") or "not computed"
    text = f"{format_rate(cut['bisection_Bps'])} per direction"
    if cut["ratio"] is None and not cut["bisection_Bps"]:
        return f"{text}: {NOT_JOINED}"
    if cut["ratio"] is not None and math.isfinite(cut["ratio"]):
        text += (f"; {share_of_injection(cut['ratio'])} ({format_rate(cut['injection_Bps'])}"
                 " per accelerator)")
    return text


def ratio_text(value: float) -> str:
    """An oversubscription down:up (``-`` for a tier without uplinks).

    Examples
    --------
    >>> ratio_text(4.2666), ratio_text(0)
    ('4.27:1', '-')
    """
    return f"{value:.3g}:1" if value else "-"


def oversubscription_warnings(fabric: Fabric) -> list[str]:
    """One warning per switch tier whose realised oversubscription (all its switches'
    endpoint bandwidth over their uplinks') is not the asked one, naming both."""
    out: dict[str, str] = {}
    for t in fabric.clos_tiers:
        asked, realised = t.asked_oversubscription, t.oversubscription
        if not asked or math.isclose(realised, asked, rel_tol=1e-6):
            continue
        where = t.name if not t.group or t.group.startswith("rail") else f"{t.group} {t.name}"
        out.setdefault(where, f"{where} tier realises {ratio_text(realised)} for the asked"
                       f" {ratio_text(asked)} ({t.switches} switches of up to {t.down_ports}"
                       f" down and {t.up_ports} up ports){_why(fabric)}")
    return list(out.values())


def _why(fabric: Fabric) -> str:
    so = fabric.structure.scaleout
    systems = fabric.structure.systems
    if so.unit_systems and systems < so.unit_systems:
        return (f": the fabric has {systems} of its scalable unit's {so.unit_systems} systems,"
                " and its switches are sized for the whole unit")
    if so.unit_systems and systems % so.unit_systems:
        return (f": the last scalable unit has {systems % so.unit_systems} of"
                f" {so.unit_systems} systems")
    return ": whole ports cannot give the asked ratio on these leaves"


def growth_text(fabric: Fabric) -> str:
    """How a fabric smaller than its declared scalable unit grows ('' otherwise)."""
    so = fabric.structure.scaleout
    systems = fabric.structure.systems
    if not so.unit_systems or systems >= so.unit_systems:
        return ""
    text = (f"{systems} of the {so.unit_systems} systems of one scalable unit; leaves and"
            f" spines are sized for the whole unit, so it grows to {so.unit_systems}"
            " systems on free leaf ports without new switches")
    spine = [t for t in fabric.clos_tiers if t.name == "spine" and t.plane == 0]
    leaf = [t for t in fabric.clos_tiers if t.name == "leaf" and t.plane == 0]
    if spine and leaf and fabric.structure.scaleout.fat_tree_tiers == 2:
        from topomodel.inputs.parts import Switch

        switch = fabric.catalog.get(spine[0].model, Switch)
        ports = switch.radix_at(spine[0].down_rate_Bps) or 0
        per_unit = sum(t.switches for t in leaf) * leaf[0].up_ports // max(
            1, sum(t.switches for t in spine))
        more = (ports - per_unit) // per_unit if per_unit else 0
        text += (f", then by {more} more unit{'s' * (more != 1)} on these spines"
                 f" ({(1 + more) * so.unit_systems} systems) before the spine tier grows"
                 if more else "; beyond one unit the spine tier must grow")
    return text
