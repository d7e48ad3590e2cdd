"""Route a phase's flows over a fabric: bytes on every link, per step.

Routing policies (``routing=``):

``ecmp``
    Every shortest path, traffic split evenly per physical link at each hop (a switch
    hashes flows over all its equal-cost ports, so an arc of 4 cables gets 4 shares).
``hash``
    ECMP by seeded hash, as switches hash RoCE/IB queue pairs: each flow is split into
    ``qps`` queue pairs (default :data:`~topomodel.routing.hashing.QPS`, NCCL's 1 QP per
    connection x 2 channels per network peer), and each QP takes one path, its next hop
    picked at each scale-out choice (NIC plane, leaf/spine/core uplinks) by a hash of
    (seed, QP, node) weighted by cables, so collisions show, averaged over the QPs.
    Choices among scale-up links only (in-system switch chips, supernode levels) are
    split evenly by cables, as ECMP does, unless ``hash_scaleup=True`` hashes them too.
    With ``qps=1`` QP ``f`` hashes as flow ``f``.
``auto``
    The fabric's own: ``ecmp`` where its scale-out switches route adaptively, ``hash``
    where they hash flows (:func:`~topomodel.routing.policy.fabric_routing`).
``dmodk``
    Deterministic up/down routing on fat-trees: at each choice the next hop is the
    ``(dst // stride) mod k``-th candidate (sorted by node number), ``stride`` the
    product of the earlier choices' ``k``.

Shortest means fewest hops, with accelerators as a last resort for transit: entering an
accelerator that is not the destination costs :data:`TRANSIT_PENALTY_HOPS` hops, so
traffic crosses the scale-up domain (NCCL's PXN) only where the network offers no path
(rail-only fabrics); and a host link costs more than any scale-up path
(:data:`~topomodel.routing.pathcost.HOST_LINK_COST`), so traffic inside a scale-up domain
stays on it while it has a path there, even where the network's path has fewer hops (a
three-level supernode's 6 against 4 through a leaf both NICs share). Failed links carry
nothing; flows with no path are reported.

Two routers give the same loads: :func:`route_general` works on any fabric (scipy
shortest paths per destination, flows pushed down the shortest-path DAG level by
level); :func:`route_structured` uses the addresses of switched scale-up domains and
fat-trees to aggregate traffic per leaf and pod, fast at 100k+ accelerators, failed
parts included (ECMP over the surviving arcs; only flows that need a longer detour, such
as a transit around a cut-off NIC, go to the general router). The tests hold them to the
same link loads on every fabric small enough for both, with and without failures.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topomodel.arrays import search_sorted
from topomodel.errors import RoutingError
from topomodel.fabric.arcs import arc_index
from topomodel.fabric.tables import Fabric
from topomodel.routing.aggregate import route_all_pairs
from topomodel.routing.general import route_general
from topomodel.routing.hashing import QPS, check_qps
from topomodel.routing.policy import fabric_routing
from topomodel.routing.routed import ROUTERS, ROUTINGS, Routed
from topomodel.routing.structured import route_structured, structured_supported
from topomodel.traffic.phases import AllPairsPhase, Phase
from topomodel.traffic.relaying import Relays
from topomodel.vocabulary import AUTO_ROUTING, ROUTING_CHOICES


def route(fabric: Fabric, phase: Phase, *, routing: str = "ecmp", seed: int = 0,
          router: str = "auto", qps: int = QPS, hash_scaleup: bool = False) -> Routed:
    """Route one step of ``phase``; ``routing`` is a policy of the module docstring
    (``auto`` the fabric's); ``router`` is ``auto``, ``general`` or ``structured``.

    ``qps`` (queue pairs per flow) and ``hash_scaleup`` (hash inside the scale-up
    domain too) apply to ``routing="hash"`` only; see the module docstring.

    ``auto`` takes the structured router where it applies, else the general one. An
    :class:`~topomodel.traffic.phases.AllPairsPhase` (a direct All-to-All) is routed
    there from counts of its groups where that is exact
    (:func:`~topomodel.routing.aggregate.route_all_pairs`: even ECMP, no failures),
    else its pairs are listed and routed as any flows. Flows
    that start or end at a switch (in-network reduction) go over their direct link when
    there is one, else over every two-hop path through a NIC or scale-out switch (split by cables,
    as ECMP splits them; the shortest paths there are), else through the general router.

    Raises
    ------
    RoutingError
        For an unknown ``routing`` or ``router``, ``qps`` below 1,
        ``router="structured"`` on a fabric it does not cover, or a phase beyond the
        general router's work limit.
    """
    if routing == AUTO_ROUTING:
        routing = fabric_routing(fabric).routing
    if routing not in ROUTINGS:
        raise RoutingError(f"unknown routing {routing!r}; choose from"
                           f" {', '.join(ROUTING_CHOICES)}")
    if router not in ROUTERS:
        raise RoutingError(f"unknown router {router!r}; choose from {', '.join(ROUTERS)}")
    check_qps(qps)
    structured = router == "structured" or (router == "auto"
                                            and structured_supported(fabric) is None)
    if not structured:
        return route_general(fabric, phase, routing=routing, seed=seed, qps=qps,
                             hash_scaleup=hash_scaleup)
    if isinstance(phase, AllPairsPhase):  # a direct All-to-All: from counts where exact
        counted = route_all_pairs(fabric, phase, routing=routing)
        if counted is not None:
            return counted
    is_acc = _is_accelerator(fabric)
    pairs = (None if _ranks_between_accelerators(phase, is_acc)
             else is_acc[phase.src] & is_acc[phase.dst])
    if pairs is None or pairs.all():
        return route_structured(fabric, phase, routing=routing, seed=seed, qps=qps,
                                hash_scaleup=hash_scaleup)
    load = np.zeros(len(fabric.link_arrays))
    hops = np.zeros(phase.flows, dtype=np.int64)
    lost: list[np.ndarray] = []
    others = np.flatnonzero(~pairs)
    rows = _direct_links(fabric, phase.src[others], phase.dst[others])
    direct = np.zeros(phase.flows, bool)
    direct[others[rows >= 0]] = True
    load += np.bincount(rows[rows >= 0], weights=phase.bytes[direct], minlength=len(load))
    hops[direct] = 1
    rest = np.flatnonzero(~pairs & ~direct)
    two_hop = np.zeros(phase.flows, bool)
    if len(rest):
        flow, first, second, share = _two_hop_paths(fabric, phase.src[rest], phase.dst[rest])
        amount = phase.bytes[rest][flow] * share
        load += np.bincount(first, weights=amount, minlength=len(load))
        load += np.bincount(second, weights=amount, minlength=len(load))
        two_hop[rest[flow]] = True
        hops[two_hop] = 2
    for mask, fn in ((pairs, route_structured), (~pairs & ~direct & ~two_hop, route_general)):
        if not mask.any():
            continue
        idx = np.flatnonzero(mask)
        part = Phase(phase.src[idx], phase.dst[idx], phase.bytes[idx], phase.group[idx],
                     phase.steps, phase.label, phase.messages_per_step)
        routed = fn(fabric, part, routing=routing, seed=seed, qps=qps,
                    hash_scaleup=hash_scaleup)
        load += routed.link_bytes
        hops[idx] = routed.hops
        lost.append(idx[routed.unroutable])
    unroutable = np.sort(np.concatenate(lost)) if lost else np.zeros(0, np.int64)
    return Routed(load, hops, unroutable, "structured")


@dataclass(frozen=True, eq=False)
class _Arcs:
    """The live arcs of a fabric indexed by (src, dst) key, for direct look-ups."""

    n: int
    keys: np.ndarray  # src * n + dst of the live arcs, sorted
    rows_by_key: np.ndarray  # their link rows, in that order


def _arcs(fabric: Fabric) -> _Arcs:
    """The fabric's arc index (:func:`~topomodel.fabric.arcs.arc_index`, shared by its
    failed copies) without the failed rows: the stable order of the live rows' keys,
    as sorting them alone gives it, with no sort here."""
    index = fabric.derived(arc_index)
    live = ~fabric.link_arrays["failed"][index.order]
    if live.all():
        return _Arcs(index.nodes, index.keys, index.order)
    return _Arcs(index.nodes, index.keys[live], index.order[live])


@dataclass(frozen=True, eq=False)
class _Middles:
    """The live arcs touching a NIC or a scale-out switch (the middles of two-hop
    paths), by their other end; made only where a two-hop path is looked for."""

    src_sorted: np.ndarray  # src of the live arcs into a NIC or a scale-out switch, sorted
    rows_by_src: np.ndarray  # their link rows, in that order
    dst_sorted: np.ndarray  # dst of the live arcs out of a NIC or a scale-out switch, sorted
    rows_by_dst: np.ndarray  # their link rows, in that order


def _middles(fabric: Fabric) -> _Middles:
    links = fabric.link_arrays
    live = np.flatnonzero(~links["failed"])
    src, dst = links["src"][live], links["dst"][live]
    middle = fabric.kind_mask("nic") | fabric.kind_mask("switch")
    into = np.flatnonzero(middle[dst])
    by_src = into[np.argsort(src[into], kind="stable")]
    out_of = np.flatnonzero(middle[src])
    by_dst = out_of[np.argsort(dst[out_of], kind="stable")]
    return _Middles(src[by_src], live[by_src], dst[by_dst], live[by_dst])


def _direct_links(fabric: Fabric, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Link row of the live arc src -> dst for each pair, or -1."""
    arcs = fabric.derived(_arcs)
    if not len(arcs.keys):
        return np.full(len(src), -1)
    wanted = src.astype(np.int64) * arcs.n + dst
    pos = np.clip(search_sorted(arcs.keys, wanted), 0, len(arcs.keys) - 1)
    return np.where(arcs.keys[pos] == wanted, arcs.rows_by_key[pos], -1)


def _two_hop_paths(fabric: Fabric, src: np.ndarray, dst: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every path src -> m -> dst over live arcs with m a NIC or a scale-out switch, per
    pair: (pair index, first link row, second link row, share of the pair's bytes), the
    shares of a pair in proportion to the cables of its first arc; pairs with no such
    path are absent. (In-network flows run between accelerators, NICs and switches, so
    a middle scale-up chip or accelerator is never on a shortest two-hop path of theirs
    where one through the network exists.)

    Each pair's candidate middles are listed from whichever end has fewer arcs to one
    (a switch sending to an accelerator lists the accelerator's one NIC, not the
    switch's hundred ports), so the work is the smaller degree per pair."""
    links = fabric.link_arrays
    arcs = fabric.derived(_middles)
    out_lo, out_count = _spans(arcs.src_sorted, src)
    in_lo, in_count = _spans(arcs.dst_sorted, dst)
    forward = out_count <= in_count
    pair_f, first_f = _expand(out_lo[forward], out_count[forward], arcs.rows_by_src)
    pair_f = np.flatnonzero(forward)[pair_f]
    second_f = _direct_links(fabric, links["dst"][first_f], dst[pair_f])
    pair_b, second_b = _expand(in_lo[~forward], in_count[~forward], arcs.rows_by_dst)
    pair_b = np.flatnonzero(~forward)[pair_b]
    first_b = _direct_links(fabric, src[pair_b], links["src"][second_b])
    pair = np.concatenate([pair_f, pair_b])
    first = np.concatenate([first_f, first_b])
    second = np.concatenate([second_f, second_b])
    found = (first >= 0) & (second >= 0)
    pair, first, second = pair[found], first[found], second[found]
    weight = links["cables"][first].astype(float)
    total = np.bincount(pair, weights=weight, minlength=len(src))
    return pair, first, second, weight / total[pair] if len(pair) else weight


def _spans(sorted_keys: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and length of each wanted key's run in ``sorted_keys``."""
    lo = search_sorted(sorted_keys, wanted, "left")
    return lo, search_sorted(sorted_keys, wanted, "right") - lo


def _expand(lo: np.ndarray, count: np.ndarray, rows: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """(index into lo, row) for every element of every run ``rows[lo:lo + count]``."""
    owner = np.repeat(np.arange(len(lo)), count)
    within = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
    return owner, rows[lo[owner] + within]


def _ranks_between_accelerators(phase: Phase, is_acc: np.ndarray) -> bool:
    """Whether every flow of an all-pairs phase joins two accelerators, read off its
    groups' ranks and PXN's relays (a relayed flow ends at one), not per listed flow
    (11 M at 98k); False for other phases (their flows are checked one by one)."""
    if not isinstance(phase, AllPairsPhase) or not (
            phase.rewrite is None or isinstance(phase.rewrite, Relays)):
        return False
    ends = [b.ranks for b in phase.blocks]
    if isinstance(phase.rewrite, Relays):
        ends.append(phase.rewrite.nodes)
    return all(bool(is_acc[e].all()) for e in ends)


def _is_accelerator(fabric: Fabric) -> np.ndarray:
    return fabric.kind_mask("accelerator")
