"""The general router: any fabric, failures included; scipy shortest paths per
destination, flows pushed down the shortest-path DAG level by level."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from topomodel.errors import RouterLimit
from topomodel.fabric.arcs import arc_index, arcs_by_destination, positions
from topomodel.fabric.tables import Coded, Fabric, ignores_failures
from topomodel.inputs.records import documented
from topomodel.routing.forward import Into, dag_from_sources, pair_cover
from topomodel.routing.hashing import QPS, choose, subflows
from topomodel.routing.pathcost import (  # re-exported: the router's costs
    HOP_COST,
    HOST_LINK_COST,
    TRANSIT_PENALTY_HOPS,
    check_readable_hops,
)
from topomodel.routing.routed import Routed
from topomodel.traffic.phases import Phase
from topomodel.vocabulary import SCALEUP_TIERS

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
    hop. The DAGs are an upper bound: where destinations' flows start at few nodes,
    fewer forward searches may find them (:data:`FORWARD_SEARCHES`), each about as
    costly as one towards a destination."""
    graph = _graph(fabric)
    arcs = graph.live_arcs
    width = graph.out_degree()
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
        raise RouterLimit(f"{why}; use a smaller design, fewer ranks, fewer phases"
                           " (another algorithm) or ECMP routing")


DAG_CACHE_BYTES = 1 << 30
"""Memory the general router keeps shortest-path DAGs in for later phases; DAGs beyond it
are computed, used and dropped."""


FORWARD_SEARCHES = True
"""Whether the DAGs of destinations walked from few sources (:data:`DAG_WALK_MAX_SHARE`)
may be found from forward searches from those sources, where that takes fewer searches
than one towards each destination (:mod:`topomodel.routing.forward`): the same arcs,
distances and loads, bit for bit; False searches towards every destination (the tests'
oracle)."""


DAG_WALK_MAX_SHARE = 0.01
"""Largest share of a fabric's nodes a destination's flows may start at (with the nodes
its kept DAG already covers) for that DAG to be walked from them alone, level by level,
instead of built over every arc: a few detour flows on a 100k-accelerator fabric reach a
few thousand of its 6.5 M arcs, while a phase with flows from most nodes needs most of
the DAG anyway, which one pass over every arc builds faster. Either way the loads are
the same, bit for bit."""


@ignores_failures
class _Wiring:
    """Every arc of a fabric, failed or not, in the general router's order (by source,
    then destination, then link row) with its hop cost and cables, and the reversed
    graph over them in CSR form (the forward one is the arcs in order): made once and
    shared by the fabric's copies with failed parts
    (:meth:`~topomodel.fabric.tables.Fabric.with_failed`), which only mark their failed
    arcs (:class:`_Graph`, finding them with :meth:`arcs_of`)."""

    def __init__(self, fabric: Fabric) -> None:
        links = fabric.link_arrays
        src, dst = links["src"], links["dst"]
        n = self.n = len(fabric.node_arrays)
        self.is_acc = fabric.kind_mask("accelerator")
        tier = Coded(links["tier"])
        # whole hops, as floats (exact: small whole numbers): a failed arc's cost is
        # made infinite on a copy
        weight = np.where(self.is_acc[dst], float(HOP_COST + TRANSIT_PENALTY_HOPS),
                          float(HOP_COST))
        weight += HOST_LINK_COST * tier.equals("host")
        # the fabric's one stable sort: ties (parallel arcs) stay in link-row order
        arcs = fabric.derived(arc_index)
        self.rows = arcs.order  # link row of each arc
        self.parallel_arcs = arcs.parallel
        self.src, self.dst, self.weight = src[self.rows], dst[self.rows], weight[self.rows]
        self.cables = links["cables"][self.rows]
        scaleup = np.zeros(len(src), bool)
        for name in SCALEUP_TIERS:
            scaleup |= tier.equals(name)
        self.scaleup = scaleup[self.rows]
        self.indptr = _starts(src, n)
        self.index = np.int32 if max(n, len(src)) < np.iinfo(np.int32).max else np.int64
        # the reversed graph: row = an arc's destination, column = its source
        reverse = fabric.derived(arcs_by_destination)
        by_dst = reverse.order
        self.reverse_rows = by_dst  # link rows by destination (the shared index's)
        self.reverse_indices = src[by_dst].astype(self.index)
        self.reverse_indptr = _starts(dst, n).astype(self.index)
        self.reverse_data = weight[by_dst]
        self._keys, self._reverse_keys = arcs.keys, reverse.keys
        self._link_src, self._link_dst = src, dst
        self._arc_of_row: np.ndarray | None = None
        self._forward_csr: tuple[np.ndarray, np.ndarray] | None = None

    def arcs_of(self, rows: np.ndarray) -> np.ndarray:
        """Where the link rows ``rows`` fall in the router's order of arcs: found by
        their keys where no two arcs share one (a few failed rows, not an inverse of
        all 6.5 M at the 4K supernodes), else from the inverse of the order."""
        if not self.parallel_arcs:
            return np.searchsorted(self._keys, self._link_src[rows].astype(np.int64) * self.n
                                   + self._link_dst[rows])
        if self._arc_of_row is None:
            self._arc_of_row = _inverse(self.rows, self.index)
        return self._arc_of_row[rows]

    def reverse_entries_of(self, rows: np.ndarray) -> np.ndarray:
        """Where the link rows ``rows`` fall among the reversed graph's entries (by
        their keys: only where no two arcs share one, as the reversed CSR is)."""
        return np.searchsorted(self._reverse_keys, self._link_dst[rows].astype(np.int64) * self.n
                               + self._link_src[rows])

    def forward_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """The forward graph's CSR indices and row starts in scipy's index type (its
        entries are the arcs in order: no sort), made on the first forward search."""
        if self._forward_csr is None:
            self._forward_csr = (self.dst.astype(self.index), self.indptr.astype(self.index))
        return self._forward_csr


def _starts(ends: np.ndarray, n: int) -> np.ndarray:
    """Where each node's arcs start among arcs sorted by ``ends`` (their sources or
    destinations, in any order), CSR row starts: ``n + 1`` counts."""
    starts = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(ends, minlength=n), out=starts[1:])
    return starts


def _inverse(order: np.ndarray, dtype: type) -> np.ndarray:
    """The inverse of the permutation ``order``: where each element went."""
    out: np.ndarray = np.empty(len(order), dtype)
    out[order] = np.arange(len(order), dtype=dtype)
    return out


class _Graph:
    """CSR views of a fabric's arcs, for the general router: :class:`_Wiring`'s arrays
    (shared) with each failed arc's cost made infinite, so that no shortest path takes
    it; ``live_arcs`` counts the others."""

    def __init__(self, fabric: Fabric) -> None:
        wiring = fabric.derived(_Wiring)
        failed = np.flatnonzero(fabric.link_arrays["failed"])
        self.rows, self.src, self.dst = wiring.rows, wiring.src, wiring.dst
        self.cables, self.scaleup, self.indptr = wiring.cables, wiring.scaleup, wiring.indptr
        self.n, self.is_acc = wiring.n, wiring.is_acc
        self.live_arcs = len(self.src) - len(failed)
        self.weight = wiring.weight
        if len(failed):
            self.weight = wiring.weight.copy()
            self.weight[wiring.arcs_of(failed)] = np.inf
        # reversed graph (dst -> src) to get distances *to* a destination
        import scipy.sparse as sp  # loaded when a fabric needs the general router

        n = self.n
        if wiring.parallel_arcs:  # as the COO constructor makes it: duplicates added
            live = np.isfinite(self.weight)
            self.reverse = sp.csr_matrix((self.weight[live], (self.dst[live], self.src[live])),
                                         shape=(n, n))
        else:
            data = wiring.reverse_data
            if len(failed):
                data = data.copy()
                data[wiring.reverse_entries_of(failed)] = np.inf
            self.reverse = sp.csr_matrix(
                (data, wiring.reverse_indices, wiring.reverse_indptr), shape=(n, n))
        self._wiring = wiring
        self._forward: Any = None  # the forward graph, made on the first forward search
        self.into = Into(wiring.reverse_indptr, wiring.reverse_rows, wiring.arcs_of,
                         self.src, self.dst, self.weight)
        self._dags: dict[int, _Dag] = {}
        self._from: dict[int, np.ndarray] = {}  # distances from a source, kept
        self._cached_bytes = 0

    def out_degree(self) -> int:
        """The most live arcs out of one node."""
        live = np.isfinite(self.weight)
        return int(np.bincount(self.src[live], minlength=1).max()) if live.any() else 0

    def distances_to(self, targets: np.ndarray) -> np.ndarray:
        """(targets, nodes) weighted distances from every node to each target."""
        from scipy.sparse.csgraph import dijkstra

        return np.asarray(dijkstra(self.reverse, directed=True, indices=targets))

    def distances_from(self, sources: np.ndarray) -> np.ndarray:
        """(sources, nodes) weighted distances from each source to every node."""
        import scipy.sparse as sp
        from scipy.sparse.csgraph import dijkstra

        if self._forward is None:
            self._forward = sp.csr_matrix((self.weight, *self._wiring.forward_csr()),
                                          shape=(self.n, self.n))
        return np.asarray(dijkstra(self._forward, directed=True, indices=sources))

    def dags(self, targets: np.ndarray,
             sources: Sequence[np.ndarray] | None = None) -> list[_Dag]:
        """The shortest-path DAG towards each of a batch of targets, over every node or
        (``sources``: per target, the nodes its flows start at) over those the flows
        from ``sources`` reach, where they are few (:data:`DAG_WALK_MAX_SHARE`); cached
        up to :data:`DAG_CACHE_BYTES`: phases reuse them."""
        wanted = targets.tolist()
        starts: list[np.ndarray | None] = (
            [None] * len(wanted) if sources is None else list(sources))
        kept = [self._dags.get(t) for t in wanted]
        missing = [i for i, (dag, seeds) in enumerate(zip(kept, starts, strict=True))
                   if dag is None or not dag.covers(seeds)]
        walked: dict[int, np.ndarray | None] = {}  # per missing target, its seeds
        for i in missing:
            old, seeds = kept[i], starts[i]
            if seeds is not None:
                seeds = np.unique(seeds if old is None or old.seeds is None
                                  else np.concatenate([seeds, old.seeds]))
            walk = seeds is not None and len(seeds) <= DAG_WALK_MAX_SHARE * self.n
            walked[i] = seeds if walk else None
        # a DAG needs new distances unless its kept one has them from every node
        blind = [i for i in missing if (kept_dag := kept[i]) is None or not kept_dag.complete]
        ahead = self._searched_from(
            {wanted[i]: seeds for i in blind if (seeds := walked[i]) is not None})
        fresh = [i for i in blind if wanted[i] not in ahead]
        distances = dict(zip(fresh, self.distances_to(np.array(
            [wanted[i] for i in fresh], np.int64))
            if fresh else [], strict=True))
        out = list(kept)
        for i in missing:
            old, seeds = kept[i], walked[i]
            if wanted[i] in ahead:
                assert seeds is not None
                dist, arcs, reach = dag_from_sources(ahead[wanted[i]], wanted[i], seeds,
                                                     self.into)
                dag = out[i] = _Dag(self, dist, seeds, (arcs, reach))
            else:
                dist = distances[i] if i in distances else cast("_Dag", old).dist
                dag = out[i] = _Dag(self, dist, seeds)
            self._keep(wanted[i], dag)
        return [dag for dag in out if dag is not None]

    def _searched_from(self, seeds_of: dict[int, np.ndarray]
                       ) -> dict[int, dict[int, np.ndarray]]:
        """Of the targets ``seeds_of`` names (each with the few nodes its DAG is walked
        from), those whose DAGs are better found by forward searches from their seeds
        (:func:`~topomodel.routing.forward.pair_cover`: fewer searches), with the
        distances from every seed of theirs (by source node; searched here where not
        kept). Empty without :data:`FORWARD_SEARCHES` or with parallel arcs (see
        :mod:`topomodel.routing.forward`)."""
        if not FORWARD_SEARCHES or not seeds_of or self._wiring.parallel_arcs:
            return {}
        targets = np.repeat(np.fromiter(seeds_of, np.int64, len(seeds_of)),
                            [len(seeds) for seeds in seeds_of.values()])
        sources = np.concatenate(list(seeds_of.values())).astype(np.int64)
        known = np.fromiter((s in self._from for s in sources.tolist()), bool, len(sources))
        searched = pair_cover(sources, targets, known)
        forward = ~np.isin(targets, searched)
        if not forward.any():
            return {}
        needed = np.unique(sources[forward]).tolist()
        new = [s for s in needed if s not in self._from]
        found = dict(zip(new, self.distances_from(np.array(new, np.int64)) if new else [],
                         strict=True))
        for source, dist in found.items():
            if self._cached_bytes + dist.nbytes <= DAG_CACHE_BYTES:
                self._from[source] = dist
                self._cached_bytes += dist.nbytes
        from_source = {s: found[s] if s in found else self._from[s] for s in needed}
        return dict.fromkeys(np.unique(targets[forward]).tolist(), from_source)

    def _keep(self, target: int, dag: _Dag) -> None:
        """Keep ``dag`` for later phases, in place of the one kept for ``target``, while
        the cache holds :data:`DAG_CACHE_BYTES` or less."""
        old = self._dags.get(target)
        held = self._cached_bytes - (old.nbytes if old is not None else 0)
        if held + dag.nbytes <= DAG_CACHE_BYTES:
            self._dags[target] = dag
            self._cached_bytes = held + dag.nbytes


class _Dag:
    """Distances to one destination and the arcs on its shortest paths, by level: every
    such arc, or (``seeds`` given) those on a shortest path from one of the nodes
    ``seeds`` (distinct), whose nodes ``reach`` marks.

    ``found``, the arcs (ascending) and ``reach`` already found from forward searches
    (:func:`~topomodel.routing.forward.dag_from_sources`), whose ``dist`` is exact on the
    DAG's nodes and the seeds only (``complete`` False): where else a search towards the
    destination would find a finite distance, it is infinite."""

    def __init__(self, graph: _Graph, dist: np.ndarray, seeds: np.ndarray | None = None,
                 found: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        self.dist = dist
        self.seeds = seeds
        self.reach: np.ndarray | None = None
        self.complete = found is None
        if found is not None:
            arcs, self.reach = found
        elif seeds is None:
            finite = np.isfinite(dist[graph.src])
            arcs = np.flatnonzero(finite & (dist[graph.src] == graph.weight + dist[graph.dst]))
        else:
            arcs, self.reach = _reached(graph, dist, seeds)
        # the arcs in graph order, then by level: a subset keeps the whole DAG's order
        level = dist[graph.src[arcs]]
        order = np.argsort(-level, kind="stable")
        self.arcs = arcs[order]
        self.bounds = np.flatnonzero(np.diff(level[order])) + 1
        cables = graph.cables[self.arcs]
        out = np.bincount(graph.src[self.arcs], weights=cables, minlength=graph.n)
        self.share = cables / out[graph.src[self.arcs]]

    def covers(self, seeds: np.ndarray | None) -> bool:
        """Whether this DAG holds every shortest-path arc from ``seeds`` (None: every node)."""
        return self.reach is None or (seeds is not None and bool(self.reach[seeds].all()))

    @property
    def nbytes(self) -> int:
        """Memory held, bytes."""
        held = self.dist.nbytes + self.arcs.nbytes + self.bounds.nbytes + self.share.nbytes
        if self.seeds is not None and self.reach is not None:
            held += self.seeds.nbytes + self.reach.nbytes
        return held


def _reached(graph: _Graph, dist: np.ndarray, seeds: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """The shortest-path arcs (towards the target of ``dist``) from the distinct nodes
    ``seeds``, ascending, and which nodes they and ``seeds`` touch: walked level by level
    from the seeds, each reached node's arcs looked at once."""
    reach = np.zeros(graph.n, bool)
    frontier = seeds[np.isfinite(dist[seeds])]
    reach[frontier] = True
    found = []
    while len(frontier):
        arcs = positions(graph.indptr[frontier], graph.indptr[frontier + 1])
        arcs = arcs[dist[graph.src[arcs]] == graph.weight[arcs] + dist[graph.dst[arcs]]]
        found.append(arcs)
        ahead = np.unique(graph.dst[arcs])
        frontier = ahead[~reach[ahead]]
        reach[frontier] = True
    return np.sort(np.concatenate(found)) if found else np.zeros(0, np.int64), reach


def route_general(fabric: Fabric, phase: Phase, *, routing: str = "ecmp",
                  seed: int = 0, qps: int = QPS, hash_scaleup: bool = False,
                  numbers: np.ndarray | None = None) -> Routed:
    """Route on any fabric: exact shortest-path routing per destination.

    Under hash routing each flow is ``qps`` queue pairs hashed on their own; a choice
    among scale-up links only (in-system switch chips, supernode levels, a torus) is
    split evenly by cables, as ECMP does, unless ``hash_scaleup``. A flow hashes as its
    number: its index in ``phase``, or its entry of ``numbers`` (the flows of a larger
    phase, routed as they would be there).

    Raises
    ------
    RoutingError
        When destinations x live arcs exceed :data:`GENERAL_ROUTER_MAX_WORK`
        (:class:`~topomodel.errors.RouterLimit`), or a destination's paths could have
        :data:`READABLE_HOPS` hops or more (:func:`check_readable_hops`).
    """
    graph = _graph(fabric)
    link_bytes = np.zeros(len(fabric.link_arrays))
    hops = np.zeros(phase.flows, dtype=np.int64)
    unroutable: list[np.ndarray] = []
    targets, flow_target = np.unique(phase.dst, return_inverse=True)
    work = len(targets) * graph.live_arcs
    if work > GENERAL_ROUTER_MAX_WORK:
        raise RouterLimit(
            f"routing {len(targets):,} destinations over {graph.live_arcs:,} arcs needs the"
            f" general router (failed parts, or a fabric the structured router does not"
            f" cover): {work:.2g} arc visits, more than its limit of"
            f" {GENERAL_ROUTER_MAX_WORK:.2g}; use a smaller design or fewer ranks")
    order = np.argsort(flow_target, kind="stable")
    starts = np.searchsorted(flow_target[order], np.arange(len(targets) + 1))
    for first in range(0, len(targets), _DEST_BATCH):
        batch = np.arange(first, min(first + _DEST_BATCH, len(targets)))
        dags = graph.dags(targets[batch], [phase.src[order[starts[k]:starts[k + 1]]]
                                           for k in batch.tolist()])
        walkers = []
        for k, dag in zip(batch.tolist(), dags, strict=True):
            flows = order[starts[k]:starts[k + 1]]
            source_dist = dag.dist[phase.src[flows]]
            lost = ~np.isfinite(source_dist)
            unroutable.append(flows[lost])
            flows = flows[~lost]
            if not len(flows):
                continue
            check_readable_hops(len(dag.bounds) + 1, int(targets[k]))
            hops[flows] = (source_dist[~lost] % TRANSIT_PENALTY_HOPS % HOST_LINK_COST
                           // HOP_COST).astype(np.int64)
            if routing == "ecmp":
                _push(graph, dag, phase.src[flows], phase.bytes[flows], link_bytes)
            else:
                walkers.append(flows)
        if walkers:
            flows = np.concatenate(walkers)
            distances = np.stack([dag.dist for dag in dags])
            _walk(graph, distances, flow_target[flows] - first, flows, phase, routing, seed,
                  link_bytes, numbers=flows if numbers is None else numbers[flows],
                  qps=qps if routing == "hash" else 1,
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


# PLR0913: one computation's arrays and options passed on as they are
def _walk(graph: _Graph, distances: np.ndarray, target_index: np.ndarray, flows: np.ndarray,  # noqa: PLR0913
          phase: Phase, routing: str, seed: int, link_bytes: np.ndarray, *,
          numbers: np.ndarray, qps: int, even_scaleup: bool) -> None:
    """Walk every queue pair at once (``qps`` per flow, hashed as :func:`subflows` says
    on the flows' ``numbers``): at each node pick a shortest-path arc by hash or
    d-mod-k, or, with ``even_scaleup``, split over the arcs by cables where they are all
    scale-up links. ``distances`` is (targets, nodes); ``target_index`` per flow."""
    take, ids = subflows(numbers, qps)
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
