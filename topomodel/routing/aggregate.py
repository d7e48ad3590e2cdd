"""An all-pairs phase (a direct All-to-All) routed from counts, without its pairs.

Under even ECMP on a structured fabric (switched or mesh scale-up domains, a fat-tree
of one or more planes) a link's load is a sum of per-switch totals: what each
accelerator sends and receives across domains (host link, one NIC arc per plane), what
each leaf sends up and receives down (its pairs whose other end is under another leaf
of that plane), what leaves each leaf for another pod and what enters each pod. For
an all-pairs phase these totals are counts of group members per domain, leaf and pod
(:mod:`topomodel.traffic.allpairs`), so the cost is linear in ranks, not in pairs. The
flows inside switched scale-up domains (pairs of a group in one domain, PXN's first
hops) load only their ends' arcs to the domain's switches, so the bytes each
accelerator sends and receives inside its domain are spread over those arcs as
:func:`~topomodel.routing.structured.route_structured` spreads them; in a full mesh (a
direct link per pair) or a supernode (pairs between its systems climb its Clos) they
are listed and go through it.

:func:`route_all_pairs` returns ``None`` where the counts do not give the same loads
as routing every pair, and the caller lists the pairs instead: routing other than
``ecmp`` (hash and d-mod-k pick one path per flow or queue pair, so which pairs collide
matters), failed links, a fabric without scale-out (pairs between domains have no
path), a NIC whose up and down arcs reach different leaves, and the phases
:func:`~topomodel.traffic.allpairs.decompose` refuses (irregular groups: one group
index on two rows, a PXN relay outside its own row). The general router always lists
them. The tests hold both paths to the same loads link by link.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from topomodel.fabric.tables import Fabric, ignores_failures
from topomodel.routing.clos.view import ClosView, climb_even, clos_view
from topomodel.routing.pieces import link_bytes
from topomodel.routing.policy import fabric_routing
from topomodel.routing.routed import Routed
from topomodel.routing.structured import route_structured, structured_supported
from topomodel.traffic.allpairs import Decomposition, decompose
from topomodel.traffic.phases import AllPairsPhase
from topomodel.vocabulary import AUTO_ROUTING

SAME_LEAF_HOPS, SAME_POD_HOPS, BETWEEN_PODS_HOPS = 4, 6, 8
"""Links on a path between domains: accelerator, NIC, leaf (, spine (, core, spine),
leaf), NIC, accelerator: the lengths :func:`route_structured` gives."""

SWITCHED_HOPS = 2
"""Links on a path inside a switched domain: accelerator, in-system switch chip,
accelerator (:func:`route_structured`'s length)."""


def lists_all_pairs(fabric: Fabric, routing: str) -> bool:
    """Whether every all-pairs phase on ``fabric`` under ``routing`` (``auto``
    resolved) has its pairs listed, whatever its groups: routing other than the even
    split, a failed link, or a fabric the structured router does not cover (the general
    router lists every flow). Where it is False a phase may still be listed (the
    phase-dependent cases of the module docstring), never the other way round: what a
    caller needs to refuse a phase above :data:`~topomodel.limits.MAX_FLOWS` before
    building it."""
    if routing == AUTO_ROUTING:
        routing = fabric_routing(fabric).routing
    return (routing != "ecmp" or bool(fabric.link_arrays["failed"].any())
            or structured_supported(fabric) is not None)


def route_all_pairs(fabric: Fabric, phase: AllPairsPhase, *,
                    routing: str = "ecmp") -> Routed | None:
    """Bytes per link of one step of ``phase`` under even ECMP, from counts; ``None``
    where only listing the pairs is exact (see the module docstring).

    ``hops`` of the result is per path class (``inside`` set): the listed flows inside
    domains, then one class for every pair between domains (the longest such path).
    """
    if lists_all_pairs(fabric, routing):
        return None
    clos = clos_view(fabric)
    counts = decompose(fabric, phase)
    if counts is None:
        return None
    across = counts.out_pairs > 0
    if across.any() and not clos.planes:
        return None
    access_up, access_down = clos.access_up, clos.access_down
    nic = clos.nic_of[counts.node]
    if across.any():
        if access_up is None or access_down is None or (nic < 0).any():
            return None
        leaves = clos.dst[access_up.arcs(nic)]  # (members, planes) leaf of each plane
        if not (clos.src[access_down.arcs(nic)] == leaves).all():
            return None
        climb = clos.fat_tree
        if climb.core in climb.up and (climb.pod[leaves] < 0).any():
            return None
    if clos.mesh or clos.supernode.present or clos.scaleup_up is None:
        local = route_structured(fabric, counts.local, routing="ecmp")
        load, hops = local.link_bytes, [local.hops]
    else:
        load = _inside_switched_domains(clos, counts)
        hops = [np.array([SWITCHED_HOPS] if counts.has_local else [], np.int64)]
    inside = [np.ones(len(hops[0]), bool)]
    if across.any():
        longest = _between_domains(fabric, counts, leaves, load)
        hops.append(np.array([longest]))
        inside.append(np.zeros(1, bool))
    return Routed(load, np.concatenate(hops), np.zeros(0, np.int64), "structured",
                  np.concatenate(inside))


@ignores_failures  # the wiring of NICs to leaves alone
def _domains_apart(fabric: Fabric) -> np.ndarray:
    """Per plane: whether every leaf reaches at most one accelerator of each scale-up
    domain (rail-optimized: a server's NICs on as many leaves)."""
    clos = clos_view(fabric)
    acc = fabric.accelerators
    domain, nic = clos.domain[acc], clos.nic_of[acc]
    access_up = clos.access_up
    inside = (domain >= 0) & (nic >= 0)
    if access_up is None or not inside.any():
        return np.ones(max(clos.planes, 1), bool)
    leaves = clos.dst[access_up.arcs(nic[inside])]
    keys = domain[inside].astype(np.int64)[:, None] * len(clos.domain) + leaves
    return np.array([len(np.unique(keys[:, p])) == len(keys) for p in range(keys.shape[1])])


def _inside_switched_domains(clos: ClosView, counts: Decomposition) -> np.ndarray:
    """Loads of the flows inside switched scale-up domains: what each accelerator sends
    and receives there, over its arcs to and from the domain's switch chips, as
    :func:`route_structured` spreads them under even ECMP (the same products, each on
    its own link row: the same bytes to the last bit)."""
    load = np.zeros(clos.n_links)
    for fanout, amount in ((clos.scaleup_up, counts.local_sent),
                           (clos.scaleup_down, counts.local_received)):
        assert fanout is not None
        owners, share = fanout.shares
        load[fanout.table[fanout.slot[owners]]] = share * amount[owners][:, None]
    return load


def _put(load: np.ndarray, arcs: Callable[[np.ndarray], np.ndarray], owner: np.ndarray,
         amount: np.ndarray, nodes: int) -> None:
    """Add ``amount`` (per entry of ``owner``, a node) on each owner's link rows
    ``arcs(owners)`` ((owners,) one row each, or (owners, width) rows each taking it
    whole; rows of distinct owners distinct): each owner's sum in entry order, as one
    bincount over the rows adds them."""
    entry = np.arange(len(owner))
    seen = np.full(nodes, -1)
    seen[owner] = entry
    if (seen[owner] == entry).all():  # each owner once: its sum is its amount
        per, hit = amount, owner
    else:
        sums = np.bincount(owner, weights=amount, minlength=nodes)
        hit = np.flatnonzero(sums)
        per = sums[hit]
    rows = arcs(hit)
    load[rows] += per if rows.ndim == 1 else per[:, None]


def _between_domains(fabric: Fabric, counts: Decomposition, leaves: np.ndarray,
                     load: np.ndarray) -> int:
    """Add the loads of the pairs between domains (as ``route_structured`` spreads them)
    to ``load``, on rows it has not loaded; the longest of their paths."""
    clos = clos_view(fabric)
    climb = clos.fat_tree
    n_links, n_nodes = clos.n_links, len(clos.domain)
    sent = counts.out_pairs * counts.pair_bytes
    received = counts.in_pairs * counts.pair_bytes
    nic = clos.nic_of[counts.node]
    access_up, access_down = clos.access_up, clos.access_down
    assert access_up is not None and access_down is not None
    planes = leaves.shape[1]
    _put(load, clos.host_up.__getitem__, counts.node, sent, n_nodes)
    _put(load, clos.host_down.__getitem__, counts.node, received, n_nodes)
    _put(load, access_up.arcs, nic, sent / planes, n_nodes)
    _put(load, access_down.arcs, nic, received / planes, n_nodes)
    up_leaf, down_leaf = np.zeros(n_nodes), np.zeros(n_nodes)
    leaving, entering = np.zeros(n_nodes), np.zeros(n_nodes)
    cores = climb.core in climb.up
    longest = SAME_LEAF_HOPS
    moving = counts.pair_bytes > 0
    apart = fabric.derived(_domains_apart)
    for plane in range(planes):
        leaf = leaves[:, plane]
        under_leaf = counts.pairs_within(leaf, apart=bool(apart[plane]))
        inner = under_leaf * counts.pair_bytes / planes  # both ends under this leaf
        up_leaf += np.bincount(leaf, weights=(counts.out_pairs - under_leaf)
                               * counts.pair_bytes / planes, minlength=n_nodes)
        down_leaf += np.bincount(leaf, weights=received / planes - inner, minlength=n_nodes)
        if ((counts.out_pairs - under_leaf > 0) & moving).any():
            longest = max(longest, SAME_POD_HOPS)
        if not cores:
            continue
        pod = climb.pod[leaf]
        in_pod = counts.pairs_within(pod)
        inner_pod = in_pod * counts.pair_bytes / planes  # both ends in this pod
        leaving += np.bincount(leaf, weights=(counts.out_pairs - in_pod)
                               * counts.pair_bytes / planes, minlength=n_nodes)
        entering += np.bincount(pod, weights=received / planes - inner_pod,
                                minlength=n_nodes)
        if ((counts.out_pairs - in_pod > 0) & moving).any():
            longest = BETWEEN_PODS_HOPS
    if climb.present:  # one leaf per plane otherwise: nothing goes up
        load += link_bytes(n_links, climb_even(climb, up_leaf, down_leaf, leaving,
                                                entering))
    return longest
