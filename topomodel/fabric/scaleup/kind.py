"""What a scale-up kind is: the one protocol every kind of scale-up domain implements.

A kind (``switched``, ``full_mesh``, ``torus``, ``supernode``, ``pcie``, ``none``: the
design's ``scaleup.kind``, else its system's) owns everything the package knows about
its shape: it wires its domains into the node and link tables, gives the closed form of
the bisection of one domain and a lower bound of a cut through every domain, the levels
it adds to the fabric's hierarchy, its keys of the build's JSON ``structure``, its
one-line descriptions, whether the structured routers route it, whether NCCL reaches
its GPUs over PCIe, and how many links a system of it has. The builder, the bisection,
the levels, the build report, the diagram, the structured router's check, the size
check, the cabling and the collective time model all ask the kind
(:func:`topomodel.fabric.scaleup.scaleup_kind`) instead of testing its name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from topomodel.fabric.structure import ScaleupStructure
from topomodel.inputs.parts import Accelerator, ScaleupLink
from topomodel.inputs.units import format_rate

if TYPE_CHECKING:
    from topomodel.fabric.structure import Structure
    from topomodel.fabric.tables import FabricBuilder
    from topomodel.inputs.catalog import Catalog
    from topomodel.inputs.design import Design
    from topomodel.inputs.parts import System

SEVERAL_DOMAINS = "several domains without scale-out"
"""How a closed form of one domain names a fabric of several domains and no network
between them (no cut of one domain is the fabric's)."""


@dataclass(frozen=True)
class ScaleupLevel:
    """One level of the scale-up hierarchy as the kind shapes it (see
    :func:`~topomodel.analysis.levels.network_levels`, which times it): bytes/s per
    direction; its latency is ``switches`` x the slowest switch of ``switch_tiers`` plus
    ``propagations`` x the longest delay of its link ``tiers``."""

    name: str  # "scale-up", "scale-up x", "scale-up supernode"
    topology: str  # ASTRA-sim building block: Switch, Ring or FullyConnected
    npus: int  # members along this dimension
    link_Bps: float  # one link per direction as the building block counts it
    injection_Bps: float  # per accelerator into this level
    tiers: tuple[str, ...] = ("scaleup",)  # link tiers a crossing uses
    switches: int = 0  # switch chips one crossing passes
    switch_tiers: tuple[str, ...] = ("scaleup",)  # node tiers of those switches
    propagations: int = 1  # link delays one crossing adds
    oversubscription: float = 1.0  # down:up below the level's top (1: none)


def scaleup_link(design: Design, catalog: Catalog, system: System) -> ScaleupLink:
    """The scale-up link: the design's, else the system's, else the accelerator's.

    Raises
    ------
    DesignError
        At ``scaleup.link`` when none of the three names one.
    """
    accelerator = catalog.get(system.accelerator, Accelerator)
    ident = design.scaleup.link or system.scaleup.link or accelerator.scaleup_link
    if ident is None:
        raise design.problem(("scaleup", "link"), f"no scale-up link: {system.id} and"
                             f" {accelerator.id} name none")
    return catalog.get(ident, ScaleupLink)


def per_system_domains(acc: np.ndarray) -> np.ndarray:
    """One domain per system: each accelerator's domain number (``acc``: node numbers,
    shape (systems, per system))."""
    n_systems, per_system = acc.shape
    return np.repeat(np.arange(n_systems), per_system)


class ScaleupKind(ABC):
    """One kind of scale-up domain: its builder, closed forms and descriptions.

    An implementation is a module of :mod:`topomodel.fabric.scaleup` named after the
    kind whose ``KIND`` is an instance of a subclass.
    """

    name: str = ""
    """The design's (or the system's) name of the kind (``scaleup.kind``)."""

    has_links: bool = True
    """Whether it builds links between accelerators (``none`` does not)."""

    structured_routing: bool = False
    """Whether the structured routers (:mod:`topomodel.routing.structured`) route it;
    the general router routes every kind."""

    nccl_intra: str = "nvlink"
    """The NCCL latency class of its GPU-to-GPU paths: ``nvlink`` or ``pci`` (NCCL's
    PCI latencies, for GPUs that reach each other over PCIe or the host)."""

    board_only: bool = False
    """Whether its scale-up tiers are traces on the board, never cables (a PCIe tree)."""

    def build(self, builder: FabricBuilder, design: Design, catalog: Catalog,
              system: System, acc: np.ndarray) -> tuple[np.ndarray, ScaleupStructure]:
        """Wire its domains into ``builder`` for the accelerators ``acc`` (node numbers,
        shape (systems, per system)); return each accelerator's domain number and the
        structure built.

        Raises
        ------
        DesignError
            At the design key that asks for what cannot be built.
        """
        link = scaleup_link(design, catalog, system)
        base = ScaleupStructure(self.name, link=link.id, link_rate_Bps=link.link_rate_Bps)
        return self.wire(builder, design, catalog, system, acc, link, base)

    @abstractmethod
    def wire(self, builder: FabricBuilder, design: Design, catalog: Catalog,
             system: System, acc: np.ndarray, link: ScaleupLink, base: ScaleupStructure
             ) -> tuple[np.ndarray, ScaleupStructure]:
        """:meth:`build` given its ``link`` and the ``base`` structure (kind and link)."""

    def links_per_system(self, system: System) -> int:
        """Links between accelerators and in-system chips one system has, before it is
        built (what the size check counts against ``limits.MAX_SCALEUP_LINKS``)."""
        return 0

    def domain_bisection(self, structure: Structure, capacity_Bps: Mapping[str, float],
                         per_domain: int, domains: int) -> tuple[float | None, str]:
        """Closed form of the bisection of a fabric of one domain, bytes/s per
        direction, and how it was found (``None``: no closed form).

        ``capacity_Bps``: each present link tier's capacity, all links one way (failed
        links left out); ``per_domain`` accelerators in each of ``domains``.
        """
        if domains > 1:
            return None, SEVERAL_DOMAINS
        return None, f"no closed form for scale-up kind {self.name}"

    def split_lower_bound(self, structure: Structure, capacity_Bps: Mapping[str, float],
                          per_domain: int, domains: int) -> float:
        """A lower bound on any cut that halves every domain, bytes/s per direction
        (``capacity_Bps`` as built, failed links included); 0 where none is known."""
        return 0.0

    def single_domain_side(self, structure: Structure) -> np.ndarray | None:
        """Where one domain is cut in two: a mask over the accelerators in rank order
        (``None``: the first half in rank order)."""
        return None

    def levels(self, structure: Structure, per_domain: int,
               capacity_Bps: Mapping[str, float], injection_Bps: float
               ) -> tuple[ScaleupLevel, ...]:
        """Its levels, innermost first: ``per_domain`` accelerators a domain,
        ``capacity_Bps`` each link tier's (all links one way), ``injection_Bps`` each
        accelerator's scale-up links (mean); empty without links.

        The default is one ``Switch`` level at the injection through one chip.
        """
        return (ScaleupLevel("scale-up", "Switch", per_domain, injection_Bps,
                             injection_Bps, switches=1, propagations=2),)

    def json_keys(self, up: ScaleupStructure) -> dict[str, Any]:
        """Its keys of ``topomodel build``'s JSON ``structure`` object (after
        ``scaleup``): the link, then the kind's own."""
        return {"scaleup_link": up.link, "scaleup_link_Bps": up.link_rate_Bps}

    def summary(self, up: ScaleupStructure) -> str:
        """One line for the build report's summary."""
        return f"{self.name}, {up.link} ({format_rate(up.link_rate_Bps)} per link per direction)"

    def caption(self, up: ScaleupStructure) -> str:
        """A few words for the topology diagram's title line."""
        return f"{self.name.replace('_', ' ')} ({up.link})"
