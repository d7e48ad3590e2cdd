"""Shortest-path DAGs towards a destination found from forward searches: one Dijkstra
from each source of its flows instead of one towards it over the reversed graph.

The general router's DAG of a destination ``t``, walked from a few sources, is the set
of arcs on shortest paths from those sources to ``t``. With ``d_s`` the distances from a
source ``s``, an arc ``u -> v`` lies on a shortest ``s -> t`` path exactly when
``d_s(u) + w = d_s(v)`` and ``t`` can be reached from ``v`` over such arcs; on such a
path a node's distance to ``t`` is ``d_s(t) - d_s(v)``, exact (hop costs are whole
numbers held as floats). So the arcs, the distances the DAG's levels and the hash walk
read, and the nodes they touch are those of the search towards ``t``, bit for bit, and
flows from one source to many destinations (an accelerator whose NIC failed sending to
its peers) cost one search. Which searches to run, per destination or per source, is a
cover of the (source, destination) pairs (:func:`pair_cover`).

Only where no two arcs join the same ends: with parallel arcs the reversed graph's
costs are those of scipy's sparse constructor, which adds duplicates up.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from topomodel.arrays import distinct
from topomodel.fabric.arcs import positions


def pair_cover(sources: np.ndarray, targets: np.ndarray, known: np.ndarray
               ) -> np.ndarray:
    """The targets to search towards (the rest are reached from searches from their
    sources): of the pairs ``(sources[k], targets[k])`` (distinct pairs), the targets in a
    small cover of every pair by a searched target or a searched source, where the
    sources marked ``known`` (one bool per pair) are searched already.

    The cover is greedy (the target or source in the most pairs not yet covered, a
    target on a tie) and trimmed (a source whose targets are all searched, then a target
    whose sources all are, dropped); where it needs more searches than there are
    targets, every target is searched. Returns the searched targets, sorted.

    Examples
    --------
    One node sending to three and receiving from three: two searches, not four.

    >>> src, dst = np.array([0, 0, 0, 1, 2, 3]), np.array([1, 2, 3, 0, 0, 0])
    >>> pair_cover(src, dst, np.zeros(6, bool)).tolist()
    [0]
    >>> pair_cover(np.array([5, 6]), np.array([1, 1]), np.zeros(2, bool)).tolist()
    [1]
    """
    source_ids, source_of = np.unique(sources, return_inverse=True)
    target_ids, target_of = np.unique(targets, return_inverse=True)
    searched_source = np.zeros(len(source_ids), bool)
    searched_source[source_of[known]] = True
    free = searched_source.copy()
    searched_target = np.zeros(len(target_ids), bool)
    covered = known.copy()
    while not covered.all():
        left = ~covered
        by_target = np.bincount(target_of[left], minlength=len(target_ids))
        by_source = np.bincount(source_of[left], minlength=len(source_ids))
        if by_target.max() == 1 and by_source.max() == 1:  # lone pairs: their targets
            searched_target[target_of[left]] = True
            break
        if by_target.max() >= by_source.max():
            best = int(by_target.argmax())
            searched_target[best] = True
            covered |= target_of == best
        else:
            best = int(by_source.argmax())
            searched_source[best] = True
            covered |= source_of == best
    # a source only searched for targets searched anyway is not needed
    needed = np.bincount(source_of, weights=~searched_target[target_of],
                         minlength=len(source_ids)) > 0
    searched_source &= needed | free
    # a target whose sources are all searched is reached from them
    unreached = np.bincount(target_of, weights=~searched_source[source_of],
                            minlength=len(target_ids)) > 0
    searched_target &= unreached
    if (searched_source & ~free).sum() + searched_target.sum() > len(target_ids):
        return target_ids
    return target_ids[searched_target]


class Into:
    """The arcs into each node, for walking back: the link rows by destination
    (``rows``, CSR over nodes by ``indptr``), where link rows fall among the arcs
    (``arcs_of``) and, per arc, its source, destination and hop cost (infinite where
    failed)."""

    def __init__(self, indptr: np.ndarray, rows: np.ndarray,
                 arcs_of: Callable[[np.ndarray], np.ndarray], src: np.ndarray,
                 dst: np.ndarray, weight: np.ndarray) -> None:
        self.indptr, self.rows, self.arcs_of = indptr, rows, arcs_of
        self.src, self.dst, self.weight = src, dst, weight

    def arcs(self, nodes: np.ndarray) -> np.ndarray:
        """The arcs into ``nodes``, node by node."""
        return self.arcs_of(self.rows[positions(self.indptr[nodes], self.indptr[nodes + 1])])


def on_paths(distance_from: np.ndarray, target: int, into: Into
             ) -> tuple[np.ndarray, np.ndarray]:
    """The arcs on shortest paths to ``target`` from the source whose distances (hop
    costs) ``distance_from`` gives (finite at ``target``), and the nodes they and
    ``target`` touch: walked back from ``target`` level by level over the arcs ``u -> v``
    with ``d(u) + w = d(v)``, each reached node's incoming arcs looked at once.
    Returns (arcs, unsorted; nodes, unsorted)."""
    seen = np.zeros(len(into.indptr) - 1, bool)
    frontier = np.array([target], np.int64)
    seen[frontier] = True
    nodes, found = [frontier], []
    while len(frontier):
        arcs = into.arcs(frontier)
        tails = into.src[arcs]
        on = distance_from[tails] + into.weight[arcs] == distance_from[into.dst[arcs]]
        found.append(arcs[on])
        behind = distinct(tails[on])
        frontier = behind[~seen[behind]]
        seen[frontier] = True
        nodes.append(frontier)
    return np.concatenate(found), np.concatenate(nodes)


def dag_from_sources(distances_from: dict[int, np.ndarray], target: int,
                     seeds: np.ndarray, into: Into
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The shortest-path DAG towards ``target`` from the distinct nodes ``seeds``, from
    their forward searches (``distances_from``: a node's distances, hop costs, by node):
    (distances to ``target``, hop costs: exact on the DAG's nodes and at every seed,
    infinite elsewhere; the DAG's arcs, ascending; which nodes it touches), as the
    reversed search and the walk from the seeds find them (see the module)."""
    n = len(into.indptr) - 1
    dist = np.full(n, np.inf)
    reach = np.zeros(n, bool)
    found = []
    for seed in seeds.tolist():
        ahead = distances_from[seed]
        total = ahead[target]
        if not np.isfinite(total):
            continue
        arcs, nodes = on_paths(ahead, target, into)
        found.append(arcs)
        reach[nodes] = True
        dist[nodes] = total - ahead[nodes]
    arcs = distinct(np.concatenate(found)) if found else np.zeros(0, np.int64)
    return dist, arcs, reach
