"""The structured router: switched scale-up domains and fat-trees, by their
addresses; traffic aggregated per leaf and pod, fast at 100k+ accelerators."""

from __future__ import annotations

import numpy as np

from topomodel.arrays import distinct
from topomodel.errors import RoutingError
from topomodel.fabric.scaleout import scaleout_kind
from topomodel.fabric.scaleup import scaleup_kind
from topomodel.fabric.tables import Fabric
from topomodel.routing.clos.view import Climb, ClosView, Irregular, climb_even, clos_view, spread
from topomodel.routing.hashing import QPS, choose, queue_pairs, ticket
from topomodel.routing.pieces import Piece, Rows, link_bytes_and_span, union_span
from topomodel.routing.routed import Routed
from topomodel.routing.sections import KeptSection, kept_intact
from topomodel.routing.survivors import (
    EXACT_SUM_BYTES,
    check_survivors,
    route_around_failures,
    whole_bytes,
)
from topomodel.traffic.phases import Phase

HOPS_DTYPE = np.int8
"""Hops per flow with every arc live, as int8: a path here has at most 8 links (NIC,
leaf, spine, core, spine, leaf, NIC and the host links; 6 across a supernode's switch
levels, 2 inside a system), and every reader takes the same values (latency multiplies
them by float seconds). Each healthy phase's route keeps them: 12.5 M flows at 98k,
12.5 MB instead of 100 MB as int64."""


def structured_supported(fabric: Fabric) -> str | None:
    """Why the structured router cannot route this fabric, or ``None`` if it can."""
    s = fabric.structure
    if not scaleup_kind(s).structured_routing:
        return f"scale-up kind {s.scaleup.kind}"
    kind = scaleout_kind(s)
    if not kind.structured_routing:
        return f"scale-out kind {s.scaleout.kind}"
    if kind.has_network and s.scaleout.nics_per_system != s.accelerators_per_system:
        return "accelerators without a NIC of their own"
    try:
        clos_view(fabric)
        if fabric.link_arrays["failed"].any():
            check_survivors(fabric)
    except Irregular as exc:
        return str(exc)
    return None


def route_structured(fabric: Fabric, phase: Phase, *, routing: str = "ecmp",
                     seed: int = 0, qps: int = QPS, hash_scaleup: bool = False) -> Routed:
    """Route on a switched/mesh scale-up plus fat-tree fabric by aggregation.

    Even ECMP needs only per-switch totals (what leaves a leaf, what enters a pod), so
    the cost is linear in flows plus links; d-mod-k picks one arc per flow, and hash one
    arc per queue pair (``qps`` per flow) at the scale-out choices (plane, spine,
    core), splitting evenly inside the scale-up domain unless ``hash_scaleup``. With
    failed parts, :mod:`topomodel.routing.survivors` routes over the surviving arcs and
    hands the flows that need a longer detour to the general router.

    Raises
    ------
    RoutingError
        If the fabric is not of a supported kind (see :func:`structured_supported`).
    """
    reason = structured_supported(fabric)
    if reason:
        raise RoutingError(f"the structured router does not handle {reason}; the general"
                           " router does (router 'auto' or 'general')")
    if fabric.link_arrays["failed"].any():
        return route_around_failures(fabric, phase, routing=routing, seed=seed, qps=qps,
                                     hash_scaleup=hash_scaleup)
    clos = clos_view(fabric)
    pieces: list[Piece] = []  # each kind of arc on its own link rows
    hops = np.zeros(phase.flows, dtype=HOPS_DTYPE)
    same = clos.same_domain(phase.src, phase.dst)
    inside = np.flatnonzero(same)
    up_routing = "ecmp" if routing == "hash" and not hash_scaleup else routing
    if len(inside):
        pieces += _route_scaleup(clos, phase, inside, up_routing, seed, qps)
        hops[inside] = 1 if clos.mesh else 2
        across = inside[clos.other_system(phase.src[inside], phase.dst[inside])]
        if len(across):  # supernode: through the upper switch levels of the chip's plane
            extra, hops[across] = _route_supernode(clos, phase, across, up_routing, seed,
                                                   qps)
            pieces += extra
        del across
    del inside
    outside = np.flatnonzero(~same)
    del same  # freed before the scale-out section's temporaries
    unroutable = np.zeros(0, np.int64)
    kept = None
    if len(outside):
        if not clos.planes:
            unroutable = outside
        elif (kept := _kept_scaleout(fabric, phase, outside, routing, seed, qps)) is not None:
            hops[outside] = kept.rest[0]
        else:
            extra, hops[outside] = _route_scaleout(clos, phase, outside, routing, seed,
                                                   qps)
            pieces += extra
    load, span = link_bytes_and_span(clos.n_links, pieces)
    if kept is not None:  # on its own rows, +0.0 until now: the same sums
        load = kept.added_to(load, clos.n_links)
        span = union_span([span, kept.span or (0, clos.n_links)])
    return Routed(load, hops, unroutable, "structured", span=span)


def _kept_scaleout(fabric: Fabric, phase: Phase, flows: np.ndarray, routing: str,
                   seed: int, qps: int) -> KeptSection | None:
    """The scale-out section of ``flows`` a copy of ``fabric`` kept routed intact
    (:mod:`topomodel.routing.sections`: a goodput's first degraded step routes them
    before the intact step), where it gives this router's loads bit for bit, else None.

    Under hash routing each queue pair's bytes go whole on one path, its flow's bytes
    per queue pair, and both routers pick the same paths; where those bytes are whole
    numbers and every link row's sum stays below
    :data:`~topomodel.routing.survivors.EXACT_SUM_BYTES`, every sum is exact in any
    order, so the kept section's sums are this router's own (98k NPU servers: the
    intact step's 1 s of scale-out routing of DeepSeek-V3's All-to-All not done again).
    Nowhere else (ECMP's fractions, bytes not whole, a lost flow)."""
    if routing != "hash":
        return None
    kept = kept_intact(fabric, "scaleout", phase, flows, (routing, seed, qps))
    if kept is None or kept.rest[1].any() or not whole_bytes(phase.bytes[flows], qps):
        return None
    return kept if kept.values.max(initial=0.0) < EXACT_SUM_BYTES else None


def _pick(routing: str, seed: int, flows: np.ndarray, node: np.ndarray,
          dst: np.ndarray | None, stride: np.int64, width: int, cables: int = 1
          ) -> np.ndarray:
    """Candidate index among ``width`` candidates of ``cables`` each (hash or d-mod-k),
    the same choice :func:`choose` makes. ``stride`` is one for every flow (an int64, so
    the quotient is int64 as with an array of it); hash routing reads no destination
    (``dst`` None there: no gathered copy of every queue pair's destination)."""
    if routing == "hash":
        return ticket(seed, flows, node, width * cables, cables)
    assert dst is not None
    return (dst // stride) % width


def _narrowest(values: np.ndarray, bound: int) -> np.ndarray:
    """``values`` (each in ``[-1, bound)``: indices, or -1 for none) in the smallest
    signed integer type that holds ``bound`` (the same values; ``values`` itself where
    that is its own type). A 2-D table's row index times its width plus a column
    (:meth:`~topomodel.routing.pieces.Rows.sums`) stays below the table's size: pass
    that size as ``bound`` for row indices, so the key fits the same type.

    Examples
    --------
    >>> _narrowest(np.array([0, 3, -1]), 4).dtype, _narrowest(np.arange(3), 40_000).dtype
    (dtype('int8'), dtype('int32'))
    """
    for kind in (np.int8, np.int16, np.int32):
        if bound <= np.iinfo(kind).max:
            return values if values.dtype == kind else values.astype(kind)
    return values


def _route_scaleup(clos: ClosView, phase: Phase, flows: np.ndarray, routing: str,
                   seed: int, qps: int) -> list[Piece]:
    """Accelerator -> in-system chip -> accelerator (or the full mesh's direct links)."""
    src, dst, volume = phase.src[flows], phase.dst[flows], phase.bytes[flows]
    if clos.mesh:  # a flow inside a system takes its direct link
        return [(clos.arcs.row(src, dst), volume)]
    up, down = clos.scaleup_up, clos.scaleup_down
    assert up is not None and down is not None
    if routing == "ecmp":
        nodes = len(clos.domain)
        sent = np.bincount(src, weights=volume, minlength=nodes)
        received = np.bincount(dst, weights=volume, minlength=nodes)
        owners_up = np.flatnonzero(up.slot >= 0)
        owners_down = np.flatnonzero(down.slot >= 0)
        return [spread(up, owners_up, sent[owners_up], up.weights[up.slot[owners_up]]),
                spread(down, owners_down, received[owners_down],
                        down.weights[down.slot[owners_down]])]
    take, flows, split = queue_pairs(routing, flows, qps)
    src, dst, volume = src[take], dst[take], volume[take] / split
    pick = choose(routing, seed, flows, src, dst, np.ones(len(flows), np.int64),
                  up.weights[up.slot[src]])
    # chip k of the destination's system (the same chip within a system; its peer in
    # the same plane across systems of a supernode): tables are in chip order
    return [Rows(up.table, up.slot[src], volume, pick),
            Rows(down.table, down.slot[dst], volume, pick)]


def _route_supernode(clos: ClosView, phase: Phase, flows: np.ndarray, routing: str,
                     seed: int, qps: int) -> tuple[list[Piece], np.ndarray]:
    """Between systems of one supernode: accelerator -> in-system chip k (the arcs to the
    chips were loaded by :func:`_route_scaleup`) -> plane k's Clos -> chip k of the
    destination system -> accelerator."""
    climb = clos.supernode
    up = clos.scaleup_up
    assert up is not None
    src, dst, volume = phase.src[flows], phase.dst[flows], phase.bytes[flows]
    chips = clos.dst[up.table]  # per table row, chip k of its system
    pod_s, pod_d = climb.pod[chips[up.slot[src], 0]], climb.pod[chips[up.slot[dst], 0]]
    between_pods = pod_s != pod_d
    hops = np.where(between_pods & (pod_s >= 0), 6, 4)
    if routing == "ecmp" and _columns_apart(chips) and _columns_apart(climb.pod[chips]):
        return _even_supernode(climb, up.weights, chips, up.slot[src], up.slot[dst], volume,
                               between_pods), hops
    chips_s = clos.dst[up.table[up.slot[src]]]  # (flows, k) chips of the source system
    chips_d = clos.dst[up.table[up.slot[dst]]]  # chip k of the destination system
    weights = up.weights[up.slot[src]].astype(float)
    if routing == "ecmp":
        share = weights / weights.sum(axis=1, keepdims=True) * volume[:, None]
        b = between_pods
        n = climb.n
        pieces = climb_even(
            climb, np.bincount(chips_s.ravel(), weights=share.ravel(), minlength=n),
            np.bincount(chips_d.ravel(), weights=share.ravel(), minlength=n),
            np.bincount(chips_s[b].ravel(), weights=share[b].ravel(), minlength=n),
            np.bincount(climb.pod[chips_d[b]].ravel(), weights=share[b].ravel(),
                        minlength=n))
        return pieces, hops
    take, flows, split = queue_pairs(routing, flows, qps)
    src, dst, volume = src[take], dst[take], volume[take] / split
    pick = choose(routing, seed, flows, src, dst, np.ones(len(flows), np.int64),
                  up.weights[up.slot[src]])
    stride = np.int64(chips_s.shape[1] if routing == "dmodk" else 1)
    return _climb(climb, flows, chips_s[take, pick], chips_d[take, pick], dst, volume,
                  stride, routing, seed), hops


def _even_supernode(climb: Climb, weights: np.ndarray, chips: np.ndarray,
                    row_s: np.ndarray, row_d: np.ndarray, volume: np.ndarray,
                    between: np.ndarray) -> list[Piece]:
    """:func:`_route_supernode` under ECMP a plane (column of the fan-out table: its
    ``weights`` and ``chips`` per row; the flows' rows ``row_s``, ``row_d``) at a time,
    where no chip and no pod is in two columns: each chip's (pod's) bytes are then one
    column's, added in flow order as the bincount over every (flow, plane) entry adds
    them, and the other columns add +0 to it (the bytes are not negative). No (flows,
    planes) array: at 98k NPUs, 5 M flows over 7 planes, 280 MB each."""
    n = climb.n
    cables = weights.astype(float)
    total = cables.sum(axis=1)
    sent, received, leaving, entering = (np.zeros(n) for _ in range(4))
    share = np.empty(len(row_s))
    for k in range(chips.shape[1]):
        np.take(cables[:, k], row_s, out=share)
        share /= total[row_s]
        share *= volume
        chip_s, chip_d = chips[:, k][row_s], chips[:, k][row_d]
        sent += np.bincount(chip_s, share, n)
        received += np.bincount(chip_d, share, n)
        leaving += np.bincount(chip_s[between], share[between], n)
        entering += np.bincount(climb.pod[chip_d[between]], share[between], n)
    return climb_even(climb, sent, received, leaving, entering)


def _columns_apart(values: np.ndarray) -> bool:
    """Whether no value of the 2-D ``values`` (below -1: none) is in two of its columns."""
    width = values.shape[1]
    keyed = distinct(values.astype(np.int64).ravel() * width
                     + np.tile(np.arange(width), len(values)))
    held = keyed[keyed >= 0] // width
    return len(held) == len(distinct(held))


def _route_scaleout(clos: ClosView, phase: Phase, flows: np.ndarray, routing: str,
                    seed: int, qps: int) -> tuple[list[Piece], np.ndarray]:
    """Accelerator -> NIC -> leaf of each plane (-> the plane's Clos -> leaf) -> NIC ->
    accelerator."""
    src, dst, volume = phase.src[flows], phase.dst[flows], phase.bytes[flows]
    pieces: list[Piece] = [Rows(clos.host_up, src, volume), Rows(clos.host_down, dst, volume)]
    hops = np.full(len(flows), 4, dtype=HOPS_DTYPE)
    access_up, access_down = clos.access_up, clos.access_down
    assert access_up is not None and access_down is not None
    nic_s, nic_d = clos.nic_of[src], clos.nic_of[dst]
    planes = access_up.width
    if routing == "ecmp":
        part = volume / planes
        pieces += [Rows(access_up.table, access_up.slot[nic_s], part),
                   Rows(access_down.table, access_down.slot[nic_d], part)]
        ups, downs = access_up.arcs(nic_s), access_down.arcs(nic_d)  # (flows, planes)
        leaf_s, leaf_d = clos.dst[ups], clos.src[downs]
        row, col = np.nonzero((leaf_s != leaf_d) & (part > 0)[:, None])
        ids, amount = flows[row], part[row]
        leaf_s, leaf_d = leaf_s[row, col], leaf_d[row, col]
    else:  # one plane per queue pair
        row, ids, split = queue_pairs(routing, flows, qps)
        # the queue pairs' indices held while their route is found in the fewest bytes
        # they fit (the same values): at 98k a relayed All-to-All has some 11 M queue
        # pairs, and these arrays set the step's peak of memory
        row = _narrowest(row, len(flows))
        # hash: the queue pairs' destinations are not read (no copy of them)
        col = _narrowest(_pick(routing, seed, ids, nic_s[row],
                               None if routing == "hash" else dst[row], np.int64(1), planes,
                               access_up.cables), planes)
        amount = volume[row] / split
        slot_up = _narrowest(access_up.slot, access_up.table.size)[nic_s[row]]
        slot_down = _narrowest(access_down.slot, access_down.table.size)[nic_d[row]]
        pieces += [Rows(access_up.table, slot_up, amount, col),
                   Rows(access_down.table, slot_down, amount, col)]
        # each queue pair's own arcs: no (flows, planes) table of every plane's
        leaf_s = clos.dst[access_up.table[slot_up, col]]
        leaf_d = clos.src[access_down.table[slot_down, col]]
        cross = (leaf_s != leaf_d) & (amount > 0)
        if not cross.all():  # one array at a time: each old one freed as its copy comes
            row = row[cross]
            ids = ids[cross]
            amount = amount[cross]
            leaf_s = leaf_s[cross]
            leaf_d = leaf_d[cross]
        del cross
    if len(row):
        stride = np.int64(planes if routing == "dmodk" else 1)
        climb = clos.fat_tree
        pieces += _climb(climb, ids, leaf_s, leaf_d, None if routing == "hash" else dst[row],
                         amount, stride, routing, seed)
        pods = climb.pod[leaf_s] != climb.pod[leaf_d]
        hops[row] = np.maximum(hops[row], np.where(pods & (climb.pod[leaf_s] >= 0), 8, 6))
    return pieces, hops


# PLR0913: one computation's arrays and options passed on as they are
def _climb(climb: Climb, flow_ids: np.ndarray, leaf_s: np.ndarray, leaf_d: np.ndarray,  # noqa: PLR0913
           dst: np.ndarray | None, volume: np.ndarray, stride: np.int64, routing: str,
           seed: int) -> list[Piece]:
    """Leaf to leaf through the spines (and the cores between pods); ``dst`` and
    ``stride`` as :func:`_pick` takes them (``dst`` None under hash routing)."""
    up, down = climb.up[climb.spine], climb.down[climb.spine]
    between = (climb.pod[leaf_s] != climb.pod[leaf_d]) & (climb.pod[leaf_s] >= 0)
    if routing == "ecmp":
        b = between
        return climb_even(climb, np.bincount(leaf_s, weights=volume, minlength=climb.n),
                           np.bincount(leaf_d, weights=volume, minlength=climb.n),
                           np.bincount(leaf_s[b], weights=volume[b], minlength=climb.n),
                           np.bincount(climb.pod[leaf_d[b]], weights=volume[b],
                                       minlength=climb.n))
    pick = _pick(routing, seed, flow_ids, leaf_s, dst, stride, up.width, up.cables)
    slot_up = up.slot[leaf_s]
    spine_s = climb.dst_of(up.table[slot_up, pick])
    pieces: list[Piece] = [Rows(up.table, slot_up, volume, pick)]
    spine_d = spine_s.copy()
    if between.any():
        b = np.flatnonzero(between)
        core_pieces, spine_d[b] = _cores_pick(climb, flow_ids[b], spine_s[b],
                                              climb.pod[leaf_d[b]],
                                              None if dst is None else dst[b], volume[b],
                                              stride * np.int64(up.width), routing, seed)
        pieces += core_pieces
    slot_down = down.slot[leaf_d]
    column = climb.down_column(slot_down, spine_d)
    return [*pieces, Rows(down.table, slot_down, volume, column)]


# PLR0913: one computation's arrays and options passed on as they are
def _cores_pick(climb: Climb, flow_ids: np.ndarray, spine_s: np.ndarray, pod_d: np.ndarray,  # noqa: PLR0913
                dst: np.ndarray | None, volume: np.ndarray, stride: np.int64, routing: str,
                seed: int) -> tuple[list[Piece], np.ndarray]:
    """One core per flow; returns the load and the destination pod's spine."""
    up_core = climb.up[climb.core]
    pick = _pick(routing, seed, flow_ids, spine_s, dst, stride, up_core.width,
                 up_core.cables)
    slot = up_core.slot[spine_s]
    core = climb.dst_of(up_core.table[slot, pick])
    position = np.searchsorted(climb.core_keys, core.astype(np.int64) * climb.n + pod_d)
    pieces: list[Piece] = [Rows(up_core.table, slot, volume, pick),
                           Rows(climb.core_arcs, position, volume)]
    return pieces, climb.dst_of(climb.core_arcs[position])
