"""The structured router: switched scale-up domains and fat-trees, by their
addresses; traffic aggregated per leaf and pod, fast at 100k+ accelerators."""

from __future__ import annotations

from functools import cached_property

import numpy as np

from topomodel.errors import RoutingError
from topomodel.fabric.arcs import ArcIndex
from topomodel.fabric.tables import Coded, Fabric, ignores_failures
from topomodel.routing.hashing import QPS, choose, mix, subflows
from topomodel.routing.pieces import Piece, Rows, link_bytes_and_span
from topomodel.routing.routed import Routed
from topomodel.traffic.phases import Phase
from topomodel.vocabulary import FAT_TREE_TIERS, SCALEUP_TIERS


class _Fanout:
    """Arcs from each node of one tier to the tier above (or below), as a table.

    Between switch tiers every arc carries the same cables (``cables``); from an
    accelerator to its in-system chips they may differ (5, 5, 4, 4 on HGX), so
    ``uniform=False`` keeps them per arc in ``weights``.
    """

    def __init__(self, owners: np.ndarray, arcs: np.ndarray, n_nodes: int,
                 cables: np.ndarray, *, uniform: bool = True) -> None:
        order = np.lexsort((arcs, owners))
        owners, arcs = owners[order], arcs[order]
        unique = owners[np.r_[True, owners[1:] != owners[:-1]]] if len(owners) else owners
        self.slot = np.full(n_nodes, -1)
        self.slot[unique] = np.arange(len(unique))
        width = len(arcs) // max(1, len(unique))
        if len(unique) and width * len(unique) != len(arcs):
            raise _Irregular("nodes of one tier have different fan-outs")
        self.table = arcs.reshape(len(unique), width) if len(unique) else arcs.reshape(0, 0)
        self.width = width
        self.weights = cables[self.table] if len(unique) else np.zeros((0, 0), np.int64)
        if uniform and self.weights.size and (self.weights != self.weights.flat[0]).any():
            raise _Irregular("uneven cable counts between tiers")
        self.cables = int(self.weights.flat[0]) if self.weights.size else 1

    def arcs(self, owner: np.ndarray) -> np.ndarray:
        """(len(owner), width) arcs of each owner, sorted by the other end's node."""
        return self.table[self.slot[owner]]


class _Irregular(ValueError):
    """A fabric the structured router cannot aggregate exactly."""


@ignores_failures
class _Clos:
    """Addresses of a fabric with switched (or mesh) scale-up and a fat-tree."""

    def __init__(self, fabric: Fabric) -> None:
        nodes, links = fabric.nodes, fabric.links
        src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
        cables = links["cables"].to_numpy()
        tier, node_tier, kind = Coded(links["tier"]), Coded(nodes["tier"]), Coded(nodes["kind"])
        n = len(nodes)
        self.n_links = len(links)
        self.src, self.dst, self.cables = src, dst, cables
        self.pod = nodes["pod"].to_numpy()
        self.domain = nodes["domain"].to_numpy()
        self.mesh = fabric.structure.scaleup.kind == "full_mesh"
        # each node column at each link's ends gathered once, compared many times
        kind_src, kind_dst = kind.at(src), kind.at(dst)
        tier_src, tier_dst = node_tier.at(src), node_tier.at(dst)
        host_tier = tier.equals("host")
        host = np.flatnonzero(host_tier & kind_src.equals("accelerator"))
        self.nic_of = np.full(n, -1)  # the NIC serving each accelerator, one rule for all
        self.nic_of[fabric.accelerators] = fabric.injection.nic
        self.host_up = np.full(n, -1)
        self.host_up[src[host]] = host
        back = np.flatnonzero(host_tier & kind_src.equals("nic"))
        self.host_down = np.full(n, -1)
        self.host_down[dst[back]] = back
        scaleout = fabric.structure.scaleout
        self.planes = scaleout.planes if scaleout.kind != "none" else 0
        leaf_tier = tier.equals("leaf")
        up = np.flatnonzero(leaf_tier & kind_src.equals("nic"))
        down = np.flatnonzero(leaf_tier & kind_dst.equals("nic"))
        self.access_up = _Fanout(src[up], up, n, cables) if len(up) else None
        self.access_down = _Fanout(dst[down], down, n, cables) if len(down) else None
        self.fat_tree = _Climb(src, dst, cables, tier, tier_src, tier_dst, n, FAT_TREE_TIERS)
        self.supernode = _Climb(src, dst, cables, tier, tier_src, tier_dst, n, SCALEUP_TIERS)
        scaleup_tier = tier.equals("scaleup")
        su = np.flatnonzero(scaleup_tier & kind_src.equals("accelerator"))
        sd = np.flatnonzero(scaleup_tier & kind_dst.equals("accelerator"))
        self.scaleup_up = self.scaleup_down = None
        if len(su) and not self.mesh:
            self.scaleup_up = _Fanout(src[su], su, n, cables, uniform=False)
            self.scaleup_down = _Fanout(dst[sd], sd, n, cables, uniform=False)
        self.system = nodes["system"].to_numpy()

    @cached_property
    def arcs(self) -> ArcIndex:
        """The link rows by their ends, for a full mesh's direct links (made on first
        use: other scale-up kinds never look an arc up)."""
        return ArcIndex.of(self.src, self.dst, len(self.domain))


class _Climb:
    """A folded Clos above a tier of leaves: leaf -> spine (-> core) fan-outs, pods.

    Pods are found from the wiring, not from names: a leaf's pod is the lowest-numbered
    spine it reaches, so pods of different planes or supernodes never mix.
    """

    def __init__(self, src: np.ndarray, dst: np.ndarray, cables: np.ndarray,
                 tier: Coded, tier_src: Coded, tier_dst: Coded, n: int,
                 names: tuple[str, str, str]) -> None:
        leaf, spine, core = names
        self.n_links = len(src)
        self.up: dict[str, _Fanout] = {}
        self.down: dict[str, _Fanout] = {}
        for name, lower in ((spine, leaf), (core, spine)):
            here = tier.equals(name)
            u = np.flatnonzero(here & tier_src.equals(lower))
            d = np.flatnonzero(here & tier_dst.equals(lower))
            if len(u):
                self.up[name] = _Fanout(src[u], u, n, cables)
                self.down[name] = _Fanout(dst[d], d, n, cables)
        self.spine, self.core = spine, core
        self.present = spine in self.up
        self.pod = np.full(n, -1)
        self.core_keys = np.zeros(0, np.int64)
        self.core_arcs = np.zeros(0, np.int64)
        if core in self.up:
            up = self.up[spine]
            leaves = np.flatnonzero(up.slot >= 0)
            self.pod[leaves] = dst[up.arcs(leaves)].min(axis=1)
            arcs = up.table.ravel()  # every leaf of a spine's pod has the same pod
            self.pod[dst[arcs]] = self.pod[src[arcs]]
            d = self.down[core].table.ravel()
            keys = src[d].astype(np.int64) * n + self.pod[dst[d]]
            order = np.argsort(keys)
            self.core_keys, self.core_arcs = keys[order], d[order]
        self.n = n
        self._src, self._dst = src, dst

    def src_of(self, arcs: np.ndarray) -> np.ndarray:
        """Lower ends of arcs."""
        return self._src[arcs]

    def dst_of(self, arcs: np.ndarray) -> np.ndarray:
        """Upper ends of arcs."""
        return self._dst[arcs]


def structured_supported(fabric: Fabric) -> str | None:
    """Why the structured router cannot route this fabric, or ``None`` if it can."""
    s = fabric.structure
    if s.scaleup.kind not in ("switched", "full_mesh", "supernode", "none"):
        return f"scale-up kind {s.scaleup.kind}"
    if s.scaleout.kind not in ("fat_tree", "none"):
        return f"scale-out kind {s.scaleout.kind}"
    if s.scaleout.kind == "fat_tree" and s.scaleout.nics_per_system != s.accelerators_per_system:
        return "accelerators without a NIC of their own"
    try:
        _clos(fabric)
        if fabric.links["failed"].any():
            from topomodel.routing.survivors import check_survivors

            check_survivors(fabric)
    except _Irregular as exc:
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
    if fabric.links["failed"].any():
        from topomodel.routing.survivors import route_around_failures

        return route_around_failures(fabric, phase, routing=routing, seed=seed, qps=qps,
                                     hash_scaleup=hash_scaleup)
    clos = _clos(fabric)
    pieces: list[Piece] = []  # each kind of arc on its own link rows
    hops = np.zeros(phase.flows, dtype=np.int64)
    same = (clos.domain[phase.src] == clos.domain[phase.dst]) & (clos.domain[phase.src] >= 0)
    inside = np.flatnonzero(same)
    up_routing = "ecmp" if routing == "hash" and not hash_scaleup else routing
    if len(inside):
        pieces += _route_scaleup(clos, phase, inside, up_routing, seed, qps)
        hops[inside] = 1 if clos.mesh else 2
        across = inside[clos.system[phase.src[inside]] != clos.system[phase.dst[inside]]]
        if len(across):  # supernode: through the upper switch levels of the chip's plane
            extra, hops[across] = _route_supernode(clos, phase, across, up_routing, seed,
                                                   qps)
            pieces += extra
    outside = np.flatnonzero(~same)
    unroutable = np.zeros(0, np.int64)
    if len(outside):
        if not clos.planes:
            unroutable = outside
        else:
            extra, hops[outside] = _route_scaleout(clos, phase, outside, routing, seed,
                                                   qps)
            pieces += extra
    load, span = link_bytes_and_span(clos.n_links, pieces)
    return Routed(load, hops, unroutable, "structured", span=span)


def _clos(fabric: Fabric) -> _Clos:
    return fabric.derived(_Clos)


def _spread(fanout: _Fanout, owners: np.ndarray, amount: np.ndarray,
            weights: np.ndarray | None = None) -> Rows:
    """``amount`` (bytes per owner; distinct owners) over each owner's arcs, evenly or
    split by ``weights`` (owners, width)."""
    index = fanout.slot[owners]
    if weights is None:
        return Rows(fanout.table, index, amount / fanout.width)
    return Rows(fanout.table, index,
                weights / weights.sum(axis=1, keepdims=True) * amount[:, None])


def _pick(routing: str, seed: int, flows: np.ndarray, node: np.ndarray, dst: np.ndarray,
          stride: np.ndarray, width: int, cables: int = 1) -> np.ndarray:
    """Candidate index among ``width`` candidates of ``cables`` each (hash or d-mod-k),
    the same choice :func:`choose` makes."""
    if routing == "hash":
        ticket = mix(seed, flows, node) % np.uint64(width * cables)
        return (ticket // np.uint64(cables)).astype(np.int64)
    return (dst // stride) % width


def _queue_pairs(routing: str, flows: np.ndarray,
                 qps: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(index into ``flows``, hash id, split) per queue pair: ``qps`` per flow under
    hash routing, the flow itself under d-mod-k (its choice depends on the destination
    alone, so more QPs would all take the same path)."""
    if routing != "hash":
        return np.arange(len(flows)), flows, 1
    take, ids = subflows(flows, qps)
    return take, ids, qps


def _route_scaleup(clos: _Clos, phase: Phase, flows: np.ndarray, routing: str,
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
        return [_spread(up, owners_up, sent[owners_up], up.weights[up.slot[owners_up]]),
                _spread(down, owners_down, received[owners_down],
                        down.weights[down.slot[owners_down]])]
    take, flows, split = _queue_pairs(routing, flows, qps)
    src, dst, volume = src[take], dst[take], volume[take] / split
    pick = choose(routing, seed, flows, src, dst, np.ones(len(flows), np.int64),
                  up.weights[up.slot[src]])
    # chip k of the destination's system (the same chip within a system; its peer in
    # the same plane across systems of a supernode): tables are in chip order
    return [Rows(up.table, up.slot[src], volume, pick),
            Rows(down.table, down.slot[dst], volume, pick)]


def _route_supernode(clos: _Clos, phase: Phase, flows: np.ndarray, routing: str,
                     seed: int, qps: int) -> tuple[list[Piece], np.ndarray]:
    """Between systems of one supernode: accelerator -> in-system chip k (the arcs to the
    chips were loaded by :func:`_route_scaleup`) -> plane k's Clos -> chip k of the
    destination system -> accelerator."""
    climb = clos.supernode
    up = clos.scaleup_up
    assert up is not None
    src, dst, volume = phase.src[flows], phase.dst[flows], phase.bytes[flows]
    chips_s = clos.dst[up.table[up.slot[src]]]  # (flows, k) chips of the source system
    chips_d = clos.dst[up.table[up.slot[dst]]]  # chip k of the destination system
    weights = up.weights[up.slot[src]].astype(float)
    between_pods = climb.pod[chips_s[:, 0]] != climb.pod[chips_d[:, 0]]
    hops = np.where(between_pods & (climb.pod[chips_s[:, 0]] >= 0), 6, 4)
    if routing == "ecmp":
        share = weights / weights.sum(axis=1, keepdims=True) * volume[:, None]
        b = between_pods
        n = climb.n
        pieces = _climb_even(
            climb, np.bincount(chips_s.ravel(), weights=share.ravel(), minlength=n),
            np.bincount(chips_d.ravel(), weights=share.ravel(), minlength=n),
            np.bincount(chips_s[b].ravel(), weights=share[b].ravel(), minlength=n),
            np.bincount(climb.pod[chips_d[b]].ravel(), weights=share[b].ravel(),
                        minlength=n))
        return pieces, hops
    take, flows, split = _queue_pairs(routing, flows, qps)
    src, dst, volume = src[take], dst[take], volume[take] / split
    pick = choose(routing, seed, flows, src, dst, np.ones(len(flows), np.int64),
                  up.weights[up.slot[src]])
    stride = np.full(len(flows), chips_s.shape[1] if routing == "dmodk" else 1, np.int64)
    return _climb(climb, flows, chips_s[take, pick], chips_d[take, pick], dst, volume,
                  stride, routing, seed), hops


def _route_scaleout(clos: _Clos, phase: Phase, flows: np.ndarray, routing: str,
                    seed: int, qps: int) -> tuple[list[Piece], np.ndarray]:
    """Accelerator -> NIC -> leaf of each plane (-> the plane's Clos -> leaf) -> NIC ->
    accelerator."""
    src, dst, volume = phase.src[flows], phase.dst[flows], phase.bytes[flows]
    pieces: list[Piece] = [Rows(clos.host_up, src, volume), Rows(clos.host_down, dst, volume)]
    hops = np.full(len(flows), 4, dtype=np.int64)
    access_up, access_down = clos.access_up, clos.access_down
    assert access_up is not None and access_down is not None
    nic_s, nic_d = clos.nic_of[src], clos.nic_of[dst]
    planes = access_up.width
    ups, downs = access_up.arcs(nic_s), access_down.arcs(nic_d)  # (flows, planes)
    if routing == "ecmp":
        part = volume / planes
        pieces += [Rows(access_up.table, access_up.slot[nic_s], part),
                   Rows(access_down.table, access_down.slot[nic_d], part)]
        leaf_s, leaf_d = clos.dst[ups], clos.src[downs]
        row, col = np.nonzero((leaf_s != leaf_d) & (part > 0)[:, None])
        ids, amount = flows[row], part[row]
        leaf_s, leaf_d = leaf_s[row, col], leaf_d[row, col]
    else:  # one plane per queue pair
        row, ids, split = _queue_pairs(routing, flows, qps)
        col = _pick(routing, seed, ids, nic_s[row], dst[row], np.ones(len(ids), np.int64),
                    planes, access_up.cables)
        amount = volume[row] / split
        pieces += [Rows(access_up.table, access_up.slot[nic_s[row]], amount, col),
                   Rows(access_down.table, access_down.slot[nic_d[row]], amount, col)]
        leaf_s, leaf_d = clos.dst[ups[row, col]], clos.src[downs[row, col]]
        cross = (leaf_s != leaf_d) & (amount > 0)
        row, ids, amount = row[cross], ids[cross], amount[cross]
        leaf_s, leaf_d = leaf_s[cross], leaf_d[cross]
    if len(row):
        stride = np.full(len(row), planes if routing == "dmodk" else 1, dtype=np.int64)
        climb = clos.fat_tree
        pieces += _climb(climb, ids, leaf_s, leaf_d, dst[row], amount, stride, routing,
                         seed)
        pods = climb.pod[leaf_s] != climb.pod[leaf_d]
        hops[row] = np.maximum(hops[row], np.where(pods & (climb.pod[leaf_s] >= 0), 8, 6))
    return pieces, hops


def _climb(climb: _Climb, flow_ids: np.ndarray, leaf_s: np.ndarray, leaf_d: np.ndarray,
           dst: np.ndarray, volume: np.ndarray, stride: np.ndarray, routing: str,
           seed: int) -> list[Piece]:
    """Leaf to leaf through the spines (and the cores between pods)."""
    up, down = climb.up[climb.spine], climb.down[climb.spine]
    between = (climb.pod[leaf_s] != climb.pod[leaf_d]) & (climb.pod[leaf_s] >= 0)
    if routing == "ecmp":
        b = between
        return _climb_even(climb, np.bincount(leaf_s, weights=volume, minlength=climb.n),
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
                                              climb.pod[leaf_d[b]], dst[b], volume[b],
                                              stride[b] * up.width, routing, seed)
        pieces += core_pieces
    slot_down = down.slot[leaf_d]
    column = np.argmax(climb.src_of(down.table[slot_down]) == spine_d[:, None], axis=1)
    return [*pieces, Rows(down.table, slot_down, volume, column)]


def _climb_even(climb: _Climb, sent: np.ndarray, received: np.ndarray, leaving: np.ndarray,
                entering: np.ndarray) -> list[Piece]:
    """Even ECMP through a Clos from per-switch totals (arrays indexed by node).

    ``sent``/``received``: bytes each leaf sends up / receives down; ``leaving``: the
    part of ``sent`` bound for another pod; ``entering``: bytes entering each pod (by
    pod key) from another pod. Every leaf splits evenly over its pod's spines and every
    spine over its cores, so these totals fix every link's load.
    """
    up, down = climb.up[climb.spine], climb.down[climb.spine]
    leaves_up = np.flatnonzero(up.slot >= 0)
    leaves_down = np.flatnonzero(down.slot >= 0)
    pieces: list[Piece] = [_spread(up, leaves_up, sent[leaves_up]),
                           _spread(down, leaves_down, received[leaves_down])]
    if climb.core not in climb.up or not leaving.any():
        return pieces
    up_core, down_core = climb.up[climb.core], climb.down[climb.core]
    arcs = up.arcs(leaves_up)
    spine_out = np.bincount(climb.dst_of(arcs).ravel(), weights=np.repeat(
        leaving[leaves_up] / up.width, up.width), minlength=climb.n)
    spines = np.flatnonzero(up_core.slot >= 0)
    # into each pod: every spine of the pod gets an equal share, then its cores evenly
    return [*pieces, _spread(up_core, spines, spine_out[spines]),
            _spread(down_core, spines, entering[climb.pod[spines]] / up.width)]


def _cores_pick(climb: _Climb, flow_ids: np.ndarray, spine_s: np.ndarray, pod_d: np.ndarray,
                dst: np.ndarray, volume: np.ndarray, stride: np.ndarray, routing: str,
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
