"""Bill of materials, power and capex: systems, switches, NICs, cables and modules.

Every part is counted once, by tier. A system (server, node, rack) with a power figure
covers everything inside it, so its accelerators, in-system scale-up switch chips and
NICs are listed with their own figures but marked ``in_system`` and not added again; a
system without one adds its parts one by one, and its host (CPUs, memory, fans, power
supplies) is a part without a figure. Cables and modules: a copper or active optical
cable (``dac``, ``acc``, ``aec``, ``aoc``, ``twisted_pair``) is one assembly per link with
power at both ends; a pluggable, LPO or CPO module sits at each end of a link (two per
link) with a passive fibre between.

Each part's power is the catalog's maximum where published, else its typical figure
(``power_basis`` says which; see :data:`POWER_BASIS`). A part without either is listed
with its power unknown and makes every sum it belongs to partial: the summary names it
and :attr:`PowerSummary.complete` is false, so a report never calls a partial sum a
total. Prices work the same way for capex: each comes from the catalog's ``prices``
section (:mod:`topomodel.inputs.prices`) with a low-high range, so capex has a low and a
high sum beside its central one, and :attr:`PowerSummary.assumed_prices` names the parts
whose price is an assumption.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import cast

from topomodel.fabric.cabling import cable_classes
from topomodel.fabric.tables import Fabric
from topomodel.inputs.parts import Accelerator, Nic, Optic, Part, ScaleupSwitch, Switch, System
from topomodel.inputs.prices import Price
from topomodel.inputs.records import documented
from topomodel.inputs.units import format_si

CABLE_FORMS = ("dac", "acc", "aec", "aoc", "twisted_pair")
POWER_BASIS = documented(
    "bom.POWER_BASIS", "max, else typical",
    """Which catalog figure a part's power is: the maximum (what a facility provisions
    for) where the source publishes one, else the typical figure. A sum with parts at
    their typical figure is lower than the provisioning total; the summary names them
    (``typical_only``).""")
NETWORK_CATEGORIES = ("scaleup_switch", "switch", "nic", "cable", "module", "fibre")
_NODE_ORDER = {"accelerator": 1, "scaleup_switch": 2, "nic": 3, "switch": 4}
_TIER_ORDER = ("host", "accelerator", "scaleup", "scaleup_l2", "scaleup_l3", "nic", "leaf",
               "spine", "core")


@dataclass(frozen=True)
class BomLine:
    """One kind of part in one tier: how many, their power and their price.

    ``power_W`` and ``price_USD`` are for all ``count`` items; ``in_system`` parts are
    inside a system whose own figure covers them, so totals leave them out.
    """

    category: str  # system, accelerator, scaleup_switch, switch, nic, cable, module, fibre
    tier: str  # node tier of a part, link tier of a cable, module or fibre; '' for systems
    model: str
    name: str
    count: int
    unit_power_W: float | None  # per item (per module; per assembly for cables)
    power_W: float | None
    power_basis: str  # max, typical, passive or unknown
    in_system: bool
    energy_pJ_per_bit: float | None  # optics: power per end / one-way bit rate
    provenance: str  # of the power figure
    unit_price_USD: float | None
    price_USD: float | None
    price_low_USD: float | None = None  # all count items at the low end of the range
    price_high_USD: float | None = None
    price_provenance: str = ""  # of the price: secondary, assumed, ...


def part_power_W(part: Part) -> tuple[float | None, str]:
    """A part's power per item, watts, and which figure it is (:data:`POWER_BASIS`)."""
    if part.power_W is not None:
        return part.power_W, "max"
    if part.power_typical_W is not None:
        return part.power_typical_W, "typical"
    return None, "unknown"


def _priced(line: BomLine, price: Price | None) -> BomLine:
    """``line`` with the price per item, the total and its range for ``line.count``."""
    if price is None:
        return replace(line, unit_price_USD=None, price_USD=None)
    n = line.count
    return replace(line, unit_price_USD=price.price_USD, price_USD=price.price_USD * n,
                   price_low_USD=price.low_USD * n, price_high_USD=price.high_USD * n,
                   price_provenance=price.provenance)


def _line(category: str, tier: str, part: Part, name: str, count: int, price: Price | None,
          *, in_system: bool = False, per_item: float = 1.0) -> BomLine:
    """A line for ``count`` items of ``part`` at ``price`` each; ``per_item`` figures of
    the part per item (2 for a cable assembly, whose catalog power is per end)."""
    unit, basis = part_power_W(part)
    unit = None if unit is None else unit * per_item
    key = "power" if basis == "max" else "power_typical"
    energy = part.energy_pJ_per_bit if isinstance(part, Optic) else None
    return _priced(BomLine(category, tier, part.id, name, count, unit,
                           None if unit is None else unit * count, basis, in_system, energy,
                           part.provenance_of(key) if unit is not None else "", None, None),
                   price)


def bill_of_materials(fabric: Fabric) -> list[BomLine]:
    """Every part of the fabric, grouped by category, tier and model, in a stable order."""
    catalog = fabric.catalog
    system = catalog.get(fabric.design.system, System)
    system_powered = part_power_W(system)[0] is not None
    lines: list[BomLine] = []
    systems = fabric.structure.systems
    if systems:
        lines.append(_line("system", "", system, system.title, systems,
                           catalog.price_of(system.id)))
        if not system_powered:  # the host around the parts counted below
            lines[-1] = _priced(BomLine(
                "system", "", system.id, f"{system.title} (host: CPUs, memory, fans, power"
                " supplies)", systems, None, None, "unknown", False, None, "", None, None),
                catalog.price_of(system.id))
    nodes = fabric.nodes
    inside = (nodes["system"] >= 0).to_numpy()
    counts = nodes.assign(inside=inside).groupby(["kind", "tier", "model", "inside"],
                                                 observed=True).size()
    keyed = {cast(tuple[str, str, str, bool], key): int(n) for key, n in counts.items()}
    for (kind, tier, model, in_box), count in sorted(
            keyed.items(), key=lambda kv: (_NODE_ORDER[kv[0][0]], _tier_rank(kv[0][1]),
                                           kv[0][2], kv[0][3])):
        entry = catalog.entries[model]
        assert isinstance(entry, Accelerator | ScaleupSwitch | Switch | Nic)
        lines.append(_line(str(kind), str(tier), entry, entry.title, count,
                           catalog.price_of(entry.id),
                           in_system=bool(in_box) and system_powered))
    lines.extend(_cabling(fabric))
    return lines


def per_system_cost(fabric: Fabric) -> tuple[float | None, float | None]:
    """One more system's power (W) and price (USD) as :func:`bill_of_materials` counts a
    system: its own figure, or with none its accelerators, scale-up switches and NICs
    (the host's unknown share left out); ``None`` where a part has no figure. Not the
    switch ports or cables a larger fabric would need."""
    catalog = fabric.catalog
    system = catalog.get(fabric.design.system, System)

    def price_USD(ident: str) -> float | None:
        found = catalog.price_of(ident)
        return None if found is None else found.price_USD

    power, price = part_power_W(system)[0], price_USD(system.id)
    systems = max(fabric.structure.systems, 1)
    if power is not None:
        return power, price
    power = 0.0
    nodes = fabric.nodes
    for model, count in nodes.loc[nodes["system"] >= 0, "model"].value_counts().items():
        part = fabric.catalog.entries[str(model)]
        unit = part_power_W(part)[0] if isinstance(part, Part) else None
        power = None if power is None or unit is None else power + unit * count / systems
        each = price_USD(part.id) if isinstance(part, Part) else None
        price = None if price is None or each is None else price + each * count / systems
    return power, price


def _tier_rank(tier: str) -> int:
    return _TIER_ORDER.index(tier) if tier in _TIER_ORDER else len(_TIER_ORDER)


def cables_per_optic(fabric: Fabric) -> dict[tuple[str, str], int]:
    """Cables (both directions' rows counted once) per (tier, optic or cable part) of
    every link row with one, in the order of the tier's and the optic's codes, from the
    fabric's :func:`~topomodel.fabric.cabling.cable_classes`."""
    per_optic: dict[tuple[str, str], int] = {}
    for (tier, optic, _, _), cables in fabric.derived(cable_classes).items():
        if optic:
            per_optic[tier, optic] = per_optic.get((tier, optic), 0) + cables
    return {key: n // 2 for key, n in per_optic.items() if n // 2}


def _cabling(fabric: Fabric) -> Iterable[BomLine]:
    keyed = cables_per_optic(fabric)
    for (tier, optic_id), links_count in sorted(keyed.items(),
                                               key=lambda kv: (_tier_rank(kv[0][0]), kv[0][1])):
        catalog = fabric.catalog
        optic = catalog.get(optic_id, Optic)
        price = catalog.price_of(optic.id)
        if optic.form in CABLE_FORMS:
            yield _line("cable", tier, optic, optic.title, links_count, price, per_item=2.0)
            continue
        yield _line("module", tier, optic, optic.title, 2 * links_count, price)
        yield _priced(BomLine("fibre", tier, optic.fibre or optic.medium,
                              f"{optic.medium} fibre cable for {optic.id}", links_count, 0.0,
                              0.0, "passive", False, None, "derived", None, None),
                      catalog.price_of(optic.fibre) if optic.fibre else None)


@dataclass(frozen=True)
class TierPower:
    """Power of one tier's parts, watts; ``in_system`` when a system figure covers them."""

    tier: str  # systems, accelerators, scale-up switches, NICs, leaf switches, ...
    power_W: float
    parts: int
    in_system: bool
    complete: bool  # every part of the tier has a figure
    capex_USD: float | None = None  # its parts at their prices (None: none has one)
    capex_low_USD: float | None = None
    capex_high_USD: float | None = None
    capex_complete: bool = False  # every part of the tier has a price


@dataclass(frozen=True)
class PowerSummary:
    """Power and capex of a bill of materials.

    ``total_W`` adds every part once (systems with their figure cover their insides);
    it is the total only when ``complete``, otherwise a partial sum of the parts that
    have a figure, and ``unknown`` names the rest. ``network_W`` is every network
    part at its own figure (switches, scale-up switch chips, NICs, cables and modules),
    ``network_in_systems_W`` the share of it already inside system figures.
    ``typical_only`` names parts counted at a typical figure (no maximum published).
    ``capex_USD`` is ``None`` when no part has a price; ``unpriced`` names the parts
    without one. ``capex_low_USD`` and ``capex_high_USD`` take every price at the low
    and the high end of its range; ``network_capex_USD`` is the network parts counted
    (scale-out switches, NICs outside systems, cables, modules, fibre), and
    ``assumed_prices`` names the parts whose price is an assumption.
    """

    total_W: float
    complete: bool
    unknown: tuple[str, ...]
    typical_only: tuple[str, ...]
    systems_W: float  # systems with a figure, or their parts counted one by one
    accelerators_W: float  # the accelerators' own figures (inside or not)
    network_W: float
    network_in_systems_W: float
    switches_W: float  # scale-out switches
    nics_W: float
    scaleup_switches_W: float
    optics_W: float  # cables and modules
    total_W_per_accelerator: float
    network_W_per_accelerator: float
    tiers: tuple[TierPower, ...]
    capex_USD: float | None
    capex_complete: bool
    unpriced: tuple[str, ...]
    capex_low_USD: float | None = None
    capex_high_USD: float | None = None
    network_capex_USD: float | None = None
    assumed_prices: tuple[str, ...] = ()


_TIER_LABEL = {"system": "systems", "accelerator": "accelerators",
               "scaleup_switch": "scale-up switches", "nic": "NICs", "switch": "switches",
               "cable": "cables and optics", "module": "cables and optics",
               "fibre": "cables and optics"}


def _tier_name(line: BomLine) -> str:
    label = _TIER_LABEL[line.category]
    if line.category in ("switch", "cable", "module", "fibre") or (
            line.category == "scaleup_switch" and line.tier != "scaleup"):
        return f"{line.tier} {label}"
    return label


def power_summary(lines: list[BomLine], accelerators: int) -> PowerSummary:
    """Totals by category and by tier from a bill of materials (watts, US dollars)."""
    counted = [ln for ln in lines if not ln.in_system]

    def watts(selected: Iterable[BomLine]) -> float:
        return sum(ln.power_W or 0.0 for ln in selected)

    unknown = _names(ln for ln in counted if ln.power_W is None)
    typical = _names(ln for ln in lines if ln.power_basis == "typical")
    network = [ln for ln in lines if ln.category in NETWORK_CATEGORIES]
    tiers: dict[tuple[str, bool], list[BomLine]] = {}
    for ln in lines:
        tiers.setdefault((_tier_name(ln), ln.in_system), []).append(ln)
    tier_rows = tuple(TierPower(name, watts(group), sum(ln.count for ln in group),
                                inside, all(ln.power_W is not None for ln in group),
                                *_capex(group), all(ln.price_USD is not None for ln in group))
                      for (name, inside), group in tiers.items())
    total = watts(counted)
    network_W = watts(network)
    priced = [ln for ln in counted if ln.price_USD is not None]
    unpriced = _names(ln for ln in counted if ln.price_USD is None)

    def category(*names: str) -> float:
        return watts(ln for ln in lines if ln.category in names)

    per = (lambda w: w / accelerators) if accelerators else (lambda w: float("nan"))
    central, low, high = _capex(counted)
    return PowerSummary(
        total, not unknown, unknown, typical,
        watts(ln for ln in counted if ln.category not in NETWORK_CATEGORIES),
        category("accelerator"), network_W, watts(ln for ln in network if ln.in_system),
        category("switch"), category("nic"), category("scaleup_switch"),
        category("cable", "module"), per(total), per(network_W), tier_rows,
        central if priced else None, not unpriced, unpriced, low, high,
        _capex([ln for ln in counted if ln.category in NETWORK_CATEGORIES])[0],
        _names(ln for ln in counted if ln.price_provenance == "assumed"))


def _capex(selected: Iterable[BomLine]) -> tuple[float | None, float | None, float | None]:
    """Central, low and high sums of the lines' prices (``None`` where none has one)."""
    priced = [ln for ln in selected if ln.price_USD is not None]
    if not priced:
        return None, None, None
    return (sum(ln.price_USD or 0.0 for ln in priced),
            sum(ln.price_low_USD or 0.0 for ln in priced),
            sum(ln.price_high_USD or 0.0 for ln in priced))


def _names(selected: Iterable[BomLine]) -> tuple[str, ...]:
    return tuple(sorted({f"{ln.category} {ln.model}" for ln in selected}))


def power_text(summary: PowerSummary) -> str:
    """One line for a summary table: the total (or the partial sum) and its gaps.

    Examples
    --------
    >>> s = PowerSummary(1e6, False, ("switch x",), (), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, (),
    ...                  None, False, ())
    >>> power_text(s)
    'partial sum 1 MW (no power figure for: switch x)'
    """
    text = f"{format_si(summary.total_W, 'W')}"
    if not summary.complete:
        return f"partial sum {text} (no power figure for: {', '.join(summary.unknown)})"
    return f"total {text}"
