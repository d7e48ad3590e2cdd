"""Bill of materials and power: switches, NICs, cables and modules by type.

Cables and modules: a copper or active optical cable (``dac``, ``acc``, ``aec``,
``aoc``) is one assembly per link with power at both ends; a pluggable, LPO or CPO
module sits at each end of a link (two per link) with a fibre between. Power figures
are the catalog's (per module or per end); items without one are listed with their
power unknown, never counted as zero silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np

from topomodel.catalog import Accelerator, Nic, Optic, ScaleupSwitch, Switch
from topomodel.fabric.tables import Fabric, labels

CABLE_FORMS = ("dac", "acc", "aec", "aoc")


@dataclass(frozen=True)
class BomLine:
    """One kind of part: how many, and their power."""

    category: str  # accelerator, scaleup_switch, switch, nic, cable, module, fibre
    model: str
    name: str
    count: int
    unit_power_W: float | None  # per item (per module; per assembly for cables)
    power_W: float | None
    energy_pJ_per_bit: float | None  # optics: power per end / one-way bit rate
    provenance: str


def bill_of_materials(fabric: Fabric) -> list[BomLine]:
    """Every part of the fabric, grouped by category and model, in a stable order."""
    catalog = fabric.catalog
    lines: list[BomLine] = []
    node_counts = fabric.nodes.groupby(["kind", "model"], observed=True).size()
    order = {"accelerator": 0, "scaleup_switch": 1, "switch": 2, "nic": 3}
    keyed = {cast(tuple[str, str], key): int(count) for key, count in node_counts.items()}
    for (kind, model), count in sorted(keyed.items(), key=lambda kv: (order[kv[0][0]],
                                                                      kv[0][1])):
        entry = catalog.entries[model]
        assert isinstance(entry, Accelerator | ScaleupSwitch | Switch | Nic)
        power = entry.power_W
        lines.append(BomLine(str(kind), str(model), entry.title, int(count), power,
                             None if power is None else power * int(count), None,
                             entry.provenance_of("power")))
    links = fabric.links
    cabled = labels(links["optic"]) != ""
    per_optic = links[cabled].groupby("optic", observed=True)["cables"].sum() // 2
    for optic_id, count in sorted(per_optic.items()):
        optic = catalog.get(str(optic_id), Optic)
        links_count = int(count)
        if optic.form in CABLE_FORMS:
            items, per_item = links_count, None if optic.power_W is None else 2 * optic.power_W
            category = "cable"
        else:
            items, per_item, category = 2 * links_count, optic.power_W, "module"
        lines.append(BomLine(category, optic.id, optic.title, items, per_item,
                             None if per_item is None else per_item * items,
                             optic.energy_pJ_per_bit, optic.provenance_of("power")))
        if optic.form not in CABLE_FORMS:
            lines.append(BomLine("fibre", optic.fibre or optic.medium, f"{optic.medium} fibre"
                                 f" cable for {optic.id}", links_count, None, None, None,
                                 "derived"))
    return lines


@dataclass(frozen=True)
class PowerSummary:
    """Power by category, watts; ``unknown`` lists the parts without a figure."""

    accelerators_W: float
    network_W: float  # switches, NICs, cables and modules with a known power
    optics_W: float
    total_W: float
    network_W_per_accelerator: float
    unknown: tuple[str, ...]


def power_summary(lines: list[BomLine], accelerators: int) -> PowerSummary:
    """Totals from a bill of materials."""
    known = [ln for ln in lines if ln.power_W is not None]
    acc = sum(ln.power_W or 0.0 for ln in known if ln.category == "accelerator")
    optics = sum(ln.power_W or 0.0 for ln in known if ln.category in ("cable", "module"))
    network = sum(ln.power_W or 0.0 for ln in known if ln.category != "accelerator")
    unknown = tuple(sorted({f"{ln.category} {ln.model}" for ln in lines
                            if ln.power_W is None and ln.category != "fibre"}))
    return PowerSummary(acc, network, optics, acc + network,
                        network / accelerators if accelerators else float(np.nan), unknown)
