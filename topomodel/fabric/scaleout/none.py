"""No scale-out network (``scaleout.kind: none``): the scale-up domains stand alone."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from topomodel.fabric.scaleout.kind import LevelGroup, ScaleoutKind
from topomodel.fabric.structure import ScaleoutStructure

if TYPE_CHECKING:
    import numpy as np

    from topomodel.fabric.tables import ClosTier, FabricBuilder
    from topomodel.inputs.catalog import Catalog
    from topomodel.inputs.design import Design
    from topomodel.inputs.parts import System


class NoScaleout(ScaleoutKind):
    """Nothing built, nothing to cut, no level, no part to fail."""

    name = "none"
    structured_routing = True  # nothing for the Clos routers to route

    def build(self, builder: FabricBuilder, design: Design, catalog: Catalog,
              system: System, acc: np.ndarray, prefixes: Sequence[str]
              ) -> tuple[list[ClosTier], ScaleoutStructure]:
        """Nothing: no NIC, no switch."""
        return [], ScaleoutStructure(self.name)

    def bisection(self, capacity_Bps: Mapping[str, float], smaller: int, total: int
                  ) -> tuple[float, str] | None:
        """``None``: no network joins the halves."""
        return None

    def level_groups(self, present: Sequence[str]) -> tuple[LevelGroup, ...]:
        """No level."""
        return ()

    def summary(self, structure: ScaleoutStructure) -> str:
        """``none``."""
        return "none"

    def caption(self, structure: ScaleoutStructure) -> str:
        """``none``."""
        return "none"


KIND = NoScaleout()
