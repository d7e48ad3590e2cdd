"""The general router: any fabric, failures included; scipy shortest paths per
destination, flows pushed down the shortest-path DAG level by level."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from topomodel.errors import RoutingError
from topomodel.fabric.tables import Fabric
from topomodel.records import documented
from topomodel.routing.hashing import QPS, choose, subflows
from topomodel.routing.routed import Routed
from topomodel.traffic.phases import Phase
from topomodel.vocabulary import SCALEUP_TIERS

TRANSIT_PENALTY_HOPS = documented(
    "routing.TRANSIT_PENALTY_HOPS", 1_000_000,
    "extra cost of passing through an accelerator: transit only when nothing else works")


HOP_COST = documented(
    "routing.HOP_COST", 4,
    """Cost of one hop. A host link (accelerator to NIC) costs one more, so between
    accelerators of one scale-up domain the scale-up path wins a tie with the NICs.""")


_DEST_BATCH = 256


GENERAL_ROUTER_MAX_WORK = 2_000_000_000
"""Largest destinations x live arcs the general router takes on (the TPU v4 pod's 4096
chips with failures are 1.6e8, about 15 s); beyond it a run would take many minutes, so
it is refused with a message instead."""


GENERAL_ROUTER_MAX_S = documented(
    "routing.GENERAL_ROUTER_MAX_S", 60.0,
    """Longest the general router may be expected to take on one traffic (every phase
    of a collective or step), seconds, by :func:`general_router_estimate`; a traffic
    estimated beyond it is refused up front with the estimate, not run for many
    minutes (the TPU v4 pod's 4,096-chip All-to-All, about 30 s, is inside it; a
    pairwise All-to-All over a failed DGX SuperPOD, 1,015 phases, is not). The
    estimate's rates were measured on a loaded 2-core machine.""")

GENERAL_ROUTER_MAX_BYTES = documented(
    "routing.GENERAL_ROUTER_MAX_BYTES", 4 << 30,
    """Largest working memory the general router may be expected to need at once,
    bytes (hash and d-mod-k routing walk every queue pair at once)""")

_DAG_S_PER_ARC = 2.7e-7  # shortest-path DAG of one destination, per live arc
_PUSH_S_PER_ARC = 6e-8  # pushing one destination's flows down its DAG, per live arc
_WALK_S_PER_CANDIDATE = 1.2e-7  # one queue pair looking at one candidate arc, one hop
_WALK_BYTES_PER_CANDIDATE = 64  # the walk's (queue pairs x candidates) arrays
_FLOW_BYTES = 64  # a flow's share of the phase's and the router's per-flow arrays


@dataclass(frozen=True)
class GeneralEstimate:
    """What the general router is expected to cost on a traffic."""

    time_s: float
    peak_bytes: float
    phases: int
    destinations: int
    arcs: int

    def refusal(self) -> str | None:
        """Why the traffic is refused (the estimate against the bounds), or None."""
        if self.time_s > GENERAL_ROUTER_MAX_S:
            return (f"about {self.time_s:,.0f} s estimated for the general router"
                    f" ({self.phases:,} phase(s), {self.destinations:,} destinations,"
                    f" {self.arcs:,} live arcs), more than its bound of"
                    f" {GENERAL_ROUTER_MAX_S:,.0f} s")
        if self.peak_bytes > GENERAL_ROUTER_MAX_BYTES:
            return (f"about {self.peak_bytes / 2**30:,.1f} GiB of working memory estimated"
                    f" for the general router ({self.phases:,} phase(s)), more than its"
                    f" bound of {GENERAL_ROUTER_MAX_BYTES / 2**30:,.0f} GiB")
        return None


def general_router_estimate(fabric: Fabric, phases: Sequence[Phase], *,
                            routing: str = "ecmp", qps: int = QPS) -> GeneralEstimate:
    """The time (seconds) and peak memory (bytes) the general router is expected to
    take on ``phases``, from their sizes alone (nothing is routed): per phase, a
    shortest-path DAG per new destination and, under ECMP, a push down each, or under
    hash and d-mod-k routing, every queue pair looking at every candidate arc at every
    hop."""
    graph = _graph(fabric)
    arcs = len(graph.src)
    width = int(np.diff(graph.indptr).max()) if arcs else 0
    seen: set[int] = set()
    time_s, peak, destinations = 0.0, 0.0, 0
    hops = 0  # the longest walk: the levels of one destination's DAG
    for phase in phases:
        if not phase.flows:
            continue
        if not hops:
            hops = len(graph.dags(phase.dst[:1])[0].bounds) + 1
        targets = np.unique(phase.dst)
        destinations = max(destinations, len(targets))
        new = len(targets) if len(seen) * arcs * 8 > DAG_CACHE_BYTES else sum(
            1 for t in targets.tolist() if t not in seen)
        seen.update(targets.tolist())
        time_s += new * arcs * _DAG_S_PER_ARC
        dags = min(len(seen) * arcs * 20, DAG_CACHE_BYTES)  # a DAG: ~20 bytes per arc
        peak = max(peak, phase.flows * _FLOW_BYTES + dags)
        if routing == "ecmp":
            time_s += len(targets) * arcs * _PUSH_S_PER_ARC
        else:
            walkers = phase.flows * (qps if routing == "hash" else 1)
            time_s += walkers * width * hops * _WALK_S_PER_CANDIDATE
            peak = max(peak, walkers * width * _WALK_BYTES_PER_CANDIDATE
                       + phase.flows * _FLOW_BYTES + dags)
    return GeneralEstimate(time_s, peak, len(phases), destinations, arcs)


def check_general_work(fabric: Fabric, phases: Sequence[Phase], *, routing: str = "ecmp",
                       qps: int = QPS) -> None:
    """Refuse, before routing anything, a traffic the general router would take longer
    than :data:`GENERAL_ROUTER_MAX_S` or more memory than
    :data:`GENERAL_ROUTER_MAX_BYTES` on.

    Raises
    ------
    RoutingError
        Naming the estimate and the bound.
    """
    why = general_router_estimate(fabric, phases, routing=routing, qps=qps).refusal()
    if why:
        raise RoutingError(f"{why}; use a smaller design, fewer ranks, fewer phases"
                           " (another algorithm) or ECMP routing")


DAG_CACHE_BYTES = 1 << 30
"""Memory the general router keeps shortest-path DAGs in for later phases; DAGs beyond it
are computed, used and dropped."""


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
        host = (links["tier"] == "host").to_numpy()[live]
        weight = (HOP_COST + host.astype(np.int64)
                  + TRANSIT_PENALTY_HOPS * is_acc[dst].astype(np.int64))
        order = np.lexsort((dst, src))
        self.src, self.dst = src[order], dst[order]
        self.rows = self.rows[order]
        self.weight = weight[order]
        self.cables = links["cables"].to_numpy()[live][order]
        self.scaleup = links["tier"].isin(SCALEUP_TIERS).to_numpy()[live][order]
        self.indptr = np.searchsorted(self.src, np.arange(n + 1))
        self.n = n
        self.is_acc = is_acc
        # reversed graph (dst -> src) to get distances *to* a destination
        import scipy.sparse as sp  # loaded when a fabric needs the general router

        self.reverse = sp.csr_matrix((self.weight.astype(float), (self.dst, self.src)),
                                     shape=(n, n))
        self._dags: dict[int, _Dag] = {}
        self._cached_bytes = 0

    def distances_to(self, targets: np.ndarray) -> np.ndarray:
        """(targets, nodes) weighted distances from every node to each target."""
        from scipy.sparse.csgraph import dijkstra

        return np.asarray(dijkstra(self.reverse, directed=True, indices=targets))

    def dags(self, targets: np.ndarray) -> list[_Dag]:
        """The shortest-path DAG towards each of a batch of targets (cached up to
        :data:`DAG_CACHE_BYTES`: phases reuse them)."""
        missing = np.array([t for t in targets.tolist() if t not in self._dags], np.int64)
        made = {}
        if len(missing):
            for target, dist in zip(missing.tolist(), self.distances_to(missing), strict=True):
                dag = made[target] = _Dag(self, dist)
                if self._cached_bytes + dag.nbytes <= DAG_CACHE_BYTES:
                    self._dags[target] = dag
                    self._cached_bytes += dag.nbytes
        return [self._dags.get(t) or made[t] for t in targets.tolist()]


class _Dag:
    """Distances to one destination and the arcs on its shortest paths, by level."""

    def __init__(self, graph: _Graph, dist: np.ndarray) -> None:
        self.dist = dist
        finite = np.isfinite(dist[graph.src])
        arcs = np.flatnonzero(finite & (dist[graph.src] == graph.weight + dist[graph.dst]))
        level = dist[graph.src[arcs]]
        order = np.argsort(-level, kind="stable")
        self.arcs = arcs[order]
        self.bounds = np.flatnonzero(np.diff(level[order])) + 1
        cables = graph.cables[self.arcs]
        out = np.bincount(graph.src[self.arcs], weights=cables, minlength=graph.n)
        self.share = cables / out[graph.src[self.arcs]]

    @property
    def nbytes(self) -> int:
        """Memory held, bytes."""
        return self.dist.nbytes + self.arcs.nbytes + self.bounds.nbytes + self.share.nbytes


def route_general(fabric: Fabric, phase: Phase, *, routing: str = "ecmp",
                  seed: int = 0, qps: int = QPS, hash_scaleup: bool = False) -> Routed:
    """Route on any fabric: exact shortest-path routing per destination.

    Under hash routing each flow is ``qps`` queue pairs hashed on their own; a choice
    among scale-up links only (in-system switch chips, supernode levels, a torus) is
    split evenly by cables, as ECMP does, unless ``hash_scaleup``.

    Raises
    ------
    RoutingError
        When destinations x live arcs exceed :data:`GENERAL_ROUTER_MAX_WORK`.
    """
    graph = _graph(fabric)
    link_bytes = np.zeros(len(fabric.links))
    hops = np.zeros(phase.flows, dtype=np.int64)
    unroutable: list[np.ndarray] = []
    targets, flow_target = np.unique(phase.dst, return_inverse=True)
    work = len(targets) * len(graph.src)
    if work > GENERAL_ROUTER_MAX_WORK:
        raise RoutingError(
            f"routing {len(targets):,} destinations over {len(graph.src):,} arcs needs the"
            f" general router (failed parts, or a fabric the structured router does not"
            f" cover): {work:.2g} arc visits, more than its limit of"
            f" {GENERAL_ROUTER_MAX_WORK:.2g}; use a smaller design or fewer ranks")
    order = np.argsort(flow_target, kind="stable")
    starts = np.searchsorted(flow_target[order], np.arange(len(targets) + 1))
    for first in range(0, len(targets), _DEST_BATCH):
        batch = np.arange(first, min(first + _DEST_BATCH, len(targets)))
        dags = graph.dags(targets[batch])
        walkers = []
        for k, dag in zip(batch.tolist(), dags, strict=True):
            flows = order[starts[k]:starts[k + 1]]
            source_dist = dag.dist[phase.src[flows]]
            lost = ~np.isfinite(source_dist)
            unroutable.append(flows[lost])
            flows = flows[~lost]
            if not len(flows):
                continue
            hops[flows] = (source_dist[~lost] % TRANSIT_PENALTY_HOPS // HOP_COST).astype(
                np.int64)
            if routing == "ecmp":
                _push(graph, dag, phase.src[flows], phase.bytes[flows], link_bytes)
            else:
                walkers.append(flows)
        if walkers:
            flows = np.concatenate(walkers)
            distances = np.stack([dag.dist for dag in dags])
            _walk(graph, distances, flow_target[flows] - first, flows, phase, routing, seed,
                  link_bytes, qps=qps if routing == "hash" else 1,
                  even_scaleup=routing == "hash" and not hash_scaleup)
    lost_flows = np.concatenate(unroutable) if unroutable else np.zeros(0, np.int64)
    return Routed(link_bytes, hops, np.sort(lost_flows), "general")


def _push(graph: _Graph, dag: _Dag, sources: np.ndarray, volumes: np.ndarray,
          link_bytes: np.ndarray) -> None:
    """Push demands down the shortest-path DAG, split by cables at every node."""
    carried = np.bincount(sources, weights=volumes, minlength=graph.n)
    for part in np.split(np.arange(len(dag.arcs)), dag.bounds):
        arcs = dag.arcs[part]
        flow = carried[graph.src[arcs]] * dag.share[part]
        np.add.at(link_bytes, graph.rows[arcs], flow)
        np.add.at(carried, graph.dst[arcs], flow)


def _walk(graph: _Graph, distances: np.ndarray, target_index: np.ndarray, flows: np.ndarray,
          phase: Phase, routing: str, seed: int, link_bytes: np.ndarray, *, qps: int,
          even_scaleup: bool) -> None:
    """Walk every queue pair at once (``qps`` per flow, hashed as :func:`subflows` says):
    at each node pick a shortest-path arc by hash or d-mod-k, or, with
    ``even_scaleup``, split over the arcs by cables where they are all scale-up links.
    ``distances`` is (targets, nodes); ``target_index`` per flow."""
    take, ids = subflows(flows, qps)
    at = phase.src[flows][take]
    dst = phase.dst[flows][take]
    target = target_index[take]
    amount = phase.bytes[flows][take] / qps
    stride = np.ones(len(ids), dtype=np.int64)
    while True:
        live = at != dst
        if not live.all():
            at, dst, target, amount, stride, ids = (
                a[live] for a in (at, dst, target, amount, stride, ids))
        if not len(at):
            return
        starts, ends = graph.indptr[at], graph.indptr[at + 1]
        width = int((ends - starts).max())
        cand = starts[:, None] + np.arange(width)[None, :]
        valid = cand < ends[:, None]
        cand = np.where(valid, cand, 0)
        here = distances[target, at][:, None]
        there = distances[target[:, None], graph.dst[cand]]
        on_dag = valid & (here == graph.weight[cand] + there)
        weights = np.where(on_dag, graph.cables[cand], 0)
        pick = choose(routing, seed, ids, at, dst, stride, weights)
        stride = stride * np.maximum(1, (weights > 0).sum(axis=1))
        row = np.arange(len(at))
        share = amount
        even = np.zeros(len(at), bool)
        if even_scaleup:
            even = ~(on_dag & ~graph.scaleup[cand]).any(axis=1)
            if even.any():
                hashed = np.flatnonzero(~even)
                er, ec = np.nonzero(on_dag & even[:, None])
                row = np.concatenate([hashed, er])
                pick = np.concatenate([pick[hashed], ec])
                share = np.concatenate([amount[hashed], amount[er] * weights[er, ec]
                                        / weights[er].sum(axis=1)])
        arc = cand[row, pick]
        np.add.at(link_bytes, graph.rows[arc], share)
        at, dst, target, amount, stride, ids = (
            graph.dst[arc], dst[row], target[row], share, stride[row], ids[row])
        if even.any():
            at, dst, target, amount, stride, ids = _merge(at, dst, target, amount, stride,
                                                          ids, graph.n)


def _merge(at: np.ndarray, dst: np.ndarray, target: np.ndarray, amount: np.ndarray,
           stride: np.ndarray, ids: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
    """One walker per (queue pair, node): the parts of a QP that met again hash alike."""
    keys, first, inverse = np.unique(ids * n + at, return_index=True, return_inverse=True)
    total = np.bincount(inverse, weights=amount, minlength=len(keys))
    return at[first], dst[first], target[first], total, stride[first], ids[first]


def _graph(fabric: Fabric) -> _Graph:
    return fabric.derived(_Graph)
