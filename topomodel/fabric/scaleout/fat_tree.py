"""The fat-tree (folded Clos) scale-out kind: 1-3 switch tiers over the NICs,
rail-optimized or not, one or more planes.

The NICs of a system are its rails; a rail-optimized fat-tree puts one rail of a
scalable unit on a leaf (rails share a leaf when a unit is small), a top-of-rack one
puts whole systems on a leaf. Each plane is its own Clos, sized and wired by
:mod:`topomodel.fabric.clos`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from topomodel.fabric.clos import (
    DEFAULT_SWITCH_LATENCY_S,
    ClosError,
    SwitchPorts,
    default_unit,
    plan_clos,
    wire_clos,
)
from topomodel.fabric.scaleout.kind import LevelGroup, ScaleoutKind, half_text
from topomodel.fabric.structure import ScaleoutStructure, nic_owners
from topomodel.fabric.tables import ClosTier, FabricBuilder, node_names, numbered
from topomodel.inputs.catalog import Catalog
from topomodel.inputs.design import Design, nic_port_rate_Bps
from topomodel.inputs.parts import HostLink, Nic, Switch, System
from topomodel.inputs.units import format_si
from topomodel.vocabulary import FAT_TREE_TIERS, SCALE_OUT_TIERS


@dataclass(frozen=True)
class Plane:
    """What wiring one plane reads: the NICs, the switch and the unit chosen."""

    design: Design
    nic_nodes: np.ndarray  # node numbers, system-major then rail
    nic_sys: np.ndarray  # each NIC's system
    rail: np.ndarray  # each NIC's rail (its index in the system)
    nics: int  # per system
    ports: SwitchPorts
    port_rate_Bps: float  # one NIC port of one plane, per direction
    up_rate_Bps: float  # switch-to-switch ports
    leaf_down_max: int  # most down ports of a leaf at the asked oversubscription
    unit: int  # systems per scalable unit
    unit_of_system: np.ndarray
    planned: tuple[int, int] | None  # (unit, systems) when the unit exceeds the fabric


class FatTree(ScaleoutKind):
    """A fat-tree over the NICs (``scaleout.kind: fat_tree``)."""

    name = "fat_tree"
    link_tiers = SCALE_OUT_TIERS
    switch_tiers = FAT_TREE_TIERS
    what_if_parts = ("spine", "leaf", "optic", "nic")
    structured_routing = True

    def unit_mode(self, design: Design) -> str:
        """How endpoints group onto leaves (:func:`~topomodel.fabric.clos.default_unit`'s
        ``mode``): ``rail`` (rail-optimized) or ``tor`` (whole systems on a leaf)."""
        return "rail" if design.scaleout.rail_optimized else "tor"

    def build(self, builder: FabricBuilder, design: Design, catalog: Catalog,
              system: System, acc: np.ndarray, prefixes: Sequence[str]
              ) -> tuple[list[ClosTier], ScaleoutStructure]:
        """NICs and their host links, then one Clos per plane (see the module)."""
        out = design.scaleout
        n_systems, per_system = acc.shape
        nic = catalog.get(out.nic or system.nic or "", Nic)
        nics = out.nics_per_system or system.nic_count or per_system
        switch = catalog.get(out.switch or "", Switch)
        port_rate = nic_port_rate_Bps(out, nic)
        up_rate = out.uplink_rate_Bps or port_rate
        ports = SwitchPorts(switch.id, switch.ports, switch.port_rate_Bps,
                            switch.latency_s if switch.latency_s is not None
                            else DEFAULT_SWITCH_LATENCY_S)
        # NICs and their host links
        nic_sys = np.repeat(np.arange(n_systems), nics)
        rail = np.tile(np.arange(nics), n_systems)
        nic_nodes = builder.add_nodes(node_names(list(prefixes), numbered("nic", nics)),
                                      kind="nic", tier="nic", model=nic.id, system=nic_sys,
                                      local=rail, rail=rail)
        host = catalog.get(system.host_link, HostLink) if system.host_link else None
        host_rate = host.rate_Bps if host else nic.rate_Bps
        owner = acc[nic_sys, nic_owners(per_system, nics)[rail]]
        builder.add_links(owner, nic_nodes, tier="host", rate_Bps=host_rate, medium="pcie")
        # endpoint grouping: units of systems; rails to their own leaves when rail-optimized
        try:
            leaf_down_max, _ = ports.split(port_rate, up_rate,
                                           (out.oversubscription or (1.0,))[0])
        except ClosError as exc:
            raise design.problem(("scaleout", "switch"), str(exc)) from None
        unit = self._unit(design, n_systems, nics, ports, port_rate, up_rate)
        # a fabric smaller than its declared unit is sized for the whole unit
        planned = (unit, n_systems) if unit > n_systems else None
        plane = Plane(design, nic_nodes, nic_sys, rail, nics, ports, port_rate, up_rate,
                      leaf_down_max, unit, np.arange(n_systems) // unit, planned)
        tiers: list[ClosTier] = []
        rails_per_leaf: int | None = None
        for index in range(out.planes):
            prefix = f"p{index}/" if out.planes > 1 else ""
            wired, rails_per_leaf = self.wire_plane(builder, plane, index, prefix)
            tiers += wired
        fat_tree_tiers = max((FAT_TREE_TIERS.index(t.name) + 1 for t in tiers), default=0)
        return tiers, ScaleoutStructure(
            self.name, nic=nic.id, nics_per_system=nics, planes=out.planes,
            port_rate_Bps=port_rate, uplink_rate_Bps=up_rate, switch=switch.id,
            rail_optimized=out.rail_optimized, host_link=host.id if host else "",
            host_link_rate_Bps=host_rate, unit_systems=unit, rails_per_leaf=rails_per_leaf,
            fat_tree_tiers=fat_tree_tiers)

    def _unit(self, design: Design, n_systems: int, nics: int,
              ports: SwitchPorts, port_rate: float, up_rate: float) -> int:
        """Systems per scalable unit: the design's, else the one that realises the asked
        oversubscription (:func:`~topomodel.fabric.clos.default_unit`)."""
        out = design.scaleout
        if out.unit is None:
            try:
                unit = default_unit(n_systems, nics, mode=self.unit_mode(design), ports=ports,
                                    down_rate_Bps=port_rate, up_rate_Bps=up_rate,
                                    tiers=out.tiers, oversubscription=out.oversubscription,
                                    pod_units=out.pod_units).unit
            except ClosError as exc:
                raise design.problem(("scaleout", "tiers" if out.tiers else "switch"),
                                     str(exc)) from None
        else:
            unit = out.unit
        if n_systems % unit and not out.partial_unit and n_systems > unit:
            raise design.problem(("scaleout", "unit"),
                                 f"{n_systems} systems are not a whole number of units of"
                                 f" {unit}; change the count or the unit, or allow a short"
                                 " last unit with 'partial_unit: true'")
        return unit

    def wire_plane(self, builder: FabricBuilder, p: Plane, index: int, prefix: str
                   ) -> tuple[list[ClosTier], int | None]:
        """One plane's Clos over every NIC; its tiers and the rails sharing a leaf
        (``None`` unless rail-optimized)."""
        rails_per_leaf: int | None = None
        if p.design.scaleout.rail_optimized:
            # one rail of a unit per leaf; rails share a leaf when a unit is small
            n_systems = len(p.unit_of_system)
            rails_per_leaf = max(1, min(p.nics, p.leaf_down_max // min(
                p.unit, p.planned[0] if p.planned else n_systems)))
            order = np.lexsort((p.nic_sys, p.rail, p.unit_of_system[p.nic_sys]))
            groups = (p.unit_of_system[p.nic_sys[order]] * -(-p.nics // rails_per_leaf)
                      + p.rail[order] // rails_per_leaf)
            whole = 1
        else:
            order = np.arange(len(p.nic_nodes))
            groups = p.unit_of_system[p.nic_sys]
            whole = p.nics
        _, groups = np.unique(groups, return_inverse=True)
        group_units = np.zeros(groups.max() + 1, np.int64)
        group_units[groups] = p.unit_of_system[p.nic_sys[order]]
        return clos(builder, p, p.nic_nodes[order], groups, group_units, whole=whole,
                    prefix=prefix, plane=index, group=""), rails_per_leaf

    def bisection(self, capacity_Bps: Mapping[str, float], smaller: int, total: int
                  ) -> tuple[float, str] | None:
        """The smaller half's share of its least tier (ties: the upper): the cut along
        whole subtrees of that tier."""
        present = [t for t in self.link_tiers if t in capacity_Bps]
        limit = min(reversed(present), key=lambda t: capacity_Bps[t])
        return capacity_Bps[limit] * (smaller / total), (
            f"{half_text(smaller, total)} of the {limit} tier's capacity, the least of the"
            " scale-out tiers")

    def level_groups(self, present: Sequence[str]) -> tuple[LevelGroup, ...]:
        """Under one leaf; in one pod (3 tiers); the whole fabric through its top tier."""
        tiers = [t for t in self.switch_tiers if t in present]
        out = [LevelGroup("leaf", "leaf", ("host", "leaf"))]
        if "core" in present:
            out.append(LevelGroup("spine", "pod", ("host", "leaf", "spine")))
        out.append(LevelGroup(tiers[-1], "all", ("host", *tiers)))
        return tuple(out)

    def rails_text(self, structure: ScaleoutStructure) -> str:
        """How rails meet the leaves, in words."""
        return "rail-optimized" if structure.rail_optimized else "not rail-optimized"

    def summary(self, structure: ScaleoutStructure) -> str:
        """Tiers, switch, rails, planes and NICs per system."""
        s = structure
        planes = f", {s.planes} planes" if s.planes > 1 else ""
        return (f"{s.fat_tree_tiers}-tier {s.switch} fat-tree, {self.rails_text(s)}{planes},"
                f" {s.nics_per_system} x {s.nic} per system at"
                f" {format_si(s.port_rate_Bps * 8, 'b/s')} per port")

    def caption(self, structure: ScaleoutStructure) -> str:
        """Tiers, switch, rails and planes."""
        s = structure
        rail = self.rails_text(s)
        rail = "" if rail.startswith("not ") else f", {rail}"
        planes = f", {s.planes} planes" if s.planes > 1 else ""
        return f"{s.fat_tree_tiers}-tier fat-tree of {s.switch}{rail}{planes}"


# PLR0913: one computation's arrays and options passed on as they are
def clos(builder: FabricBuilder, p: Plane, endpoints: np.ndarray, groups: np.ndarray,  # noqa: PLR0913
         group_units: np.ndarray, *, whole: int, prefix: str, plane: int, group: str
         ) -> list[ClosTier]:
    """Size and wire one Clos over ``endpoints`` (NIC node numbers in wiring order) in
    endpoint ``groups`` (a leaf never spans two) of scalable units ``group_units``."""
    out = p.design.scaleout
    if len(group_units) != groups.max() + 1:  # rail-only passes units per endpoint
        _, groups = np.unique(groups, return_inverse=True)
        group_units = np.unique(group_units)
    sizes = np.bincount(groups)
    # a fabric of planned[1] systems, smaller than its declared unit of planned[0]:
    # each group sized as a full unit's
    planned_sizes = None if p.planned is None else sizes * p.planned[0] // p.planned[1]
    try:
        plan = plan_clos(sizes, group_units, ports=p.ports, down_rate_Bps=p.port_rate_Bps,
                         up_rate_Bps=p.up_rate_Bps, tiers=out.tiers,
                         oversubscription=out.oversubscription, pod_units=out.pod_units,
                         whole_systems=whole, planned_sizes=planned_sizes)
    except ClosError as exc:
        key = "tiers" if out.tiers else "switch"
        raise p.design.problem(("scaleout", key), str(exc)) from None
    return wire_clos(builder, plan, endpoints, groups, group_units, ports=p.ports,
                     down_rate_Bps=p.port_rate_Bps, up_rate_Bps=p.up_rate_Bps, prefix=prefix,
                     plane=plane, group=group, asked=out.oversubscription)


KIND = FatTree()
