"""The supernode scale-up kind: the in-system switch chips of several systems joined,
per plane (one plane per in-system chip), by a Clos of upper switch chips
(``scaleup_l2``, ``scaleup_l3``), as NVL576-style and optical supernodes are."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from topomodel.fabric.clos import ClosError, SwitchPorts, plan_upper, wire_clos
from topomodel.fabric.scaleup.kind import SEVERAL_DOMAINS, ScaleupKind, ScaleupLevel
from topomodel.fabric.scaleup.switched import in_system_switches
from topomodel.fabric.structure import ScaleupStructure, Supernode, SupernodeLevel
from topomodel.inputs.parts import ScaleupSwitch
from topomodel.vocabulary import SCALEUP_TIERS

if TYPE_CHECKING:
    from topomodel.fabric.structure import Structure
    from topomodel.fabric.tables import FabricBuilder
    from topomodel.inputs.catalog import Catalog
    from topomodel.inputs.design import Design
    from topomodel.inputs.parts import ScaleupLink, System

UPPER_TIERS = SCALEUP_TIERS[1:]
"""The link tiers above the in-system chips (``scaleup_l2``, ``scaleup_l3``)."""


class SupernodeKind(ScaleupKind):
    """In-system chips joined per plane by upper switch chips (``scaleup.kind:
    supernode``, over a switched system)."""

    name = "supernode"
    structured_routing = True

    def wire(self, builder: FabricBuilder, design: Design, catalog: Catalog,
             system: System, acc: np.ndarray, link: ScaleupLink, base: ScaleupStructure
             ) -> tuple[np.ndarray, ScaleupStructure]:
        """The in-system chips, then a Clos of upper chips over each plane's chips of
        ``systems_per_domain`` systems."""
        l1 = in_system_switches(builder, design, catalog, system, acc, link)
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
            upper = plan_upper(per_domain, uplinks, 1, ports=ports, rate_Bps=rate,
                               tiers=None, oversubscription=up.oversubscription,
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
                tiers = wire_clos(builder, plan, np.empty(0, np.int64),
                                  np.empty(0, np.int64), np.zeros(1, np.int64), ports=ports,
                                  down_rate_Bps=rate, up_rate_Bps=rate, prefix=prefix,
                                  plane=plane, group=f"plane{plane}",
                                  asked=(0.0, up.oversubscription), tier_names=SCALEUP_TIERS,
                                  leaves=l1[d * per_domain:(d + 1) * per_domain, plane])
                if d == 0 and plane == 0:
                    levels = tuple(SupernodeLevel(t.name, t.switches, t.down_ports,
                                                  t.up_ports) for t in tiers)
        return np.repeat(np.arange(n_systems) // per_domain, system.accelerators), replace(
            base, systems_per_domain=per_domain, supernode=Supernode(
                planes=planes, uplinks=uplinks, levels=plan.tiers, tiers=levels))

    def links_per_system(self, system: System) -> int:
        """The in-system chips' links (the upper levels are sized when built)."""
        return system.accelerators * system.scaleup.switches

    def domain_bisection(self, structure: Structure, capacity_Bps: Mapping[str, float],
                         per_domain: int, domains: int) -> tuple[float | None, str]:
        """Half the capacity of its narrowest level."""
        if domains > 1:
            return None, SEVERAL_DOMAINS
        levels = [t for t in SCALEUP_TIERS if t in capacity_Bps]
        limit = min(levels, key=lambda t: capacity_Bps[t])
        return capacity_Bps[limit] / domains / 2, f"half the {limit} capacity of a supernode"

    def levels(self, structure: Structure, per_domain: int,
               capacity_Bps: Mapping[str, float], injection_Bps: float
               ) -> tuple[ScaleupLevel, ...]:
        """A ``Switch`` per system, then one over the supernode at the narrowest upper
        level's share (the caller merges the two when their bandwidth is the same)."""
        per_system = structure.accelerators_per_system
        n = max(1, structure.systems * per_system)
        upper = tuple(t for t in UPPER_TIERS if t in capacity_Bps)
        bandwidth = min([injection_Bps, *(capacity_Bps[t] / n for t in upper)])
        first = ScaleupLevel("scale-up", "Switch", per_system, injection_Bps, injection_Bps,
                             switches=1, propagations=2)
        if per_domain <= per_system:
            return (first,)
        return first, ScaleupLevel(
            "scale-up supernode", "Switch", per_domain // per_system, bandwidth, bandwidth,
            tiers=("scaleup", *upper), switches=2 * len(upper) + 1,
            switch_tiers=("scaleup", *upper), propagations=2 * len(upper) + 2,
            oversubscription=injection_Bps / bandwidth)

    def json_keys(self, up: ScaleupStructure) -> dict[str, Any]:
        """The link, each upper level as built, the planes, systems per domain, uplinks
        and levels."""
        sn = up.supernode
        return {**super().json_keys(up), "supernode_tiers": [
            {"name": t.name, "switches_per_plane": t.switches_per_plane,
             "down": t.down_ports, "up": t.up_ports} for t in sn.tiers],
            "supernode_planes": sn.planes, "systems_per_domain": up.systems_per_domain,
            "supernode_uplinks": sn.uplinks, "supernode_levels": sn.levels}

    def summary(self, up: ScaleupStructure) -> str:
        """Systems, planes, switch levels and the link."""
        return (f"supernode of {up.systems_per_domain} systems, {up.supernode.planes}"
                f" planes, {up.supernode.levels} switch levels, {up.link}")

    def caption(self, up: ScaleupStructure) -> str:
        """Systems, planes and the link."""
        return (f"supernodes of {up.systems_per_domain} systems, {up.supernode.planes}"
                f" planes ({up.link})")


KIND = SupernodeKind()
