"""Per-tier summary of a fabric: devices, links, ports, capacity, oversubscription."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topomodel.arrays import distinct
from topomodel.fabric.columns import Coded, CodeLabels
from topomodel.fabric.tables import Fabric, link_weaker_Bps
from topomodel.inputs.parts import ScaleupSwitch, Switch
from topomodel.vocabulary import LINK_TIERS, SWITCH_KINDS


@dataclass(frozen=True)
class TierSummary:
    """One link tier: its switches (the upper end) and links, capacity per direction."""

    name: str
    switch_model: str
    switches: int
    links: int  # physical cables
    ports_used: int  # cables on this tier's switches (down and up), each at its own rate
    ports_free: int  # unused capacity, in ports at the tier's lowest link rate
    capacity_Bps: float  # all links of the tier, one direction
    per_accelerator_Bps: float
    oversubscription: float  # down:up bandwidth of this tier's switches (0: top or n/a)


def tier_summaries(fabric: Fabric) -> list[TierSummary]:
    """Summaries of every link tier present, in order from accelerators outwards.

    Ports used count both down and up links of the tier's switches, one per cable. Ports
    free are the switches' unused capacity in ports at the tier's lowest link rate
    (breakout ports where that rate asks for them): a cable at twice that rate takes two
    such ports, so with mixed rates (400G down, 800G up) used + free is not the radix.
    """
    nodes, links = fabric.node_arrays, fabric.link_arrays
    tier_codes = links["tier"].codes
    tier_names = list(links["tier"].categories)
    src = links["src"]
    cables = links["cables"]
    capacity = fabric.derived(link_weaker_Bps)  # per direction: the weaker one where they
    # differ
    rate = links["rate_Bps"]
    node_tier = Coded(nodes["tier"])
    node_model = CodeLabels(nodes["model"])
    kind = Coded(nodes["kind"])
    is_switch = np.logical_or.reduce([kind.equals(k) for k in SWITCH_KINDS])
    used_by_node = np.bincount(src, weights=cables, minlength=len(nodes))
    used_Bps_by_node = np.bincount(src, weights=cables * rate, minlength=len(nodes))
    accelerators = max(1, fabric.accelerator_count)
    over = {t.name: t.oversubscription for t in fabric.clos_tiers}
    out = []
    for name in LINK_TIERS:
        mask = tier_codes == tier_names.index(name)
        if not mask.any():
            continue
        switch_nodes = np.flatnonzero(is_switch & node_tier.equals(name))
        models = {node_model.label(c) for c in distinct(node_model.codes[switch_nodes])}
        model = ", ".join(sorted(models))
        used = int(used_by_node[switch_nodes].sum())
        lowest_Bps = float(rate[mask].min())
        radix = _ports_at(fabric, models, lowest_Bps)
        used_ports = float(used_Bps_by_node[switch_nodes].sum()) / lowest_Bps
        total_capacity = float(capacity[mask].sum() / 2)
        out.append(TierSummary(
            name=name, switch_model=model, switches=len(switch_nodes),
            links=int(cables[mask].sum() // 2), ports_used=used,
            ports_free=max(0, round(radix * len(switch_nodes) - used_ports))
            if len(switch_nodes) else 0,
            capacity_Bps=total_capacity, per_accelerator_Bps=total_capacity / accelerators,
            oversubscription=over.get(name, 0.0)))
    return out


def _ports_at(fabric: Fabric, models: set[str], rate_Bps: float) -> int:
    """Ports per switch of this tier at ``rate_Bps`` (the lowest link rate it carries)."""
    if len(models) != 1:
        return 0
    entry = fabric.catalog.entries[next(iter(models))]
    if isinstance(entry, Switch):
        return entry.radix_at(rate_Bps) or int(entry.capacity_per_direction_Bps // rate_Bps)
    if isinstance(entry, ScaleupSwitch):
        return entry.ports
    return 0
