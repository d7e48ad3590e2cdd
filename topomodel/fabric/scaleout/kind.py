"""What a scale-out kind is: the one protocol every kind of scale-out network implements.

A kind (``fat_tree``, ``rail_only``, ``none``, the ``kind`` of a design's ``scaleout``)
owns everything the package knows about its shape: it builds its part of the node and
link tables, gives the closed form of the bisection across it, the levels it adds to
the fabric's hierarchy, the order of its tiers, the parts the single-failure what-ifs
fail, the rows of the topology diagram, and its one-line descriptions. The builder,
the bisection, the levels, the review, the structured router's check, the build report
and the diagram all ask the kind (:func:`topomodel.fabric.scaleout.scaleout_kind`)
instead of testing its name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from topomodel.fabric.structure import ScaleoutStructure
    from topomodel.fabric.tables import ClosTier, FabricBuilder
    from topomodel.inputs.catalog import Catalog
    from topomodel.inputs.design import Design
    from topomodel.inputs.parts import System


@dataclass(frozen=True)
class LevelGroup:
    """One candidate level of the scale-out hierarchy (see
    :func:`~topomodel.analysis.levels.network_levels`): which accelerators talk through
    it and the link tiers one crossing uses."""

    name: str  # the level's name: its top switch tier (leaf, spine, core)
    grouping: str  # domains grouped: 'leaf' (under the same leaves), 'pod' (in the same
    # pods) or 'all' (the whole fabric)
    tiers: tuple[str, ...]  # link tiers a crossing uses, from the host link up


def half_text(smaller: int, total: int) -> str:
    """How a bisection's closed form names its smaller side's share of a capacity.

    Examples
    --------
    >>> half_text(4, 8), half_text(3, 7)
    ('half', "the smaller half's share (3 of 7 accelerators)")
    """
    return ("half" if 2 * smaller == total else
            f"the smaller half's share ({smaller:,} of {total:,} accelerators)")


class ScaleoutKind(ABC):
    """One kind of scale-out network: its builder, closed forms and descriptions.

    An implementation is a module of :mod:`topomodel.fabric.scaleout` named after the
    kind (the design's ``scaleout.kind``) whose ``KIND`` is an instance of a subclass.
    """

    name: str = ""
    """The design's name of the kind (``scaleout.kind``)."""

    link_tiers: tuple[str, ...] = ()
    """Its link tiers, from the accelerator's host link up (tier order)."""

    switch_tiers: tuple[str, ...] = ()
    """The node tiers of its switches, bottom up: the diagram's rows above the NICs."""

    what_if_parts: tuple[str, ...] = ()
    """The parts the single-failure what-ifs fail, in order: switch tiers (one switch
    of the tier), ``optic`` (the most numerous optic) and ``nic``; empty: none."""

    structured_routing: bool = False
    """Whether the structured Clos routers (:mod:`topomodel.routing.structured`) route
    it; the general router routes every kind."""

    @property
    def has_network(self) -> bool:
        """Whether it builds a network (NICs and switches) that joins the domains."""
        return bool(self.link_tiers)

    @property
    def drawing_rows(self) -> tuple[str, ...]:
        """Node tiers it adds to the topology diagram, bottom up (its NICs, then its
        switches; none without a network)."""
        return ("nic", *self.switch_tiers) if self.switch_tiers else ()

    @abstractmethod
    def build(self, builder: FabricBuilder, design: Design, catalog: Catalog,
              system: System, acc: np.ndarray, prefixes: Sequence[str]
              ) -> tuple[list[ClosTier], ScaleoutStructure]:
        """Add its NICs, switches and links to ``builder`` for the accelerators ``acc``
        (node numbers, shape (systems, per system); ``prefixes``: each system's name
        prefix); return its switch tiers as sized and the structure it built.

        Raises
        ------
        DesignError
            At the design key that asks for what cannot be built.
        """

    @abstractmethod
    def bisection(self, capacity_Bps: Mapping[str, float], smaller: int, total: int
                  ) -> tuple[float, str] | None:
        """Closed form of the cut across it between balanced halves of whole scale-up
        domains, bytes/s per direction, and how it was found (``None``: no network
        joins the halves).

        ``capacity_Bps``: each present link tier's capacity, all links one way
        (failed links left out); ``smaller`` of ``total`` accelerators are on the
        smaller side.
        """

    @abstractmethod
    def level_groups(self, present: Sequence[str]) -> tuple[LevelGroup, ...]:
        """The candidate levels of its hierarchy, innermost first, given the link tiers
        the fabric has (``present``); empty without a network."""

    def plane_members(self, kind: np.ndarray, plane: np.ndarray, which: int) -> np.ndarray:
        """The nodes a failure of plane ``which`` takes down, as a mask over the node
        table (its ``kind`` labels and ``plane`` column): the plane's switches. A
        NIC serves every plane, so it stays: only its ports on the plane lose their
        links. A kind without a network has no plane and returns no node."""
        import numpy as np

        if not self.has_network:
            return np.zeros(len(kind), bool)
        return (kind == "switch") & (plane == which)

    @abstractmethod
    def summary(self, structure: ScaleoutStructure) -> str:
        """One line for the build report's summary (``none`` without a network)."""

    @abstractmethod
    def caption(self, structure: ScaleoutStructure) -> str:
        """A few words for the topology diagram's title line."""
