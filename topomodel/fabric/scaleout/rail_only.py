"""The rail-only scale-out kind: each rail (the NICs of one index in every system) has
its own fat-tree, with nothing between rails (traffic between rails crosses the
scale-up domain first)."""

from __future__ import annotations

from topomodel.fabric.scaleout.fat_tree import FatTree, Plane, clos
from topomodel.fabric.structure import ScaleoutStructure
from topomodel.fabric.tables import ClosTier, FabricBuilder
from topomodel.inputs.design import Design


class RailOnly(FatTree):
    """A Clos per rail and plane (``scaleout.kind: rail_only``): a fat-tree's tiers,
    bisection, levels and parts; the structured routers, which assume one Clos over
    every rail, leave it to the general router."""

    name = "rail_only"
    structured_routing = False

    def unit_mode(self, design: Design) -> str:
        """``rail_only``: a unit's rails never share a leaf."""
        return "rail_only"

    def wire_plane(self, builder: FabricBuilder, p: Plane, index: int, prefix: str
                   ) -> tuple[list[ClosTier], int | None]:
        """A Clos over each rail's NICs, the groups its scalable units."""
        tiers: list[ClosTier] = []
        for r in range(p.nics):
            members = p.nic_nodes[p.rail == r]
            units = p.unit_of_system[p.nic_sys[p.rail == r]]
            tiers += clos(builder, p, members, units, units, whole=1,
                          prefix=f"{prefix}rail{r}/", plane=index, group=f"rail{r}")
        return tiers, None

    def rails_text(self, structure: ScaleoutStructure) -> str:
        """``rail-only``."""
        return "rail-only"


KIND = RailOnly()
