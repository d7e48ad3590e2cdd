"""How a fabric was built, as frozen records: the scale-up and scale-out parameters the
builder chose, and each accelerator's injection bandwidth, decided once at build time.

Analyses use :class:`Structure` for closed forms, routers for addresses, and reports
for their summaries; :func:`topomodel.fabric.build.structure_dict` is the ``structure`` object of
``topomodel build --format json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from topomodel.arrays import distinct
from topomodel.fabric.columns import Coded


@dataclass(frozen=True, eq=False)
class Torus:
    """An n-dimensional torus (or mesh) scale-up domain over whole systems (empty for
    the other scale-up kinds)."""

    shape: tuple[int, ...] = ()  # accelerators along each dimension of one domain
    wraparound: bool = False  # False: a mesh
    links_per_neighbor: int = 0  # parallel links to each neighbour
    coords: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.int64))
    """(accelerators, dimensions): each accelerator's place in its domain, rank order"""


@dataclass(frozen=True)
class SupernodeLevel:
    """One switch level of a supernode's per-plane Clos, as built."""

    name: str  # its tier: scaleup, scaleup_l2 or scaleup_l3
    switches_per_plane: int
    down_ports: int  # per switch
    up_ports: int  # per switch


@dataclass(frozen=True)
class Supernode:
    """In-system switch chips joined, per plane, by upper levels of switch chips (empty
    for the other scale-up kinds)."""

    planes: int = 0  # one per in-system switch chip of a system
    uplinks: int = 0  # from each in-system chip
    levels: int = 0  # switch levels, the in-system chips included
    tiers: tuple[SupernodeLevel, ...] = ()


@dataclass(frozen=True, eq=False)
class ScaleupStructure:
    """The scale-up domains: kind, link, and the kind's own parameters."""

    kind: str  # switched, full_mesh, torus, supernode, pcie or none
    link: str = ""  # catalog id of the scale-up link ('' for none)
    link_rate_Bps: float = 0.0  # one link, bytes/s per direction
    systems_per_domain: int = 1
    switches_per_system: int = 0  # switched: in-system switch chips; pcie: PCIe switches
    sockets: int = 0  # pcie: CPU sockets (root complexes) per system
    socket_link: str = ""  # pcie: catalog id of the link between sockets
    mesh_links_per_pair: int = 0  # full_mesh: links between each pair of accelerators
    torus: Torus = field(default_factory=Torus)
    supernode: Supernode = field(default_factory=Supernode)


@dataclass(frozen=True)
class ScaleoutStructure:
    """The scale-out network: NICs, ports, switches and how endpoints are grouped."""

    kind: str  # fat_tree, rail_only or none
    nic: str = ""  # catalog id
    nics_per_system: int = 0
    planes: int = 1
    port_rate_Bps: float = 0.0  # one NIC port of one plane, bytes/s per direction
    uplink_rate_Bps: float = 0.0  # switch-to-switch ports, bytes/s per direction
    switch: str = ""  # catalog id
    rail_optimized: bool = False
    host_link: str = ""  # catalog id of the accelerator-NIC link ('' for the NIC's rate)
    host_link_rate_Bps: float = 0.0  # bytes/s per direction
    unit_systems: int = 0  # systems per scalable unit
    rails_per_leaf: int | None = None  # rail-optimized fat-trees: rails sharing a leaf
    fat_tree_tiers: int = 0  # switch tiers above the NICs

    @property
    def rail_only(self) -> bool:
        """Whether each rail has its own network, with nothing between rails."""
        return self.kind == "rail_only"

    def as_dict(self) -> dict[str, Any]:
        """Its keys of ``topomodel build``'s JSON ``structure`` object (the
        scale-up kind gives its own: :func:`topomodel.fabric.build.structure_dict`).

        Examples
        --------
        >>> ScaleoutStructure("none").as_dict()
        {'scaleout': 'none'}
        """
        so = self
        out: dict[str, Any] = {"scaleout": so.kind}
        if so.kind != "none":
            out.update(nic=so.nic, nics_per_system=so.nics_per_system, planes=so.planes,
                       port_rate_Bps=so.port_rate_Bps, uplink_rate_Bps=so.uplink_rate_Bps,
                       switch=so.switch, rail_optimized=so.rail_optimized,
                       rail_only=so.rail_only, host_link_Bps=so.host_link_rate_Bps,
                       host_link=so.host_link, unit_systems=so.unit_systems)
            if so.rails_per_leaf is not None:
                out["rails_per_leaf"] = so.rails_per_leaf
            out["fat_tree_tiers"] = so.fat_tree_tiers
        return out


@dataclass(frozen=True, eq=False)
class Structure:
    """What the builder made: system counts, the scale-up and the scale-out parts."""

    systems: int
    accelerators_per_system: int
    scaleup: ScaleupStructure
    scaleout: ScaleoutStructure


@dataclass(frozen=True, eq=False)
class Injection:
    """Each accelerator's bandwidth into the network, bytes/s per direction, from the
    links as built (failed links included: a failure does not change what was built).

    Arrays are per accelerator, in rank order (``fabric.accelerators``).
    """

    nic: np.ndarray  # node number of the NIC that serves it (-1: no scale-out)
    scaleup_Bps: np.ndarray  # its scale-up links together
    scaleout_Bps: np.ndarray  # its own NICs: host link or NIC ports, whichever is slower
    host_Bps: np.ndarray  # host links to the NICs it owns (0: it owns none)
    nic_ports_Bps: np.ndarray  # the ports of the NICs it owns
    bisection_Bps: float  # into the networks that join the bisection's halves (mean)


def scaleout_injection_Bps(injection: Injection) -> float:
    """Today's scale-out bandwidth per accelerator, bytes/s per direction: each NIC's
    ports (every plane) capped by its host link, summed over the NICs and averaged over
    the accelerators (0 without a scale-out network).

    The one figure a scale-out factor multiplies (``advise``, ``step
    --target-comm-share``), that sweeps report as ``injection_Bps`` and that the levels'
    scale-out bandwidth starts from. Scale-up links never count: the bisection's
    injection (:attr:`Injection.bisection_Bps`) adds them when its halves split one
    domain, this does not.

    Examples
    --------
    >>> none = np.zeros(4)
    >>> scaleout_injection_Bps(Injection(np.array([8, 8, 9, 9]), none, np.array(
    ...     [50e9, 0.0, 50e9, 0.0]), none, none, 0.0)) / 1e9
    25.0
    """
    return float(np.sum(injection.scaleout_Bps)) / max(1, len(injection.scaleout_Bps))


def nic_owners(per_system: int, nics_per_system: int) -> np.ndarray:
    """The accelerator each NIC's host link goes to, by rail (local numbers in one
    system): NIC ``i`` to accelerator ``i * per_system // nics_per_system``.

    The one rule of which accelerator holds which NIC: the builder wires the host links
    by it, and which NIC serves an accelerator (:func:`serving_rails`) follows from it.

    Examples
    --------
    >>> nic_owners(8, 3).tolist(), nic_owners(4, 8).tolist()
    ([0, 2, 5], [0, 0, 1, 1, 2, 2, 3, 3])
    """
    return np.arange(nics_per_system, dtype=np.int64) * per_system // nics_per_system


def serving_rails(per_system: int, nics_per_system: int) -> np.ndarray:
    """The NIC (rail) serving each accelerator of a system, by local number: the first
    NIC whose host link it holds (:func:`nic_owners`); one that holds none shares the
    NIC of the nearest holder before it.

    A NIC count that does not divide the accelerators (nor they it) is served by this
    same rule rather than refused: such a system is built with one host link per NIC
    like any other, so refusing it would lose designs the builder, the bill of
    materials and the general router all handle; what must not happen is a reader
    sending an accelerator's traffic through a NIC other than the one its host link
    reaches. With 8 accelerators over 3 NICs the groups are 2, 3 and 3, each led by
    the holder of the host link; with 12 NICs, accelerators hold 2 or 1.

    Examples
    --------
    >>> serving_rails(8, 3).tolist(), serving_rails(8, 12).tolist()
    ([0, 0, 1, 1, 1, 2, 2, 2], [0, 2, 3, 5, 6, 8, 9, 11])
    >>> serving_rails(8, 4).tolist(), serving_rails(4, 8).tolist()
    ([0, 0, 1, 1, 2, 2, 3, 3], [0, 2, 4, 6])
    """
    owner = nic_owners(per_system, nics_per_system)
    # owners never decrease with the rail and NIC 0's is accelerator 0
    holder = owner[np.searchsorted(owner, np.arange(per_system), side="right") - 1]
    return np.searchsorted(owner, holder, side="left")


def serving_nics(acc_system: np.ndarray, acc_local: np.ndarray, nic_nodes: np.ndarray,
                 nic_system: np.ndarray, nic_local: np.ndarray, *, per_system: int,
                 nics_per_system: int) -> np.ndarray:
    """The NIC serving each accelerator: NIC :func:`serving_rails` of its system (node
    numbers; -1 without NICs).

    Examples
    --------
    >>> serving_nics(np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1]), np.array([10, 11]),
    ...              np.array([0, 1]), np.array([0, 0]), per_system=2, nics_per_system=1)
    array([10, 10, 11, 11])
    """
    if not nics_per_system or not len(nic_nodes):
        return np.full(len(acc_system), -1)
    table = np.full((int(max(acc_system.max(), nic_system.max())) + 1, nics_per_system), -1)
    table[nic_system, nic_local] = nic_nodes
    return table[acc_system, serving_rails(per_system, nics_per_system)[acc_local]]


def nic_owner_nodes(nodes: Any, structure: Structure) -> np.ndarray:
    """Per node: the accelerator that holds the host link of each NIC (:func:`nic_owners`,
    node numbers), -1 for every other node.

    Examples
    --------
    >>> from topomodel.fabric.columns import Category, Columns
    >>> nodes = Columns({"kind": Category(np.array([0] * 4 + [1]), ("accelerator", "nic")),
    ...                  "system": np.array([0, 0, 1, 1, 1]), "local": np.array([0, 1, 0, 1, 0])})
    >>> s = Structure(2, 2, ScaleupStructure("none"), ScaleoutStructure("fat_tree",
    ...               nics_per_system=1))
    >>> nic_owner_nodes(nodes, s).tolist()
    [-1, -1, -1, -1, 2]
    """
    kind = Coded(nodes["kind"])
    system, local = np.asarray(nodes["system"]), np.asarray(nodes["local"])
    acc, nic = np.flatnonzero(kind.equals("accelerator")), np.flatnonzero(kind.equals("nic"))
    out = np.full(len(nodes), -1)
    if not len(nic) or not len(acc):
        return out
    table = np.full((int(system[acc].max()) + 1, structure.accelerators_per_system), -1)
    table[system[acc], local[acc]] = acc
    owner = nic_owners(structure.accelerators_per_system, structure.scaleout.nics_per_system)
    out[nic] = table[system[nic], owner[local[nic]]]
    return out


def measure_injection(nodes: Any, links: Any, structure: Structure,
                      reverse_rows: np.ndarray) -> Injection:
    """Every accelerator's injection bandwidth from the link table, bytes/s per direction
    (``reverse_rows``: each link row's reverse row, see :class:`~topomodel.fabric.tables.Fabric`).

    Scale-up: the capacity of its scale-up links. Scale-out: for each NIC it owns (has
    the host link of), the host link or the NIC's ports, whichever is slower. The
    bisection's figure is the scale-out network's (the smaller of all host links and
    all NIC ports, per accelerator) when the halves are whole scale-up domains, plus the
    scale-up bandwidth when they split a single domain.
    """
    n = len(nodes)
    is_accelerator = Coded(nodes["kind"]).equals("accelerator")
    acc = np.flatnonzero(is_accelerator)
    src = np.asarray(links["src"])
    tier = Coded(links["tier"])
    cap = np.asarray(links["capacity_Bps"])

    def per_source(rows: np.ndarray) -> np.ndarray:
        """Capacity of ``rows`` per source node: summed over those rows only, in row
        order, as over every row with the others at zero (floats, even of no row)."""
        sums = np.bincount(src[rows], weights=cap[rows], minlength=n)
        return sums if len(rows) or not len(src) else sums.astype(float)

    is_acc = is_accelerator[src]
    scaleup_rows = np.flatnonzero(is_acc & tier.equals("scaleup"))
    up = per_source(scaleup_rows)
    host_rows = np.flatnonzero(is_acc & tier.equals("host"))
    nic = np.asarray(links["dst"])[host_rows]
    leaf_rows = np.flatnonzero(tier.equals("leaf"))
    port = per_source(leaf_rows)
    owner = src[host_rows]
    out = np.bincount(owner, weights=np.minimum(cap[host_rows], port[nic]), minlength=n)
    host = np.bincount(owner, weights=cap[host_rows], minlength=n)
    ports = np.bincount(owner, weights=port[nic], minlength=n)
    nic_nodes = np.flatnonzero(Coded(nodes["kind"]).equals("nic"))
    local = np.asarray(nodes["local"])
    system = np.asarray(nodes["system"])
    serving = serving_nics(system[acc], local[acc], nic_nodes, system[nic_nodes],
                           local[nic_nodes], per_system=structure.accelerators_per_system,
                           nics_per_system=structure.scaleout.nics_per_system)

    def weaker_sum(rows: np.ndarray) -> float:  # weaker_direction_Bps of those rows
        return float(np.minimum(cap[rows], cap[reverse_rows[rows]]).sum())

    scaleout = (min(weaker_sum(np.flatnonzero(tier.equals("host"))), weaker_sum(leaf_rows)) / 2
                if structure.scaleout.kind != "none" else 0.0)
    domain = np.asarray(nodes["domain"])[acc]
    count = max(1, len(acc))
    if len(distinct(domain[domain >= 0])) >= 2:
        bisection = float(scaleout / count)
    else:
        bisection = float((scaleout + cap[scaleup_rows].sum()) / count)
    return Injection(serving, up[acc], out[acc], host[acc], ports[acc], bisection)
