"""Build a :class:`~topomodel.fabric.tables.Fabric` from a design: scale-up, then scale-out.

Scale-up kinds: ``switched`` (each accelerator's links spread over in-system switch
chips), ``full_mesh``, ``torus`` (n-dimensional, with or without wraparound, across
systems, optionally through optical circuit switches) and ``supernode`` (in-system
switch chips joined per plane by a Clos of upper-level switch chips). Scale-out kinds:
``fat_tree`` (1-3 tiers, rail-optimized or not, several planes), ``rail_only`` and
``none``. Everything is generated with array arithmetic: no per-link Python loops.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from topomodel.fabric.cabling import cable_links
from topomodel.fabric.clos import (
    ClosError,
    SwitchPorts,
    default_unit,
    plan_clos,
    wire_clos,
)
from topomodel.fabric.failures import mark_failures
from topomodel.fabric.scaleup import build_scaleup
from topomodel.fabric.structure import (
    ScaleoutStructure,
    Structure,
    measure_injection,
    nic_owners,
)
from topomodel.fabric.tables import (
    LINK_TIERS,
    ClosTier,
    Fabric,
    FabricBuilder,
    link_table,
    node_names,
    numbered,
)
from topomodel.inputs.catalog import Catalog
from topomodel.inputs.design import Design, nic_port_rate_Bps
from topomodel.inputs.parts import HostLink, Nic, Switch, System
from topomodel.inputs.records import documented
from topomodel.limits import BYTES_PER_ACCELERATOR, BYTES_PER_LINK, above
from topomodel.vocabulary import FAT_TREE_TIERS

DEFAULT_SWITCH_LATENCY_S = documented(
    "build.DEFAULT_SWITCH_LATENCY_S", 500e-9,
    """Switch latency when the catalog has none: an assumed, typical cut-through figure
    for a 51.2T-class Ethernet/IB switch (published claims range from ~150 ns to ~600
    ns).""")


def build_fabric(design: Design, catalog: Catalog) -> Fabric:
    """Build the fabric a design describes.

    Raises
    ------
    DesignError
        When the design asks for a fabric that cannot be built (a torus shape that does
        not match the count, a radix that cannot give the oversubscription, a unit size
        that does not divide, an unknown failed part), or one larger than the limits of
        :mod:`topomodel.limits` (checked before anything is allocated).
    """
    system = catalog.get(design.system, System)
    n_systems = design.systems if design.systems is not None else (
        (design.accelerators or 0) // system.accelerators)
    per_system = system.accelerators
    check_size(design, system, n_systems)
    builder = FabricBuilder()
    sys_index = np.repeat(np.arange(n_systems), per_system)
    local = np.tile(np.arange(per_system), n_systems)
    prefixes = [f"{name}/" for name in numbered("sys", n_systems)]
    acc = builder.add_nodes(node_names(prefixes, numbered("acc", per_system)),
                            kind="accelerator", tier="accelerator", model=system.accelerator,
                            system=sys_index, local=local)
    domains, scaleup = build_scaleup(builder, design, catalog, system,
                                      acc.reshape(n_systems, per_system))
    clos, scaleout = _build_scaleout(builder, design, catalog, system,
                                     acc.reshape(n_systems, per_system), prefixes)
    node_columns = builder.node_columns()
    kind = node_columns["kind"]
    kind_codes = np.asarray(kind.codes)
    is_nic = kind_codes == _code(kind, "nic")
    node_columns["domain"][kind_codes == _code(kind, "accelerator")] = domains
    node_columns["domain"][is_nic] = np.repeat(
        domains.reshape(n_systems, per_system)[:, 0], scaleout.nics_per_system)
    link_columns = builder.link_columns()
    groups, rates = builder.cable_groups()
    cabling = cable_links(groups, LINK_TIERS, rates, design, catalog)  # at the line rates
    _set_port_directions(is_nic, link_columns, design)
    nodes = pd.DataFrame(node_columns, copy=False)  # fresh arrays, each its own column
    links = link_table({**link_columns, "medium": cabling.medium}, length_m=cabling.length_m,
                       optic_codes=cabling.optic_codes, optic_ids=cabling.optic_ids)
    mark_failures(nodes, links, design)
    structure = Structure(n_systems, per_system, scaleup, scaleout)
    reverse_rows = builder.reverse_rows()
    return Fabric(design, catalog, nodes, links, structure,
                  measure_injection(nodes, links, structure, reverse_rows), reverse_rows,
                  tuple(clos))


def _code(column: pd.Categorical, label: str) -> int:
    """The code of ``label`` in a categorical (-1, matching no row, if it has none)."""
    categories = list(column.categories)
    return categories.index(label) if label in categories else -1


def _set_port_directions(is_nic: np.ndarray, link_columns: dict[str, np.ndarray],
                         design: Design) -> None:
    """Give the NIC-to-leaf and leaf-to-NIC rows (``is_nic``: per node) the design's
    per-direction rates (``port_rate_up``, ``port_rate_down``): their ``capacity_Bps``
    in ``link_columns`` (:meth:`FabricBuilder.link_columns`), which routing and timing
    use. ``rate_Bps`` stays the port's line rate, which the cables, optics and switch
    ports are chosen for."""
    out = design.scaleout
    if not (out.port_rate_up_Bps or out.port_rate_down_Bps):
        return
    leaf = link_columns["tier"] == LINK_TIERS.index("leaf")
    cables = link_columns["cables"]
    for rate, end in ((out.port_rate_up_Bps, "src"), (out.port_rate_down_Bps, "dst")):
        if rate:
            rows = leaf & is_nic[link_columns[end]]
            link_columns["capacity_Bps"][rows] = cables[rows] * rate


def check_size(design: Design, system: System, n_systems: int) -> None:
    """Refuse a fabric above the limits of :mod:`topomodel.limits`, before it is built.

    Raises
    ------
    DesignError
        At the design key that sets the count: accelerators, scale-up links, NICs per
        system or planes, with the memory the fabric would take.
    """
    count_key = ("systems",) if design.systems is not None else ("accelerators",)
    per_system = system.accelerators
    accelerators = n_systems * per_system
    refusal = above(accelerators, "MAX_ACCELERATORS", "accelerators", BYTES_PER_ACCELERATOR)
    if refusal:
        raise design.problem(count_key, refusal)
    kind = design.scaleup.kind or system.scaleup.kind
    per_system_links = {"switched": per_system * system.scaleup.switches,
                        "supernode": per_system * system.scaleup.switches,
                        "full_mesh": per_system * (per_system - 1) // 2}.get(kind, 0)
    refusal = above(n_systems * per_system_links, "MAX_SCALEUP_LINKS",
                    f"scale-up links ({kind}, {per_system_links:,} per system)",
                    BYTES_PER_LINK)
    if refusal:
        raise design.problem(count_key, refusal)
    out = design.scaleout
    if out.kind == "none":
        return
    nics = out.nics_per_system or system.nic_count or per_system
    refusal = above(nics, "MAX_NICS_PER_SYSTEM", "NICs per system")
    if refusal:
        key = ("scaleout", "nics_per_system") if out.nics_per_system else ("system",)
        raise design.problem(key, refusal)
    refusal = above(n_systems * nics, "MAX_ACCELERATORS", "NICs", BYTES_PER_ACCELERATOR)
    if refusal:  # (planes are checked with the design, before the rates they split)
        raise design.problem(count_key, refusal)


def _build_scaleout(builder: FabricBuilder, design: Design, catalog: Catalog, system: System,
                    acc: np.ndarray, prefixes: list[str]
                    ) -> tuple[list[ClosTier], ScaleoutStructure]:
    out = design.scaleout
    if out.kind == "none":
        return [], ScaleoutStructure(out.kind)
    n_systems, per_system = acc.shape
    nic = catalog.get(out.nic or system.nic or "", Nic)
    nics = out.nics_per_system or system.nic_count or per_system
    switch = catalog.get(out.switch or "", Switch)
    planes = out.planes
    port_rate = nic_port_rate_Bps(out, nic)
    up_rate = out.uplink_rate_Bps or port_rate
    ports = SwitchPorts(switch.id, switch.ports, switch.port_rate_Bps,
                        switch.latency_s if switch.latency_s is not None
                        else DEFAULT_SWITCH_LATENCY_S)
    # NICs and their host links
    nic_sys = np.repeat(np.arange(n_systems), nics)
    rail = np.tile(np.arange(nics), n_systems)
    nic_nodes = builder.add_nodes(node_names(prefixes, numbered("nic", nics)),
                                  kind="nic", tier="nic", model=nic.id, system=nic_sys,
                                  local=rail, rail=rail)
    host = catalog.get(system.host_link, HostLink) if system.host_link else None
    host_rate = host.rate_Bps if host else nic.rate_Bps
    owner = acc[nic_sys, nic_owners(per_system, nics)[rail]]
    builder.add_links(owner, nic_nodes, tier="host", rate_Bps=host_rate, medium="pcie")
    # endpoint grouping: units of systems; rails to their own leaves when rail-optimized
    try:
        leaf_down_max, _ = ports.split(port_rate, up_rate, (out.oversubscription or (1.0,))[0])
    except ClosError as exc:
        raise design.problem(("scaleout", "switch"), str(exc)) from None
    mode = ("rail_only" if out.kind == "rail_only" else "rail" if out.rail_optimized
            else "tor")
    if out.unit is None:  # the unit that realises the asked oversubscription
        try:
            unit = default_unit(n_systems, nics, mode=mode, ports=ports,
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
                             f"{n_systems} systems are not a whole number of units of {unit};"
                             " change the count or the unit, or allow a short last unit with"
                             " 'partial_unit: true'")
    # a fabric smaller than its declared unit is sized for the whole unit
    planned_unit = unit if unit > n_systems else None
    grow = (unit, n_systems) if planned_unit else None
    unit_of_system = np.arange(n_systems) // unit
    rails_per_leaf: int | None = None
    tiers: list[ClosTier] = []
    for plane in range(planes):
        prefix = f"p{plane}/" if planes > 1 else ""
        if out.kind == "rail_only":
            for r in range(nics):
                members = nic_nodes[rail == r]
                units = unit_of_system[nic_sys[rail == r]]
                tiers += _clos(builder, design, members, units, units, ports=ports,
                               port_rate=port_rate, up_rate=up_rate, whole=1,
                               prefix=f"{prefix}rail{r}/", plane=plane, group=f"rail{r}",
                               planned=grow)
            continue
        if out.rail_optimized:
            # one rail of a unit per leaf; rails share a leaf when a unit is small
            rails_per_leaf = max(1, min(nics, leaf_down_max // min(unit, planned_unit
                                                                    or n_systems)))
            order = np.lexsort((nic_sys, rail, unit_of_system[nic_sys]))
            groups = (unit_of_system[nic_sys[order]] * -(-nics // rails_per_leaf)
                      + rail[order] // rails_per_leaf)
            whole = 1
        else:
            order = np.arange(len(nic_nodes))
            groups = unit_of_system[nic_sys]
            whole = nics
        _, groups = np.unique(groups, return_inverse=True)
        group_units = np.zeros(groups.max() + 1, np.int64)
        group_units[groups] = unit_of_system[nic_sys[order]]
        tiers += _clos(builder, design, nic_nodes[order], groups, group_units, ports=ports,
                       port_rate=port_rate, up_rate=up_rate, whole=whole, prefix=prefix,
                       plane=plane, group="", planned=grow)
    fat_tree_tiers = max((FAT_TREE_TIERS.index(t.name) + 1 for t in tiers), default=0)
    return tiers, ScaleoutStructure(
        out.kind, nic=nic.id, nics_per_system=nics, planes=planes, port_rate_Bps=port_rate,
        uplink_rate_Bps=up_rate, switch=switch.id, rail_optimized=out.rail_optimized,
        host_link=host.id if host else "", host_link_rate_Bps=host_rate, unit_systems=unit,
        rails_per_leaf=rails_per_leaf, fat_tree_tiers=fat_tree_tiers)


# PLR0913: one computation's arrays and options passed on as they are
def _clos(builder: FabricBuilder, design: Design, endpoints: np.ndarray, groups: np.ndarray,  # noqa: PLR0913
          group_units: np.ndarray, *, ports: SwitchPorts, port_rate: float, up_rate: float,
          whole: int, prefix: str, plane: int, group: str,
          planned: tuple[int, int] | None = None) -> list[ClosTier]:
    out = design.scaleout
    if len(group_units) != groups.max() + 1:  # rail-only passes units per endpoint
        _, groups = np.unique(groups, return_inverse=True)
        group_units = np.unique(group_units)
    sizes = np.bincount(groups)
    # a fabric of planned[1] systems, smaller than its declared unit of planned[0]:
    # each group sized as a full unit's
    planned_sizes = None if planned is None else sizes * planned[0] // planned[1]
    try:
        plan = plan_clos(sizes, group_units, ports=ports, down_rate_Bps=port_rate,
                         up_rate_Bps=up_rate, tiers=out.tiers,
                         oversubscription=out.oversubscription, pod_units=out.pod_units,
                         whole_systems=whole, planned_sizes=planned_sizes)
    except ClosError as exc:
        key = "tiers" if out.tiers else "switch"
        raise design.problem(("scaleout", key), str(exc)) from None
    return wire_clos(builder, plan, endpoints, groups, group_units, ports=ports,
                     down_rate_Bps=port_rate, up_rate_Bps=up_rate, prefix=prefix, plane=plane,
                     group=group, asked=out.oversubscription)
