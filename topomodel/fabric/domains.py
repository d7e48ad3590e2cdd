"""Failure domains: which nodes fail together when a rack, a power feed, a cooling loop,
a scale-out plane or a site is lost, as arrays over the node table.

A rack holds whole systems (a rack-scale system is its own rack; the design's
``domains.systems_per_rack`` otherwise); a power feed and a cooling loop hold whole
racks in rack order; sites split the systems evenly in system order; a plane is what
its scale-out kind says (:meth:`~topomodel.fabric.scaleout.kind.ScaleoutKind.plane_members`).
A system's nodes are its accelerators, NICs and in-system switch chips (the node
table's ``system`` column); network switches outside systems belong to no rack, feed,
loop or site here (their own failures are counted per switch), except that the one site
of a single-site design holds every node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from topomodel.fabric.scaleout import scaleout_kind
from topomodel.fabric.tables import Fabric
from topomodel.inputs.design import SERVERS_PER_RACK
from topomodel.inputs.parts import System
from topomodel.inputs.reliability import DOMAIN_KINDS


@dataclass(frozen=True, eq=False)
class DomainMap:
    """The domains of one kind: ``of_node[i]`` is node ``i``'s domain (-1: none),
    ``count`` the domains, ``systems`` the systems in the largest one."""

    kind: str
    of_node: np.ndarray
    count: int
    systems: int


def systems_per_rack(fabric: Fabric) -> int:
    """Systems per rack: the design's, else 1 for a rack-scale system (``form: rack``),
    else :data:`~topomodel.inputs.design.SERVERS_PER_RACK`."""
    asked = fabric.design.domains.systems_per_rack
    if asked is not None:
        return asked
    system = fabric.catalog.get(fabric.design.system, System)
    return 1 if system.form == "rack" else SERVERS_PER_RACK


def system_domains(fabric: Fabric, kind: str) -> tuple[np.ndarray, int]:
    """Each system's domain of ``kind`` (rack, power_feed, cooling_loop, site) and the
    systems in the largest domain."""
    d = fabric.design.domains
    systems = fabric.structure.systems
    number = np.arange(systems, dtype=np.int64)
    per_rack = systems_per_rack(fabric)
    racks_per = {"rack": 1, "power_feed": d.racks_per_power_feed,
                 "cooling_loop": d.racks_per_cooling_loop}
    if kind == "site":
        sites = min(d.sites, systems)
        return number * sites // systems, -(-systems // sites)
    if kind not in racks_per:
        raise ValueError(f"{kind!r} is not a domain of systems")
    per_domain = per_rack * racks_per[kind]
    return number // per_domain, min(per_domain, systems)


def domain_map(fabric: Fabric, kind: str) -> DomainMap:
    """The :class:`DomainMap` of ``kind`` (one of
    :data:`~topomodel.inputs.reliability.DOMAIN_KINDS`) on ``fabric``."""
    nodes = fabric.node_arrays
    if kind == "plane":
        so = scaleout_kind(fabric.structure)
        planes = fabric.structure.scaleout.planes if so.has_network else 0
        node_kind = nodes["kind"].labels()
        plane = nodes["plane"]
        of_node = np.full(len(nodes), -1, np.int64)
        for which in range(planes):
            of_node[so.plane_members(node_kind, plane, which)] = which
        return DomainMap(kind, of_node, planes, 0)
    if kind not in DOMAIN_KINDS:
        raise ValueError(f"unknown failure domain {kind!r}; one of {', '.join(DOMAIN_KINDS)}")
    per_system, largest = system_domains(fabric, kind)
    if kind == "site" and int(per_system.max()) == 0:  # one site: it holds everything
        return DomainMap(kind, np.zeros(len(nodes), np.int64), 1, largest)
    system = nodes["system"]
    inside = system >= 0
    of_node = np.full(len(nodes), -1, np.int64)
    of_node[inside] = per_system[system[inside]]
    return DomainMap(kind, of_node, int(per_system.max()) + 1, largest)


def domain_nodes(dmap: DomainMap, which: int) -> np.ndarray:
    """Mask of the nodes domain ``which`` of ``dmap`` takes down."""
    return dmap.of_node == which


def failed_domain_links(fabric: Fabric, dead: np.ndarray) -> np.ndarray:
    """The link mask with every link of the ``dead`` nodes failed (and the links
    already failed)."""
    links = fabric.link_arrays
    return links["failed"] | dead[links["src"]] | dead[links["dst"]]


def with_domains_failed(fabric: Fabric, specs: Sequence[str], *,
                        label: str = "--fail-domain") -> Fabric:
    """A copy of ``fabric`` with whole failure domains failed, each ``KIND:N`` (the
    N-th domain of the kind, from 0): every link of its nodes, as
    :func:`~topomodel.fabric.failures.with_failures` fails a part's.

    Raises
    ------
    UsageError
        After ``label``, for a spec that is not ``KIND:N`` or a domain the design does
        not have.
    """
    from topomodel.errors import UsageError

    dead = np.zeros(len(fabric.node_arrays), bool)
    for spec in specs:
        kind, _, number = spec.partition(":")
        if kind not in DOMAIN_KINDS or not number.isdigit():
            raise UsageError(f"{label}: {spec!r}: expected KIND:N, KIND one of"
                             f" {', '.join(DOMAIN_KINDS)}")
        dmap = domain_map(fabric, kind)
        which = int(number)
        if which >= dmap.count:
            has = (f"domains 0-{dmap.count - 1}" if dmap.count else "none")
            raise UsageError(f"{label}: {spec}: the design has {dmap.count:,}"
                             f" {kind.replace('_', ' ')} domain(s) ({has})")
        dead |= domain_nodes(dmap, which)
    return fabric.with_failed(failed_domain_links(fabric, dead))
