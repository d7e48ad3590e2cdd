"""Scale-up domains: in-system switches, switched and full-mesh domains,
multi-level optical supernodes, tori and PCIe trees, wired into a :class:`FabricBuilder`.

A PCIe server (scale-up kind ``pcie``) has no GPU-to-GPU links: each GPU has one PCIe
link to a PCIe switch (or, with no switches, to a root port of its CPU), each switch one
uplink of the same PCIe link to the root complex of its socket (tier ``scaleup_l2``),
and two sockets are joined by their inter-socket link (UPI, xGMI; tier ``scaleup_l3``),
so traffic between GPUs under different switches crosses the host, as on the board."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from topomodel.fabric.clos import ClosError, SwitchPorts, plan_upper, wire_clos
from topomodel.fabric.structure import ScaleupStructure, Supernode, SupernodeLevel, Torus
from topomodel.fabric.tables import FabricBuilder, node_names, numbered
from topomodel.inputs.catalog import Catalog
from topomodel.inputs.design import Design
from topomodel.inputs.parts import Accelerator, ScaleupLink, ScaleupSwitch, System
from topomodel.vocabulary import SCALEUP_TIERS


def _scaleup_link(design: Design, catalog: Catalog, system: System) -> ScaleupLink:
    accelerator = catalog.get(system.accelerator, Accelerator)
    ident = design.scaleup.link or system.scaleup.link or accelerator.scaleup_link
    if ident is None:
        raise design.problem(("scaleup", "link"), f"no scale-up link: {system.id} and"
                             f" {accelerator.id} name none")
    return catalog.get(ident, ScaleupLink)


def build_scaleup(builder: FabricBuilder, design: Design, catalog: Catalog, system: System,
                   acc: np.ndarray) -> tuple[np.ndarray, ScaleupStructure]:
    """Wire the scale-up domains; return each accelerator's domain number and what was
    built."""
    kind = design.scaleup.kind or system.scaleup.kind
    n_systems, per_system = acc.shape
    if kind == "none":
        return np.full(acc.size, -1), ScaleupStructure(kind)
    link = _scaleup_link(design, catalog, system)
    base = ScaleupStructure(kind, link=link.id, link_rate_Bps=link.link_rate_Bps)
    if kind in ("switched", "supernode"):
        l1 = _in_system_switches(builder, design, catalog, system, acc, link)
        if kind == "switched":
            return np.repeat(np.arange(n_systems), per_system), replace(
                base, switches_per_system=system.scaleup.switches)
        return _supernode(builder, design, catalog, system, l1, link, base)
    if kind == "pcie":
        return _pcie_tree(builder, catalog, system, acc, link, base)
    if kind == "full_mesh":
        accelerator = catalog.get(system.accelerator, Accelerator)
        per_pair = max(1, accelerator.scaleup_link_count // (per_system - 1))
        i, j = np.triu_indices(per_system, 1)
        builder.add_links(acc[:, i].ravel(), acc[:, j].ravel(), tier="scaleup",
                          rate_Bps=link.link_rate_Bps, cables=per_pair)
        return np.repeat(np.arange(n_systems), per_system), replace(
            base, mesh_links_per_pair=per_pair)
    return _torus(builder, design, system, acc, link, base)



def _system_chips(builder: FabricBuilder, n_systems: int, label: str, count: int, tier: str,
                  part: ScaleupSwitch) -> np.ndarray:
    """``count`` scale-up switch chips of catalog ``part`` in every system, named
    ``sysN/labelK`` at ``tier``; node numbers, shape (systems, count)."""
    names = node_names([f"{name}/" for name in numbered("sys", n_systems)],
                       numbered(label, count))
    chips: np.ndarray = builder.add_nodes(
        names, kind="scaleup_switch", tier=tier, model=part.id,
        latency_s=part.latency_s or 0.0, system=np.repeat(np.arange(n_systems), count),
        local=np.tile(np.arange(count), n_systems)).reshape(n_systems, count)
    return chips

def _in_system_switches(builder: FabricBuilder, design: Design, catalog: Catalog,
                        system: System, acc: np.ndarray, link: ScaleupLink) -> np.ndarray:
    """Switch chips in every system, linked to its accelerators; shape (systems, chips)."""
    n_systems, per_system = acc.shape
    wiring = system.scaleup
    chip = catalog.get(wiring.switch or "", ScaleupSwitch)
    count = wiring.switches
    used = per_system * max(wiring.links_per_switch)
    if used > chip.ports:  # the catalog refuses such a system; kept for a built one
        raise design.problem(("system",), f"{system.id}: {per_system} accelerators x"
                             f" {max(wiring.links_per_switch)} links need {used} ports of"
                             f" {chip.id}, which has {chip.ports}")
    chips = _system_chips(builder, n_systems, "sw", count, "scaleup", chip)
    src = np.repeat(acc, count, axis=1).ravel()
    dst = np.tile(chips, (1, per_system)).reshape(n_systems, per_system, count).ravel()
    cables = np.tile(np.asarray(wiring.links_per_switch), n_systems * per_system)
    builder.add_links(src, dst, tier="scaleup", rate_Bps=link.link_rate_Bps, cables=cables)
    return chips


def _supernode(builder: FabricBuilder, design: Design, catalog: Catalog, system: System,
               l1: np.ndarray, link: ScaleupLink, base: ScaleupStructure
               ) -> tuple[np.ndarray, ScaleupStructure]:
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
    levels: tuple[SupernodeLevel, ...] = ()
    for d in range(domains):
        for plane in range(planes):
            prefix = (f"sn{d:0{dw}d}/" if domains > 1 else "") + f"plane{plane}/"
            tiers = wire_clos(builder, plan, np.empty(0, np.int64), np.empty(0, np.int64),
                              np.zeros(1, np.int64), ports=ports, down_rate_Bps=rate,
                              up_rate_Bps=rate, prefix=prefix, plane=plane,
                              group=f"plane{plane}", asked=(0.0, up.oversubscription),
                              tier_names=SCALEUP_TIERS,
                              leaves=l1[d * per_domain:(d + 1) * per_domain, plane])
            if d == 0 and plane == 0:
                levels = tuple(SupernodeLevel(t.name, t.switches, t.down_ports, t.up_ports)
                               for t in tiers)
    return np.repeat(np.arange(n_systems) // per_domain, system.accelerators), replace(
        base, systems_per_domain=per_domain,
        supernode=Supernode(planes=planes, uplinks=uplinks, levels=plan.tiers, tiers=levels))


def _torus(builder: FabricBuilder, design: Design, system: System, acc: np.ndarray,
           link: ScaleupLink, base: ScaleupStructure) -> tuple[np.ndarray, ScaleupStructure]:
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
    return domain, replace(base, systems_per_domain=systems_per_domain, torus=Torus(
        shape=shape, wraparound=bool(wrap),
        links_per_neighbor=design.scaleup.links_per_neighbor, coords=coords))


def _pcie_tree(builder: FabricBuilder, catalog: Catalog, system: System, acc: np.ndarray,
               link: ScaleupLink, base: ScaleupStructure
               ) -> tuple[np.ndarray, ScaleupStructure]:
    """GPUs under PCIe switches (or root ports) under each socket's root complex, the
    sockets joined by their inter-socket link; one domain per system."""
    n_systems, per_system = acc.shape
    wiring = system.scaleup
    sockets, switches = wiring.sockets, wiring.switches
    root = catalog.get(wiring.root or "", ScaleupSwitch)
    cpus = _system_chips(builder, n_systems, "cpu", sockets, "scaleup_l2", root)
    gpu_slot = np.arange(per_system)
    if switches:
        chip = catalog.get(wiring.switch or "", ScaleupSwitch)
        chips = _system_chips(builder, n_systems, "pcisw", switches, "scaleup", chip)
        builder.add_links(acc.ravel(), chips[:, gpu_slot * switches // per_system].ravel(),
                          tier="scaleup", rate_Bps=link.link_rate_Bps, medium="pcie")
        up = np.arange(switches) * sockets // switches
        builder.add_links(chips.ravel(), cpus[:, up].ravel(), tier="scaleup_l2",
                          rate_Bps=link.link_rate_Bps, medium="pcie")
    else:
        builder.add_links(acc.ravel(), cpus[:, gpu_slot * sockets // per_system].ravel(),
                          tier="scaleup", rate_Bps=link.link_rate_Bps, medium="pcie")
    socket_link = ""
    if sockets > 1:
        between = catalog.get(wiring.socket_link or "", ScaleupLink)
        socket_link = between.id
        ring = np.arange(sockets)
        pairs = ring[:-1] if sockets == 2 else ring
        builder.add_links(cpus[:, pairs].ravel(), cpus[:, (pairs + 1) % sockets].ravel(),
                          tier="scaleup_l3", rate_Bps=between.link_rate_Bps,
                          medium="electrical")
    return np.repeat(np.arange(n_systems), per_system), replace(
        base, switches_per_system=switches, sockets=sockets, socket_link=socket_link)
