"""No scale-up links (``scaleup.kind: none``): every accelerator is on its own, and
NCCL reaches the others of its system through the host (its PCI class)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from topomodel.fabric.scaleup.kind import ScaleupKind, ScaleupLevel
from topomodel.fabric.structure import ScaleupStructure

if TYPE_CHECKING:
    from topomodel.fabric.structure import Structure
    from topomodel.fabric.tables import FabricBuilder
    from topomodel.inputs.catalog import Catalog
    from topomodel.inputs.design import Design
    from topomodel.inputs.parts import ScaleupLink, System


class NoScaleup(ScaleupKind):
    """Nothing built: no domain (so no closed form is asked of it), no level, no key."""

    name = "none"
    has_links = False
    structured_routing = True  # nothing for the scale-up routers to route
    nccl_intra = "pci"

    def build(self, builder: FabricBuilder, design: Design, catalog: Catalog,
              system: System, acc: np.ndarray) -> tuple[np.ndarray, ScaleupStructure]:
        """Nothing: every accelerator's domain is -1 (no scale-up link is looked up)."""
        return np.full(acc.size, -1), ScaleupStructure(self.name)

    def wire(self, builder: FabricBuilder, design: Design, catalog: Catalog,
             system: System, acc: np.ndarray, link: ScaleupLink, base: ScaleupStructure
             ) -> tuple[np.ndarray, ScaleupStructure]:
        """Nothing (:meth:`build` never asks)."""
        return np.full(acc.size, -1), base

    def levels(self, structure: Structure, per_domain: int,
               capacity_Bps: Mapping[str, float], injection_Bps: float
               ) -> tuple[ScaleupLevel, ...]:
        """No level."""
        return ()

    def json_keys(self, up: ScaleupStructure) -> dict[str, Any]:
        """No key."""
        return {}

    def summary(self, up: ScaleupStructure) -> str:
        """``none``."""
        return "none"

    def caption(self, up: ScaleupStructure) -> str:
        """``none``."""
        return "none"


KIND = NoScaleup()
