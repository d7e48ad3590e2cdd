"""The full-mesh scale-up kind: every pair of accelerators of a system joined by their
share of each accelerator's scale-up links; one domain per system."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from topomodel.fabric.scaleup.kind import (
    SEVERAL_DOMAINS,
    ScaleupKind,
    ScaleupLevel,
    per_system_domains,
)
from topomodel.fabric.structure import ScaleupStructure
from topomodel.inputs.parts import Accelerator

if TYPE_CHECKING:
    from topomodel.fabric.structure import Structure
    from topomodel.fabric.tables import FabricBuilder
    from topomodel.inputs.catalog import Catalog
    from topomodel.inputs.design import Design
    from topomodel.inputs.parts import ScaleupLink, System


class FullMesh(ScaleupKind):
    """A full mesh in each system (``scaleup.kind: full_mesh``)."""

    name = "full_mesh"
    structured_routing = True

    def wire(self, builder: FabricBuilder, design: Design, catalog: Catalog,
             system: System, acc: np.ndarray, link: ScaleupLink, base: ScaleupStructure
             ) -> tuple[np.ndarray, ScaleupStructure]:
        """Each pair of a system's accelerators gets its share of their links (at least
        one)."""
        per_system = acc.shape[1]
        accelerator = catalog.get(system.accelerator, Accelerator)
        per_pair = max(1, accelerator.scaleup_link_count // (per_system - 1))
        i, j = np.triu_indices(per_system, 1)
        builder.add_links(acc[:, i].ravel(), acc[:, j].ravel(), tier="scaleup",
                          rate_Bps=link.link_rate_Bps, cables=per_pair)
        return per_system_domains(acc), replace(base, mesh_links_per_pair=per_pair)

    def links_per_system(self, system: System) -> int:
        """One per pair of accelerators."""
        return system.accelerators * (system.accelerators - 1) // 2

    def domain_bisection(self, structure: Structure, capacity_Bps: Mapping[str, float],
                         per_domain: int, domains: int) -> tuple[float | None, str]:
        """Halves of floor(n/2) and ceil(n/2): every pair across them is linked."""
        if domains > 1:
            return None, SEVERAL_DOMAINS
        up = structure.scaleup
        pairs = (per_domain // 2) * (per_domain - per_domain // 2)
        return pairs * up.mesh_links_per_pair * up.link_rate_Bps, (
            "floor(n/2) x ceil(n/2) pairs of a full mesh cross")

    def split_lower_bound(self, structure: Structure, capacity_Bps: Mapping[str, float],
                          per_domain: int, domains: int) -> float:
        """Every domain halved: (n/2)^2 linked pairs cross in each."""
        up = structure.scaleup
        pairs = (per_domain // 2) ** 2
        return domains * pairs * up.mesh_links_per_pair * up.link_rate_Bps

    def levels(self, structure: Structure, per_domain: int,
               capacity_Bps: Mapping[str, float], injection_Bps: float
               ) -> tuple[ScaleupLevel, ...]:
        """One ``FullyConnected`` level of the links of one pair."""
        link = structure.scaleup.mesh_links_per_pair * structure.scaleup.link_rate_Bps
        return (ScaleupLevel("scale-up", "FullyConnected", per_domain, link, injection_Bps),)

    def json_keys(self, up: ScaleupStructure) -> dict[str, Any]:
        """The link and ``mesh_links_per_pair``."""
        return {**super().json_keys(up), "mesh_links_per_pair": up.mesh_links_per_pair}


KIND = FullMesh()
