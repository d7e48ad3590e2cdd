"""The torus scale-up kind: an n-dimensional torus (or, without wraparound, a mesh)
over whole systems, the links between systems optical or through optical circuit
switches (TPU-style pods)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from topomodel.fabric.scaleup.kind import SEVERAL_DOMAINS, ScaleupKind, ScaleupLevel
from topomodel.fabric.structure import ScaleupStructure, Torus
from topomodel.inputs.units import format_rate

if TYPE_CHECKING:
    from topomodel.fabric.structure import Structure
    from topomodel.fabric.tables import FabricBuilder
    from topomodel.inputs.catalog import Catalog
    from topomodel.inputs.design import Design
    from topomodel.inputs.parts import ScaleupLink, System

AXES = "xyzwuv"
"""The names of a torus's dimensions in its levels, in order."""


def _cables(torus: Torus, length: int) -> int:
    """Links between two neighbours along a dimension of ``length``: a wrapped
    dimension of two has both its links between the same pair."""
    return torus.links_per_neighbor * (2 if torus.wraparound and length == 2 else 1)


class TorusKind(ScaleupKind):
    """A torus or mesh over whole systems (``scaleup.kind: torus``)."""

    name = "torus"

    def wire(self, builder: FabricBuilder, design: Design, catalog: Catalog,
             system: System, acc: np.ndarray, link: ScaleupLink, base: ScaleupStructure
             ) -> tuple[np.ndarray, ScaleupStructure]:
        """Neighbours along every dimension longer than one; returns domain numbers."""
        n_systems, per_system = acc.shape
        shape = tuple(design.scaleup.shape or system.scaleup.shape)
        wrap = design.scaleup.wraparound
        wrap = system.scaleup.wraparound if wrap is None else wrap
        size = math.prod(shape)
        total = n_systems * per_system
        if not shape or size % per_system or total % size:
            raise design.problem(("scaleup", "shape"), f"torus shape {list(shape)} holds"
                                 f" {size} accelerators, which must be a whole number of"
                                 f" systems ({per_system} each) and divide the {total}"
                                 " accelerators")
        inner = tuple(system.scaleup.shape) or (per_system,)
        inner = inner + (1,) * (len(shape) - len(inner))
        grid = tuple(d // s for d, s in zip(shape, inner, strict=True))
        systems_per_domain = size // per_system
        # coordinates of every accelerator inside its domain: system block, then position
        sys_in_domain = np.arange(n_systems) % systems_per_domain
        block = np.stack(np.unravel_index(sys_in_domain, grid), axis=1)  # (systems, dims)
        pos = np.stack(np.unravel_index(np.arange(per_system), inner), axis=1)
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
                              medium=np.where(crossing, "ocs" if design.scaleup.ocs
                                              else "optical", "electrical"))
        return domain, replace(base, systems_per_domain=systems_per_domain, torus=Torus(
            shape=shape, wraparound=bool(wrap),
            links_per_neighbor=design.scaleup.links_per_neighbor, coords=coords))

    def domain_bisection(self, structure: Structure, capacity_Bps: Mapping[str, float],
                         per_domain: int, domains: int) -> tuple[float | None, str]:
        """The cut across the longest dimension: each line along it crossed once, twice
        with wraparound."""
        if domains > 1:
            return None, SEVERAL_DOMAINS
        up = structure.scaleup
        longest = max(up.torus.shape)
        crossings = 2 if up.torus.wraparound and longest > 2 else 1
        links = per_domain // longest * crossings * up.torus.links_per_neighbor
        if up.torus.wraparound and longest == 2:
            links *= 2
        return links * up.link_rate_Bps, (
            f"cut across the longest dimension ({longest}): {links} links")

    def single_domain_side(self, structure: Structure) -> np.ndarray | None:
        """The lower half of the longest dimension."""
        torus = structure.scaleup.torus
        longest = int(np.argmax(torus.shape))
        side: np.ndarray = torus.coords[:, longest] < torus.shape[longest] // 2
        return side

    def levels(self, structure: Structure, per_domain: int,
               capacity_Bps: Mapping[str, float], injection_Bps: float
               ) -> tuple[ScaleupLevel, ...]:
        """A ``Ring`` per dimension longer than one, both neighbours' links injected
        (one neighbour's where the ring has two members)."""
        up = structure.scaleup
        out = []
        for axis, length in zip(AXES, up.torus.shape, strict=False):
            if length < 2:
                continue
            link = _cables(up.torus, length) * up.link_rate_Bps
            out.append(ScaleupLevel(f"scale-up {axis}", "Ring", length, link,
                                    link * (2 if length > 2 else 1)))
        return tuple(out)

    def json_keys(self, up: ScaleupStructure) -> dict[str, Any]:
        """The link, the shape, wraparound, links per neighbour and systems per
        domain."""
        return {**super().json_keys(up), "torus_shape": list(up.torus.shape),
                "wraparound": up.torus.wraparound,
                "links_per_neighbor": up.torus.links_per_neighbor,
                "systems_per_domain": up.systems_per_domain}

    def summary(self, up: ScaleupStructure) -> str:
        """The shape, torus or mesh, and the link."""
        shape = "x".join(map(str, up.torus.shape))
        wrap = "torus" if up.torus.wraparound else "mesh"
        rate = format_rate(up.link_rate_Bps)
        return f"{shape} {wrap} of {up.link} ({rate} per link per direction)"

    def caption(self, up: ScaleupStructure) -> str:
        """The shape, torus or mesh, and the link."""
        shape = "×".join(map(str, up.torus.shape))
        return f"{shape} {'torus' if up.torus.wraparound else 'mesh'} ({up.link})"


KIND = TorusKind()
