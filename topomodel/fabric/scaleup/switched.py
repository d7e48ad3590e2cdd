"""The switched scale-up kind: each accelerator's links spread over its system's
switch chips (NVSwitch); one domain per system. Its in-system chips are also the first
level of a supernode (:mod:`topomodel.fabric.scaleup.supernode`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from topomodel.fabric.scaleup.kind import ScaleupKind, per_system_domains
from topomodel.fabric.structure import ScaleupStructure
from topomodel.fabric.tables import node_names, numbered
from topomodel.inputs.parts import ScaleupSwitch

if TYPE_CHECKING:
    from topomodel.fabric.structure import Structure
    from topomodel.fabric.tables import FabricBuilder
    from topomodel.inputs.catalog import Catalog
    from topomodel.inputs.design import Design
    from topomodel.inputs.parts import ScaleupLink, System


def system_chips(builder: FabricBuilder, n_systems: int, label: str, count: int, tier: str,
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


def in_system_switches(builder: FabricBuilder, design: Design, catalog: Catalog,
                       system: System, acc: np.ndarray, link: ScaleupLink) -> np.ndarray:
    """Switch chips in every system, linked to its accelerators; shape (systems,
    chips)."""
    n_systems, per_system = acc.shape
    wiring = system.scaleup
    chip = catalog.get(wiring.switch or "", ScaleupSwitch)
    count = wiring.switches
    used = per_system * max(wiring.links_per_switch)
    if used > chip.ports:  # the catalog refuses such a system; kept for a built one
        raise design.problem(("system",), f"{system.id}: {per_system} accelerators x"
                             f" {max(wiring.links_per_switch)} links need {used} ports"
                             f" of {chip.id}, which has {chip.ports}")
    chips = system_chips(builder, n_systems, "sw", count, "scaleup", chip)
    src = np.repeat(acc, count, axis=1).ravel()
    dst = np.tile(chips, (1, per_system)).reshape(n_systems, per_system, count).ravel()
    cables = np.tile(np.asarray(wiring.links_per_switch), n_systems * per_system)
    builder.add_links(src, dst, tier="scaleup", rate_Bps=link.link_rate_Bps,
                      cables=cables)
    return chips


class Switched(ScaleupKind):
    """Switch chips in each system (``scaleup.kind: switched``)."""

    name = "switched"
    structured_routing = True

    def wire(self, builder: FabricBuilder, design: Design, catalog: Catalog,
             system: System, acc: np.ndarray, link: ScaleupLink, base: ScaleupStructure
             ) -> tuple[np.ndarray, ScaleupStructure]:
        """The in-system switches; one domain per system."""
        in_system_switches(builder, design, catalog, system, acc, link)
        return per_system_domains(acc), replace(
            base, switches_per_system=system.scaleup.switches)

    def links_per_system(self, system: System) -> int:
        """One link bundle per accelerator and chip."""
        return system.accelerators * system.scaleup.switches

    def domain_bisection(self, structure: Structure, capacity_Bps: Mapping[str, float],
                         per_domain: int, domains: int) -> tuple[float | None, str]:
        """Every accelerator reaches every chip: half the accelerators' links cross."""
        return capacity_Bps["scaleup"] / domains / 2, "half the accelerators' scale-up links"

    def split_lower_bound(self, structure: Structure, capacity_Bps: Mapping[str, float],
                          per_domain: int, domains: int) -> float:
        """Every domain halved: half its accelerators' links cross."""
        return capacity_Bps.get("scaleup", 0.0) / 2

    def json_keys(self, up: ScaleupStructure) -> dict[str, Any]:
        """The link and ``scaleup_switches_per_system``."""
        return {**super().json_keys(up), "scaleup_switches_per_system": up.switches_per_system}


KIND = Switched()
