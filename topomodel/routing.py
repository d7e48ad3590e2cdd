"""Route a phase's flows over a fabric: bytes on every link, per step.

Routing policies (``routing=``):

``ecmp``
    Every shortest path, traffic split evenly per physical link at each hop (a switch
    hashes flows over all its equal-cost ports, so an arc of 4 cables gets 4 shares).
``hash``
    ECMP by seeded hash: each flow takes one path, its next hop picked at each node by
    a hash of (seed, flow, node) weighted by cables, so collisions show.
``dmodk``
    Deterministic up/down routing on fat-trees: at each choice the next hop is the
    ``(dst // stride) mod k``-th candidate (sorted by node number), ``stride`` the
    product of the earlier choices' ``k``.

Shortest means fewest hops, with accelerators as a last resort for transit: entering an
accelerator that is not the destination costs :data:`TRANSIT_PENALTY_HOPS` hops, so
traffic crosses the scale-up domain (NCCL's PXN) only where the network offers no path
(rail-only fabrics). Failed links carry nothing; flows with no path are reported.

Two routers give the same loads: :func:`route_general` works on any fabric (scipy
shortest paths per destination, flows pushed down the shortest-path DAG level by
level); :func:`route_structured` uses the addresses of switched scale-up domains and
fat-trees to aggregate traffic per leaf and pod, fast at 100k+ accelerators. The tests
hold them to the same link loads on every fabric small enough for both.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import dijkstra

from topomodel.fabric import Fabric
from topomodel.traffic import Phase

ROUTINGS = ("ecmp", "hash", "dmodk")
TRANSIT_PENALTY_HOPS = 1_000_000
"""Extra cost of passing through an accelerator: transit only when nothing else works."""
_DEST_BATCH = 256


@dataclass(frozen=True, eq=False)
class Routed:
    """Where one step of a phase goes.

    ``link_bytes`` is indexed like ``fabric.links`` (bytes per step); ``hops`` is per
    flow (links on its path; all paths of a flow have the same length); ``unroutable``
    lists flows (indices) with no path, whose bytes are not on any link.
    """

    link_bytes: np.ndarray
    hops: np.ndarray
    unroutable: np.ndarray
    router: str


def mix(seed: int, flow: np.ndarray, node: np.ndarray) -> np.ndarray:
    """A 64-bit hash of (seed, flow, node) (splitmix64 finaliser), vectorised.

    Examples
    --------
    >>> int(mix(1, np.array([5]), np.array([7]))[0]) == int(mix(1, np.array([5]),
    ...                                                         np.array([7]))[0])
    True
    """
    with np.errstate(over="ignore"):
        x = (np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
             ^ flow.astype(np.uint64) * np.uint64(0xBF58476D1CE4E5B9)
             ^ node.astype(np.uint64) * np.uint64(0x94D049BB133111EB))
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


def choose(routing: str, seed: int, flow: np.ndarray, node: np.ndarray, dst: np.ndarray,
           stride: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Index of the chosen candidate for each flow (hash or dmodk); ``weights`` is
    (flows, candidates) cables, zero for absent candidates (candidates are sorted by
    node number)."""
    total = weights.sum(axis=1)
    if routing == "hash":
        ticket = (mix(seed, flow, node) % total.astype(np.uint64)).astype(np.int64)
        picked: np.ndarray = np.argmax(np.cumsum(weights, axis=1) > ticket[:, None], axis=1)
        return picked
    count = (weights > 0).sum(axis=1)
    rank = (dst // stride) % count  # the rank-th present candidate
    present = np.cumsum(weights > 0, axis=1) - 1
    chosen: np.ndarray = np.argmax((present == rank[:, None]) & (weights > 0), axis=1)
    return chosen


class _Graph:
    """CSR views of a fabric's live links, for the general router."""

    def __init__(self, fabric: Fabric) -> None:
        links = fabric.links
        live = ~links["failed"].to_numpy()
        self.rows = np.flatnonzero(live)
        src = links["src"].to_numpy()[live]
        dst = links["dst"].to_numpy()[live]
        n = len(fabric.nodes)
        is_acc = (fabric.nodes["kind"] == "accelerator").to_numpy()
        weight = 1 + TRANSIT_PENALTY_HOPS * is_acc[dst].astype(np.int64)
        order = np.lexsort((dst, src))
        self.src, self.dst = src[order], dst[order]
        self.rows = self.rows[order]
        self.weight = weight[order]
        self.cables = links["cables"].to_numpy()[live][order]
        self.indptr = np.searchsorted(self.src, np.arange(n + 1))
        self.n = n
        self.is_acc = is_acc
        # reversed graph (dst -> src) to get distances *to* a destination
        self.reverse = sp.csr_matrix((self.weight.astype(float), (self.dst, self.src)),
                                     shape=(n, n))

    def distances_to(self, targets: np.ndarray) -> np.ndarray:
        """(targets, nodes) weighted distances from every node to each target."""
        return np.asarray(dijkstra(self.reverse, directed=True, indices=targets))


def route_general(fabric: Fabric, phase: Phase, *, routing: str = "ecmp",
                  seed: int = 0) -> Routed:
    """Route on any fabric: exact shortest-path routing per destination."""
    graph = _graph(fabric)
    link_bytes = np.zeros(len(fabric.links))
    hops = np.zeros(phase.flows, dtype=np.int64)
    unroutable: list[np.ndarray] = []
    targets, flow_target = np.unique(phase.dst, return_inverse=True)
    for start in range(0, len(targets), _DEST_BATCH):
        batch = targets[start:start + _DEST_BATCH]
        dist = graph.distances_to(batch)
        for k, target in enumerate(batch):
            flows = np.flatnonzero(flow_target == start + k)
            d = dist[k]
            source_dist = d[phase.src[flows]]
            lost = ~np.isfinite(source_dist)
            unroutable.append(flows[lost])
            flows = flows[~lost]
            if not len(flows):
                continue
            hops[flows] = (source_dist[~lost] % TRANSIT_PENALTY_HOPS).astype(np.int64)
            on_dag = np.isfinite(d[graph.src]) & (d[graph.src] == graph.weight + d[graph.dst])
            if routing == "ecmp":
                _push(graph, d, on_dag, phase.src[flows], phase.bytes[flows], link_bytes)
            else:
                _walk(graph, on_dag, flows, phase, int(target), routing, seed, link_bytes)
    lost_flows = np.concatenate(unroutable) if unroutable else np.zeros(0, np.int64)
    return Routed(link_bytes, hops, np.sort(lost_flows), "general")


def _push(graph: _Graph, dist: np.ndarray, on_dag: np.ndarray, sources: np.ndarray,
          volumes: np.ndarray, link_bytes: np.ndarray) -> None:
    """Push demands down the shortest-path DAG, split by cables at every node."""
    carried = np.bincount(sources, weights=volumes, minlength=graph.n)
    arcs = np.flatnonzero(on_dag)
    arc_src, arc_dst, arc_cables = graph.src[arcs], graph.dst[arcs], graph.cables[arcs]
    out_cables = np.bincount(arc_src, weights=arc_cables, minlength=graph.n)
    levels = np.unique(dist[arc_src])[::-1]
    for level in levels:
        here = dist[arc_src] == level
        a = arcs[here]
        share = carried[arc_src[here]] * arc_cables[here] / out_cables[arc_src[here]]
        np.add.at(link_bytes, graph.rows[a], share)
        np.add.at(carried, arc_dst[here], share)


def _walk(graph: _Graph, on_dag: np.ndarray, flows: np.ndarray, phase: Phase, target: int,
          routing: str, seed: int, link_bytes: np.ndarray) -> None:
    """One path per flow: at each node pick a DAG arc by hash or d-mod-k."""
    at = phase.src[flows].copy()
    stride = np.ones(len(flows), dtype=np.int64)
    active = np.ones(len(flows), dtype=bool)
    while active.any():
        idx = np.flatnonzero(active)
        nodes = at[idx]
        starts, ends = graph.indptr[nodes], graph.indptr[nodes + 1]
        width = int((ends - starts).max())
        cand = starts[:, None] + np.arange(width)[None, :]
        valid = cand < ends[:, None]
        cand = np.where(valid, cand, 0)
        weights = np.where(valid & on_dag[cand], graph.cables[cand], 0)
        pick = choose(routing, seed, flows[idx], nodes, np.full(len(idx), target), stride[idx],
                      weights)
        arc = cand[np.arange(len(idx)), pick]
        np.add.at(link_bytes, graph.rows[arc], phase.bytes[flows[idx]])
        stride[idx] *= np.maximum(1, (weights > 0).sum(axis=1))
        at[idx] = graph.dst[arc]
        active[idx] = at[idx] != target


_GRAPH_CACHE: dict[int, tuple[Fabric, _Graph]] = {}


def _graph(fabric: Fabric) -> _Graph:
    cached = _GRAPH_CACHE.get(id(fabric))
    if cached is None or cached[0] is not fabric:
        _GRAPH_CACHE.clear()
        cached = (fabric, _Graph(fabric))
        _GRAPH_CACHE[id(fabric)] = cached
    return cached[1]


# Structured router ------------------------------------------------------------------------


class _Clos:
    """Addresses of a fabric with switched (or mesh) scale-up and a fat-tree."""

    def __init__(self, fabric: Fabric) -> None:
        nodes, links = fabric.nodes, fabric.links
        self.fabric = fabric
        self.n_links = len(links)
        src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
        cables = links["cables"].to_numpy()
        tier = links["tier"].astype(str).to_numpy()
        node_tier = nodes["tier"].astype(str).to_numpy()
        kind = nodes["kind"].astype(str).to_numpy()
        self.system = nodes["system"].to_numpy()
        self.pod = nodes["pod"].to_numpy()
        self.src, self.dst, self.cables, self.tier = src, dst, cables, tier
        self.node_tier, self.kind = node_tier, kind
        n = len(nodes)
        # accelerator -> its NIC (host arc), NIC -> leaf per plane
        host = np.flatnonzero((tier == "host") & (kind[src] == "accelerator"))
        self.nic_of = np.full(n, -1)
        self.nic_of[src[host]] = dst[host]
        self.host_up = np.full(n, -1)
        self.host_up[src[host]] = host
        host_down = np.flatnonzero((tier == "host") & (kind[src] == "nic"))
        self.host_down = np.full(n, -1)
        self.host_down[dst[host_down]] = host_down
        access_up = np.flatnonzero((tier == "leaf") & (kind[src] == "nic"))
        access_down = np.flatnonzero((tier == "leaf") & (kind[dst] == "nic"))
        self.planes = int(fabric.structure.get("planes", 1)) if fabric.structure[
            "scaleout"] != "none" else 0
        # sorted by (nic, leaf node) so plane order matches node order
        order = np.lexsort((dst[access_up], src[access_up]))
        access_up = access_up[order]
        self.access_up = access_up.reshape(-1, self.planes) if self.planes else access_up
        order = np.lexsort((src[access_down], dst[access_down]))
        self.access_down = access_down[order].reshape(-1, self.planes) if self.planes else (
            access_down)
        self.nic_index = np.full(n, -1)
        if self.planes:
            self.nic_index[src[self.access_up[:, 0]]] = np.arange(len(self.access_up))
        # up and down arcs per switch tier, sorted by (lower switch, upper node)
        self.up = {}
        self.down = {}
        for name, lower in (("spine", "leaf"), ("core", "spine")):
            up = np.flatnonzero((tier == name) & (node_tier[src] == lower))
            up = up[np.lexsort((dst[up], src[up]))]
            down = np.flatnonzero((tier == name) & (node_tier[dst] == lower))
            down = down[np.lexsort((src[down], dst[down]))]
            self.up[name], self.down[name] = up, down
        # scale-up: accelerator -> chips (sorted), chip -> accelerator
        su = np.flatnonzero((tier == "scaleup") & (kind[src] == "accelerator"))
        self.mesh = fabric.structure["scaleup"] == "full_mesh"
        su = su[np.lexsort((dst[su], src[su]))]
        self.scaleup_up = su
        sd = np.flatnonzero((tier == "scaleup") & (kind[dst] == "accelerator")
                            & (kind[src] != "accelerator"))
        self.scaleup_down = sd[np.lexsort((src[sd], dst[sd]))]
        self.domain = nodes["domain"].to_numpy()

    @cached_property
    def arc_index(self) -> dict[tuple[int, int], int]:
        """(src, dst) -> link row, for the few lookups that need it."""
        return {(int(a), int(b)): i for i, (a, b) in enumerate(zip(self.src, self.dst,
                                                                   strict=True))}


def structured_supported(fabric: Fabric) -> str | None:
    """Why the structured router cannot route this fabric, or ``None`` if it can."""
    s = fabric.structure
    if fabric.links["failed"].any():
        return "failed links (the general router re-routes around them)"
    if s["scaleup"] not in ("switched", "full_mesh", "none"):
        return f"scale-up kind {s['scaleup']}"
    if s["scaleout"] not in ("fat_tree", "none"):
        return f"scale-out kind {s['scaleout']}"
    if s["scaleout"] == "fat_tree" and s.get("nics_per_system") != s["accelerators_per_system"]:
        return "accelerators without a NIC of their own"
    return None


def route_structured(fabric: Fabric, phase: Phase, *, routing: str = "ecmp",
                     seed: int = 0) -> Routed:
    """Route on a switched/mesh scale-up plus fat-tree fabric by aggregation.

    Raises
    ------
    ValueError
        If the fabric is not of a supported kind (see :func:`structured_supported`).
    """
    reason = structured_supported(fabric)
    if reason:
        raise ValueError(f"the structured router does not handle {reason}")
    clos = _clos(fabric)
    load = np.zeros(len(fabric.links))
    hops = np.zeros(phase.flows, dtype=np.int64)
    same = (clos.domain[phase.src] == clos.domain[phase.dst]) & (clos.domain[phase.src] >= 0)
    inside = np.flatnonzero(same)
    if len(inside):
        hops[inside] = _route_scaleup(clos, phase, inside, routing, seed, load)
    outside = np.flatnonzero(~same)
    unroutable = np.zeros(0, np.int64)
    if len(outside):
        if not clos.planes:
            unroutable = outside
        else:
            hops[outside] = _route_scaleout(clos, phase, outside, routing, seed, load)
    return Routed(load, hops, unroutable, "structured")


_CLOS_CACHE: dict[int, tuple[Fabric, _Clos]] = {}


def _clos(fabric: Fabric) -> _Clos:
    cached = _CLOS_CACHE.get(id(fabric))
    if cached is None or cached[0] is not fabric:
        _CLOS_CACHE.clear()
        cached = (fabric, _Clos(fabric))
        _CLOS_CACHE[id(fabric)] = cached
    return cached[1]


def _route_scaleup(clos: _Clos, phase: Phase, flows: np.ndarray, routing: str, seed: int,
                   load: np.ndarray) -> np.ndarray:
    src, dst, volume = phase.src[flows], phase.dst[flows], phase.bytes[flows]
    if clos.mesh:
        rows = np.array([clos.arc_index[(int(a), int(b))] for a, b in zip(src, dst,
                                                                           strict=True)])
        np.add.at(load, rows, volume)
        return np.ones(len(flows), dtype=np.int64)
    per_acc = len(clos.scaleup_up) // max(1, int((clos.kind == "accelerator").sum()))
    up = clos.scaleup_up.reshape(-1, per_acc)  # row i: arcs of the i-th accelerator
    acc_row = np.full(len(clos.kind), -1)
    acc_row[clos.src[up[:, 0]]] = np.arange(len(up))
    down = clos.scaleup_down.reshape(-1, per_acc)
    arcs_up, arcs_down = up[acc_row[src]], down[acc_row[dst]]
    weights = clos.cables[arcs_up].astype(float)
    if routing == "ecmp":
        share = weights / weights.sum(axis=1, keepdims=True) * volume[:, None]
        np.add.at(load, arcs_up.ravel(), share.ravel())
        np.add.at(load, arcs_down.ravel(), share.ravel())
    else:
        pick = choose(routing, seed, flows, src, dst, np.ones(len(flows), np.int64),
                      clos.cables[arcs_up])
        np.add.at(load, arcs_up[np.arange(len(flows)), pick], volume)
        np.add.at(load, arcs_down[np.arange(len(flows)), pick], volume)
    return np.full(len(flows), 2, dtype=np.int64)


def _route_scaleout(clos: _Clos, phase: Phase, flows: np.ndarray, routing: str, seed: int,
                    load: np.ndarray) -> np.ndarray:
    src, dst, volume = phase.src[flows], phase.dst[flows], phase.bytes[flows]
    nic_s, nic_d = clos.nic_of[src], clos.nic_of[dst]
    np.add.at(load, clos.host_up[src], volume)
    np.add.at(load, clos.host_down[dst], volume)
    hops = np.full(len(flows), 2, dtype=np.int64)
    planes = clos.planes
    ups = clos.access_up[clos.nic_index[nic_s]]  # (flows, planes) arcs nic -> leaf
    downs = clos.access_down[clos.nic_index[nic_d]]  # (flows, planes) arcs leaf -> nic
    if routing == "ecmp":
        plane_share = np.full((len(flows), planes), 1.0 / planes)
    else:
        pick = choose(routing, seed, flows, nic_s, dst, np.ones(len(flows), np.int64),
                      np.ones((len(flows), planes), np.int64))
        plane_share = np.zeros((len(flows), planes))
        plane_share[np.arange(len(flows)), pick] = 1.0
    stride = np.full(len(flows), planes if routing == "dmodk" else 1, dtype=np.int64)
    for p in range(planes):
        v = volume * plane_share[:, p]
        take = v > 0
        if not take.any():
            continue
        f, v = np.flatnonzero(take), v[take]
        up_arc, down_arc = ups[f, p], downs[f, p]
        np.add.at(load, up_arc, v)
        np.add.at(load, down_arc, v)
        leaf_s, leaf_d = clos.dst[up_arc], clos.src[down_arc]
        hops[f] = 4
        cross = leaf_s != leaf_d
        if cross.any():
            c = np.flatnonzero(cross)
            hops[f[c]] = _climb(clos, flows[f[c]], leaf_s[c], leaf_d[c], dst[f[c]], v[c],
                                stride[f[c]], routing, seed, load)
    return hops


def _climb(clos: _Clos, flow_ids: np.ndarray, leaf_s: np.ndarray, leaf_d: np.ndarray,
           dst: np.ndarray, volume: np.ndarray, stride: np.ndarray, routing: str, seed: int,
           load: np.ndarray) -> np.ndarray:
    """Leaf to leaf through spines (and cores between pods); returns hops (6 or 8)."""
    up, down = clos.up["spine"], clos.down["spine"]
    k = _group_width(clos.src[up])
    up_by_leaf = _rows_by(clos.src[up], up, k, len(clos.kind))
    down_by_leaf = _rows_by(clos.dst[down], down, k, len(clos.kind))
    arcs_up = up_by_leaf[leaf_s]  # (flows, k) leaf -> spines, sorted by spine
    arcs_down_all = down_by_leaf[leaf_d]  # (flows, k) spines -> dest leaf
    pod_s, pod_d = clos.pod[leaf_s], clos.pod[leaf_d]
    between = (pod_s != pod_d) & (pod_s >= 0)
    hops = np.where(between, 8, 6)
    weights = clos.cables[arcs_up]
    if routing == "ecmp":
        share = weights / weights.sum(axis=1, keepdims=True) * volume[:, None]
    else:
        pick = choose(routing, seed, flow_ids, leaf_s, dst, stride, weights)
        share = np.zeros(weights.shape)
        share[np.arange(len(volume)), pick] = volume
        stride = stride * k
    np.add.at(load, arcs_up.ravel(), share.ravel())
    within = ~between
    # inside a pod (or a 2-tier fabric): spine q -> destination leaf
    np.add.at(load, arcs_down_all[within].ravel(), share[within].ravel())
    if between.any():
        b = np.flatnonzero(between)
        spines = clos.dst[arcs_up[b]]  # (flows, k) spine q of the source pod
        _cores(clos, flow_ids[b], spines, share[b], pod_d[b], leaf_d[b], dst[b], stride[b],
               routing, seed, load)
    return hops


def _cores(clos: _Clos, flow_ids: np.ndarray, spines: np.ndarray, share: np.ndarray,
           pod_d: np.ndarray, leaf_d: np.ndarray, dst: np.ndarray, stride: np.ndarray,
           routing: str, seed: int, load: np.ndarray) -> None:
    """Spine q of the source pod -> cores of group q -> spine q of the destination pod."""
    up, down = clos.up["core"], clos.down["core"]
    c = _group_width(clos.src[up])
    n = len(clos.kind)
    up_by_spine = _rows_by(clos.src[up], up, c, n)  # spine -> its core arcs (sorted)
    # (core, pod) key -> arc from that core down to the spine of that pod
    spine_pod = clos.pod[clos.dst[down]]
    key = clos.src[down].astype(np.int64) * (int(clos.pod.max()) + 1) + spine_pod
    order = np.argsort(key)
    sorted_keys = key[order]
    core_down = (sorted_keys, down[order])
    leaf_down = clos.down["spine"]
    k = _group_width(clos.dst[leaf_down])
    spine_to_leaf = _rows_by(clos.dst[leaf_down], leaf_down, k, n)[leaf_d]  # (flows, k)
    for q in range(spines.shape[1]):
        vol = share[:, q]
        if not (vol > 0).any():
            continue
        arcs = up_by_spine[spines[:, q]]  # (flows, c)
        weights = clos.cables[arcs]
        if routing == "ecmp":
            part = weights / weights.sum(axis=1, keepdims=True) * vol[:, None]
        else:
            pick = choose(routing, seed, flow_ids, spines[:, q], dst, stride, weights)
            part = np.zeros(weights.shape)
            part[np.arange(len(vol)), pick] = vol
        np.add.at(load, arcs.ravel(), part.ravel())
        cores = clos.dst[arcs]  # (flows, c)
        wanted = cores.astype(np.int64) * (int(clos.pod.max()) + 1) + pod_d[:, None]
        pos = np.searchsorted(core_down[0], wanted.ravel())
        down_arcs = core_down[1][pos].reshape(cores.shape)  # core -> spine q of dest pod
        np.add.at(load, down_arcs.ravel(), part.ravel())
        # spine q of the destination pod -> destination leaf
        dest_spine = clos.dst[down_arcs[:, 0]]
        arc = spine_to_leaf[np.arange(len(vol)), np.argmax(
            clos.src[spine_to_leaf] == dest_spine[:, None], axis=1)]
        np.add.at(load, arc, vol)


def _group_width(keys: np.ndarray) -> int:
    """How many arcs each key has (they all have the same number)."""
    if not len(keys):
        return 0
    counts = np.bincount(keys)
    counts = counts[counts > 0]
    if counts.min() != counts.max():
        raise ValueError("the structured router needs the same fan-out at every switch")
    return int(counts[0])


def _rows_by(keys: np.ndarray, arcs: np.ndarray, width: int, n: int) -> np.ndarray:
    """(n, width) table: row k lists the arcs whose key is k (in the given order)."""
    table = np.full((n, max(width, 1)), -1, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    k, a = keys[order], arcs[order]
    position = np.arange(len(k)) - np.searchsorted(k, k)
    table[k, position] = a
    return table


def route(fabric: Fabric, phase: Phase, *, routing: str = "ecmp", seed: int = 0,
          router: str = "auto") -> Routed:
    """Route one step of ``phase``; ``router`` is ``auto``, ``general`` or ``structured``.

    ``auto`` takes the structured router where it applies, else the general one. Flows
    that start or end at a switch (in-network reduction) go over their direct link when
    there is one, else through the general router.
    """
    if routing not in ROUTINGS:
        raise ValueError(f"unknown routing {routing!r}; choose from {', '.join(ROUTINGS)}")
    structured = router == "structured" or (router == "auto"
                                            and structured_supported(fabric) is None)
    if not structured:
        return route_general(fabric, phase, routing=routing, seed=seed)
    is_acc = (fabric.nodes["kind"] == "accelerator").to_numpy()
    pairs = is_acc[phase.src] & is_acc[phase.dst]
    if pairs.all():
        return route_structured(fabric, phase, routing=routing, seed=seed)
    load = np.zeros(len(fabric.links))
    hops = np.zeros(phase.flows, dtype=np.int64)
    lost: list[np.ndarray] = []
    rows = _direct_links(fabric, phase.src, phase.dst)
    direct = ~pairs & (rows >= 0)
    np.add.at(load, rows[direct], phase.bytes[direct])
    hops[direct] = 1
    for mask, fn in ((pairs, route_structured), (~pairs & ~direct, route_general)):
        if not mask.any():
            continue
        idx = np.flatnonzero(mask)
        part = Phase(phase.src[idx], phase.dst[idx], phase.bytes[idx], phase.group[idx],
                     phase.steps, phase.label, phase.messages_per_step)
        routed = fn(fabric, part, routing=routing, seed=seed)
        load += routed.link_bytes
        hops[idx] = routed.hops
        lost.append(idx[routed.unroutable])
    unroutable = np.sort(np.concatenate(lost)) if lost else np.zeros(0, np.int64)
    return Routed(load, hops, unroutable, "structured")


def _direct_links(fabric: Fabric, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Link row of the live arc src -> dst for each pair, or -1."""
    links = fabric.links
    n = len(fabric.nodes)
    live = np.flatnonzero(~links["failed"].to_numpy())
    keys = links["src"].to_numpy()[live] * n + links["dst"].to_numpy()[live]
    order = np.argsort(keys)
    wanted = src.astype(np.int64) * n + dst
    pos = np.clip(np.searchsorted(keys[order], wanted), 0, max(len(keys) - 1, 0))
    found = len(keys) > 0
    hit = found & (keys[order][pos] == wanted) if found else np.zeros(len(src), bool)
    return np.where(hit, live[order][pos], -1)
