"""Build a :class:`~topomodel.fabric.Fabric` from a design: scale-up, then scale-out.

Scale-up kinds: ``switched`` (each accelerator's links spread over in-system switch
chips), ``full_mesh``, ``torus`` (n-dimensional, with or without wraparound, across
systems, optionally through optical circuit switches) and ``supernode`` (in-system
switch chips joined per plane by a Clos of upper-level switch chips). Scale-out kinds:
``fat_tree`` (1-3 tiers, rail-optimized or not, several planes), ``rail_only`` and
``none``. Everything is generated with array arithmetic: no per-link Python loops.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from topomodel.cabling import assign_cables
from topomodel.catalog import (
    Accelerator,
    Catalog,
    HostLink,
    Nic,
    ScaleupLink,
    ScaleupSwitch,
    Switch,
    System,
)
from topomodel.clos import (
    ClosError,
    SwitchPorts,
    plan_clos,
    plan_upper,
    wire_clos,
)
from topomodel.design import Design
from topomodel.errors import DesignError, UsageError
from topomodel.fabric import ClosTier, Fabric, FabricBuilder, node_names, numbered

DEFAULT_SWITCH_LATENCY_S = 500e-9
"""Switch latency when the catalog has none: an assumed, typical cut-through figure for
a 51.2T-class Ethernet/IB switch (published claims range from ~150 ns to ~600 ns)."""


def build_fabric(design: Design, catalog: Catalog) -> Fabric:
    """Build the fabric a design describes.

    Raises
    ------
    DesignError
        When the design asks for a fabric that cannot be built (a torus shape that does
        not match the count, a radix that cannot give the oversubscription, a unit size
        that does not divide, an unknown failed part).
    """
    system = catalog.get(design.system, System)
    n_systems = design.systems if design.systems is not None else (
        (design.accelerators or 0) // system.accelerators)
    per_system = system.accelerators
    builder = FabricBuilder()
    structure: dict[str, Any] = {"systems": n_systems, "accelerators_per_system": per_system}
    sys_index = np.repeat(np.arange(n_systems), per_system)
    local = np.tile(np.arange(per_system), n_systems)
    prefixes = [f"{name}/" for name in numbered("sys", n_systems)]
    structure["_system_prefixes"] = prefixes
    acc = builder.add_nodes(node_names(prefixes, numbered("acc", per_system)),
                            kind="accelerator", tier="accelerator", model=system.accelerator,
                            system=sys_index, local=local)
    domains = _build_scaleup(builder, design, catalog, system, acc.reshape(n_systems,
                                                                            per_system),
                             structure)
    clos = _build_scaleout(builder, design, catalog, system, acc.reshape(n_systems, per_system),
                           structure)
    nodes, links = builder.finish()
    nodes.loc[nodes["kind"] == "accelerator", "domain"] = domains
    nodes.loc[nodes["kind"] == "nic", "domain"] = np.repeat(
        domains.reshape(n_systems, per_system)[:, 0], int(structure.get("nics_per_system", 0)))
    assign_cables(links, design, catalog)
    _mark_failures(nodes, links, design)
    return Fabric(design, catalog, nodes, links, structure, tuple(clos))


def _scaleup_link(design: Design, catalog: Catalog, system: System) -> ScaleupLink:
    accelerator = catalog.get(system.accelerator, Accelerator)
    ident = design.scaleup.link or system.scaleup.link or accelerator.scaleup_link
    if ident is None:
        raise design.problem(("scaleup", "link"), f"no scale-up link: {system.id} and"
                             f" {accelerator.id} name none")
    return catalog.get(ident, ScaleupLink)


def _build_scaleup(builder: FabricBuilder, design: Design, catalog: Catalog, system: System,
                   acc: np.ndarray, structure: dict[str, Any]) -> np.ndarray:
    """Wire the scale-up domains; return each accelerator's domain number."""
    kind = design.scaleup.kind or system.scaleup.kind
    structure["scaleup"] = kind
    n_systems, per_system = acc.shape
    if kind == "none":
        return np.full(acc.size, -1)
    link = _scaleup_link(design, catalog, system)
    structure["scaleup_link"] = link.id
    structure["scaleup_link_Bps"] = link.link_rate_Bps
    if kind in ("switched", "supernode"):
        l1 = _in_system_switches(builder, catalog, system, acc, link)
        if kind == "switched":
            structure["scaleup_switches_per_system"] = system.scaleup.switches
            return np.repeat(np.arange(n_systems), per_system)
        return _supernode(builder, design, catalog, system, l1, link, structure)
    if kind == "full_mesh":
        accelerator = catalog.get(system.accelerator, Accelerator)
        per_pair = max(1, accelerator.scaleup_link_count // (per_system - 1))
        i, j = np.triu_indices(per_system, 1)
        builder.add_links(acc[:, i].ravel(), acc[:, j].ravel(), tier="scaleup",
                          rate_Bps=link.link_rate_Bps, cables=per_pair)
        structure["mesh_links_per_pair"] = per_pair
        return np.repeat(np.arange(n_systems), per_system)
    return _torus(builder, design, system, acc, link, structure)


def _in_system_switches(builder: FabricBuilder, catalog: Catalog, system: System,
                        acc: np.ndarray, link: ScaleupLink) -> np.ndarray:
    """Switch chips in every system, linked to its accelerators; shape (systems, chips)."""
    n_systems, per_system = acc.shape
    wiring = system.scaleup
    chip = catalog.get(wiring.switch or "", ScaleupSwitch)
    count = wiring.switches
    used = per_system * max(wiring.links_per_switch)
    if used > chip.ports:
        raise DesignError([])  # the catalog check makes this unreachable
    names = node_names([f"{name}/" for name in numbered("sys", n_systems)],
                       numbered("sw", count))
    chips = builder.add_nodes(names, kind="scaleup_switch", tier="scaleup", model=chip.id,
                              latency_s=chip.latency_s or 0.0,
                              system=np.repeat(np.arange(n_systems), count),
                              local=np.tile(np.arange(count), n_systems)).reshape(n_systems,
                                                                                  count)
    src = np.repeat(acc, count, axis=1).ravel()
    dst = np.tile(chips, (1, per_system)).reshape(n_systems, per_system, count).ravel()
    cables = np.tile(np.asarray(wiring.links_per_switch), n_systems * per_system)
    builder.add_links(src, dst, tier="scaleup", rate_Bps=link.link_rate_Bps, cables=cables)
    return chips


def _supernode(builder: FabricBuilder, design: Design, catalog: Catalog, system: System,
               l1: np.ndarray, link: ScaleupLink, structure: dict[str, Any]) -> np.ndarray:
    """Join the in-system chips of each plane through a Clos of upper switch chips."""
    up = design.scaleup
    n_systems, planes = l1.shape
    per_domain = up.systems_per_domain or n_systems
    if n_systems % per_domain:
        raise design.problem(("scaleup", "systems_per_domain"),
                             f"{n_systems} systems do not divide into supernodes of"
                             f" {per_domain}")
    chip = catalog.get(up.switch or "", ScaleupSwitch)
    ports = SwitchPorts(chip.id, chip.ports, chip.port_rate_Bps, chip.latency_s or 0.0)
    rate = link.link_rate_Bps
    uplinks = up.uplinks or 0
    try:
        upper = plan_upper(per_domain, uplinks, 1, ports=ports, rate_Bps=rate, tiers=None,
                           oversubscription=up.oversubscription,
                           pod_units=None)
    except ClosError as exc:
        raise design.problem(("scaleup",), str(exc)) from None
    plan = replace(upper, tiers=upper.tiers + 1, leaves_per_group=np.array([per_domain]),
                   oversubscription=(0.0, *upper.oversubscription))
    domains = n_systems // per_domain
    dw = len(str(max(domains - 1, 1)))
    for d in range(domains):
        for plane in range(planes):
            prefix = (f"sn{d:0{dw}d}/" if domains > 1 else "") + f"plane{plane}/"
            tiers = wire_clos(builder, plan, np.empty(0, np.int64), np.empty(0, np.int64),
                              np.zeros(1, np.int64), ports=ports, down_rate_Bps=rate,
                              up_rate_Bps=rate, prefix=prefix, plane=plane,
                              group=f"plane{plane}", asked=(0.0, up.oversubscription),
                              tier_names=("scaleup", "scaleup_l2", "scaleup_l3"),
                              leaves=l1[d * per_domain:(d + 1) * per_domain, plane])
            if d == 0 and plane == 0:
                structure["supernode_tiers"] = [
                    {"name": t.name, "switches_per_plane": t.switches, "down": t.down_ports,
                     "up": t.up_ports} for t in tiers]
    structure.update(supernode_planes=planes, systems_per_domain=per_domain,
                     supernode_uplinks=uplinks, supernode_levels=plan.tiers)
    return np.repeat(np.arange(n_systems) // per_domain, system.accelerators)


def _torus(builder: FabricBuilder, design: Design, system: System, acc: np.ndarray,
           link: ScaleupLink, structure: dict[str, Any]) -> np.ndarray:
    """An n-dimensional torus (or mesh) over whole systems; returns domain numbers."""
    n_systems, per_system = acc.shape
    shape = tuple(design.scaleup.shape or system.scaleup.shape)
    wrap = design.scaleup.wraparound
    wrap = system.scaleup.wraparound if wrap is None else wrap
    size = math.prod(shape)
    total = n_systems * per_system
    if not shape or size % per_system or total % size:
        raise design.problem(("scaleup", "shape"), f"torus shape {list(shape)} holds {size}"
                             f" accelerators, which must be a whole number of systems"
                             f" ({per_system} each) and divide the {total} accelerators")
    inner = tuple(system.scaleup.shape) or (per_system,)
    inner = inner + (1,) * (len(shape) - len(inner))
    grid = tuple(d // s for d, s in zip(shape, inner, strict=True))
    systems_per_domain = size // per_system
    # coordinates of every accelerator inside its domain: system block, then position
    sys_in_domain = np.arange(n_systems) % systems_per_domain
    block = np.stack(np.unravel_index(sys_in_domain, grid), axis=1)  # (systems, dims)
    pos = np.stack(np.unravel_index(np.arange(per_system), inner), axis=1)  # (per_system, dims)
    coords = (block[:, None, :] * np.asarray(inner) + pos[None, :, :]).reshape(total, -1)
    domain = np.repeat(np.arange(n_systems) // systems_per_domain, per_system)
    rank_of = np.empty(total, np.int64)
    flat = np.ravel_multi_index(coords.T, shape) + domain * size
    rank_of[flat] = np.arange(total)
    acc_flat = acc.ravel()
    system_of = np.repeat(np.arange(n_systems), per_system)
    for dim, length in enumerate(shape):
        if length == 1:
            continue
        step = coords.copy()
        step[:, dim] += 1
        keep = step[:, dim] < length
        if wrap:
            step[:, dim] %= length
            keep = np.ones(total, bool) if length > 2 else coords[:, dim] == 0
        cables = design.scaleup.links_per_neighbor * (2 if wrap and length == 2 else 1)
        src = np.flatnonzero(keep)
        dst = rank_of[np.ravel_multi_index(step[src].T, shape) + domain[src] * size]
        crossing = system_of[src] != system_of[dst]
        builder.add_links(acc_flat[src], acc_flat[dst], tier="scaleup",
                          rate_Bps=link.link_rate_Bps, cables=cables,
                          medium=np.where(crossing, "ocs" if design.scaleup.ocs else "optical",
                                          "electrical"))
    structure.update(torus_shape=list(shape), wraparound=bool(wrap),
                     links_per_neighbor=design.scaleup.links_per_neighbor,
                     systems_per_domain=systems_per_domain, _torus_coords=coords)
    return domain


def _build_scaleout(builder: FabricBuilder, design: Design, catalog: Catalog, system: System,
                    acc: np.ndarray, structure: dict[str, Any]) -> list[ClosTier]:
    out = design.scaleout
    structure["scaleout"] = out.kind
    if out.kind == "none":
        return []
    n_systems, per_system = acc.shape
    nic = catalog.get(out.nic or system.nic or "", Nic)
    nics = out.nics_per_system or system.nic_count or per_system
    switch = catalog.get(out.switch or "", Switch)
    planes = out.planes
    port_rate = out.port_rate or nic.rate_Bps / planes
    up_rate = out.uplink_rate or port_rate
    ports = SwitchPorts(switch.id, switch.ports, switch.port_rate_Bps,
                        switch.latency_s if switch.latency_s is not None
                        else DEFAULT_SWITCH_LATENCY_S)
    structure.update(nic=nic.id, nics_per_system=nics, planes=planes, port_rate_Bps=port_rate,
                     uplink_rate_Bps=up_rate, switch=switch.id,
                     rail_optimized=out.rail_optimized, rail_only=out.kind == "rail_only")
    # NICs and their host links
    nic_sys = np.repeat(np.arange(n_systems), nics)
    rail = np.tile(np.arange(nics), n_systems)
    nic_nodes = builder.add_nodes(node_names(structure["_system_prefixes"],
                                             numbered("nic", nics)),
                                  kind="nic", tier="nic", model=nic.id, system=nic_sys,
                                  local=rail, rail=rail)
    host = catalog.get(system.host_link, HostLink) if system.host_link else None
    host_rate = host.rate_Bps if host else nic.rate_Bps
    owner = acc[nic_sys, rail * per_system // nics]
    builder.add_links(owner, nic_nodes, tier="host", rate_Bps=host_rate, medium="pcie")
    structure["host_link_Bps"] = host_rate
    structure["host_link"] = host.id if host else ""
    # endpoint grouping: units of systems; rails to their own leaves when rail-optimized
    try:
        leaf_down_max, _ = ports.split(port_rate, up_rate, (out.oversubscription or (1.0,))[0])
    except ClosError as exc:
        raise design.problem(("scaleout", "switch"), str(exc)) from None
    rail_groups = out.rail_optimized or out.kind == "rail_only"
    unit = out.unit or max(1, leaf_down_max if rail_groups else leaf_down_max // nics)
    if out.unit and n_systems % unit and not out.partial_unit and n_systems > unit:
        raise design.problem(("scaleout", "unit"),
                             f"{n_systems} systems are not a whole number of units of {unit};"
                             " change the count or the unit, or allow a short last unit with"
                             " 'partial_unit: true'")
    unit_of_system = np.arange(n_systems) // unit
    structure["unit_systems"] = unit
    tiers: list[ClosTier] = []
    for plane in range(planes):
        prefix = f"p{plane}/" if planes > 1 else ""
        if out.kind == "rail_only":
            for r in range(nics):
                members = nic_nodes[rail == r]
                units = unit_of_system[nic_sys[rail == r]]
                tiers += _clos(builder, design, members, units, units, ports=ports,
                               port_rate=port_rate, up_rate=up_rate, whole=1,
                               prefix=f"{prefix}rail{r}/", plane=plane, group=f"rail{r}")
            continue
        if out.rail_optimized:
            # one rail of a unit per leaf; rails share a leaf when a unit is small
            rails_per_leaf = max(1, min(nics, leaf_down_max // min(unit, n_systems)))
            structure["rails_per_leaf"] = rails_per_leaf
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
                       plane=plane, group="")
    structure["fat_tree_tiers"] = max((["leaf", "spine", "core"].index(t.name) + 1
                                       for t in tiers), default=0)
    return tiers


def _clos(builder: FabricBuilder, design: Design, endpoints: np.ndarray, groups: np.ndarray,
          group_units: np.ndarray, *, ports: SwitchPorts, port_rate: float, up_rate: float,
          whole: int, prefix: str, plane: int, group: str) -> list[ClosTier]:
    out = design.scaleout
    if len(group_units) != groups.max() + 1:  # rail-only passes units per endpoint
        _, groups = np.unique(groups, return_inverse=True)
        group_units = np.unique(group_units)
    sizes = np.bincount(groups)
    try:
        plan = plan_clos(sizes, group_units, ports=ports, down_rate_Bps=port_rate,
                         up_rate_Bps=up_rate, tiers=out.tiers,
                         oversubscription=out.oversubscription, pod_units=out.pod_units,
                         whole_systems=whole)
    except ClosError as exc:
        key = "tiers" if out.tiers else "switch"
        raise design.problem(("scaleout", key), str(exc)) from None
    return wire_clos(builder, plan, endpoints, groups, group_units, ports=ports,
                     down_rate_Bps=port_rate, up_rate_Bps=up_rate, prefix=prefix, plane=plane,
                     group=group, asked=out.oversubscription)


def _mark_failures(nodes: Any, links: Any, design: Design) -> None:
    """Mark the design's failed nodes' links and failed links as failed."""
    failures = design.failures
    if not failures.nodes and not failures.links:
        return
    mask, problems = failed_links(nodes, links, failures.nodes, failures.links)
    if problems:
        kind, index, message = problems[0]
        raise design.problem(("failures", kind, index), message)
    links["failed"] = mask


def failed_links(nodes: Any, links: Any, node_names: Sequence[str],
                 link_names: Sequence[str]) -> tuple[np.ndarray, list[tuple[str, int, str]]]:
    """Link rows touching the named nodes or joining the named ``"a -- b"`` pairs.

    Returns the mask and the problems found: (``"nodes"`` or ``"links"``, index, message).
    """
    index = pd.Series(np.arange(len(nodes)), index=nodes["name"].to_numpy())
    failed = links["failed"].to_numpy().copy()
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    problems = []
    for k, name in enumerate(node_names):
        if name not in index:
            problems.append(("nodes", k, f"no node named {name!r}"))
            continue
        failed |= (src == index[name]) | (dst == index[name])
    for k, text in enumerate(link_names):
        ends = [part.strip() for part in text.split("--")]
        if len(ends) != 2 or any(e not in index for e in ends):
            problems.append(("links", k, f"expected 'node -- node' with known names, got"
                             f" {text!r}"))
            continue
        a, b = index[ends[0]], index[ends[1]]
        pair = ((src == a) & (dst == b)) | ((src == b) & (dst == a))
        if not pair.any():
            problems.append(("links", k, f"no link between {ends[0]} and {ends[1]}"))
        failed |= pair
    return failed, problems


def with_failures(fabric: Fabric, node_names: Sequence[str] = (),
                  link_names: Sequence[str] = ()) -> Fabric:
    """A copy of ``fabric`` with more failed parts (nodes by name, ``"a -- b"`` links).

    Raises
    ------
    UsageError
        For a name that is not in the fabric.
    """
    mask, problems = failed_links(fabric.nodes, fabric.links, node_names, link_names)
    if problems:
        raise UsageError(problems[0][2])
    links = fabric.links.copy()
    links["failed"] = mask
    return replace(fabric, links=links)
