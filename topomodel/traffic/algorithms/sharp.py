"""SHARP (CollNet) in the scale-out switches: each rank's legs up to its leaves, one
aggregation root per group and plane, and the flows of case B of
:mod:`~topomodel.traffic.algorithms.innetwork` (whose docstring describes the
algorithm), made with sorts and run boundaries over numpy arrays."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from topomodel.arrays import category_codes, expand_matches
from topomodel.fabric.tables import Fabric
from topomodel.vocabulary import FAT_TREE_TIERS, NODE_KINDS

Flows = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""Flows as four arrays: source node, destination node, fraction of S, group."""

_ACC, _NIC, _SWITCH = (NODE_KINDS.index(k) for k in ("accelerator", "nic", "switch"))


@dataclass(frozen=True, eq=False)
class SharpArcs:
    """The arcs every CollNet/SHARP plan on a fabric reads, made once per fabric: host
    links (accelerator -> NIC) and NIC uplinks (NIC -> switch) sorted by their source,
    the switch-to-switch arcs one tier up, each switch's lowest upper neighbour, and the
    sorted (src, dst) keys of the upward arcs."""

    host_src: np.ndarray
    host_dst: np.ndarray
    up_src: np.ndarray
    up_dst: np.ndarray
    upward_src: np.ndarray
    upward_dst: np.ndarray
    first_up: np.ndarray
    adjacency: np.ndarray


def sharp_arcs(fabric: Fabric, lsrc: np.ndarray, ldst: np.ndarray, kind_src: np.ndarray,
               kind_dst: np.ndarray) -> SharpArcs:
    """The :class:`SharpArcs` of ``fabric`` from its live arcs (``lsrc`` -> ``ldst``)
    and the kinds of their ends (codes of :data:`~topomodel.vocabulary.NODE_KINDS`)."""
    n = len(fabric.node_arrays)

    def arcs_from(source: int, target: int) -> tuple[np.ndarray, np.ndarray]:
        rows = np.flatnonzero((kind_src == source) & (kind_dst == target))
        rows = rows[np.argsort(lsrc[rows], kind="stable")]
        return lsrc[rows], ldst[rows]

    level = category_codes(fabric.node_arrays["tier"], FAT_TREE_TIERS)
    below = level[lsrc]
    upward = (below >= 0) & (level[ldst] == below + 1)
    first_up = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(first_up, lsrc[upward], ldst[upward])
    first_up[first_up == np.iinfo(np.int64).max] = -1
    adjacency = np.sort(lsrc[upward].astype(np.int64) * n + ldst[upward])  # int32 ends
    return SharpArcs(*arcs_from(_ACC, _NIC), *arcs_from(_NIC, _SWITCH), lsrc[upward],
                     ldst[upward], first_up, adjacency)


def runs(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows ordered by ``keys`` (the first the major one; ties in row order), where
    each run of equal keys starts in that order, and each row's run number (in row
    order).

    Examples
    --------
    >>> order, starts, run = runs(np.array([2, 1, 2, 1]), np.array([0, 5, 0, 4]))
    >>> order.tolist(), starts.tolist(), run.tolist()
    ([3, 1, 0, 2], [0, 1, 2], [2, 1, 2, 0])
    """
    order = np.lexsort(keys[::-1])  # stable: equal keys keep their row order
    new = np.zeros(len(order), bool)
    new[:1] = True
    for key in keys:
        ordered = key[order]
        new[1:] |= ordered[1:] != ordered[:-1]
    run = np.empty(len(order), np.int64)
    run[order] = np.cumsum(new) - 1
    return order, np.flatnonzero(new), run


def run_sums(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The sum of each run of ``values`` (runs starting at ``starts``, ascending, the
    first at 0), added as pandas' group-by sum adds a sorted group's values (the
    stream's shares were that sum's: the same to the bit).

    Examples
    --------
    >>> run_sums(np.array([0.5, 0.25, 1.0]), np.array([0, 2])).tolist()
    [0.75, 1.0]
    """
    if not len(starts):
        return np.zeros(0)
    sums: np.ndarray = np.add.reduceat(values, starts)
    return sums


def sharp_plan(fabric: Fabric, arcs: SharpArcs, ranks: np.ndarray, rank_group: np.ndarray,
               capable: np.ndarray) -> tuple[tuple[int, str] | None, Flows, np.ndarray]:
    """Case B flows (rank -> leaf, leaf -> root), or the first group that cannot, and
    why; and each (group, plane)'s aggregation root, in group then plane order."""
    nodes = fabric.node_arrays
    failed: tuple[int, str] | None = None
    empty: Flows = (np.empty(0, np.int64),) * 2 + (np.empty(0), np.empty(0, np.int32))
    # rank -> NIC: its host links, else the NIC serving it (serving_rails: the nearest
    # holder's before it in its system, the rule the host links were wired by)
    which, idx = expand_matches(ranks, arcs.host_src)
    rank_pos, nic = which, arcs.host_dst[idx]
    has_host = np.zeros(len(ranks), bool)
    has_host[which] = True
    orphan = np.flatnonzero(~has_host)
    if len(orphan):
        serving = np.full(len(nodes), -1)
        serving[fabric.accelerators] = fabric.injection.nic
        extra = serving[ranks[orphan]]
        rank_pos = np.concatenate([rank_pos, orphan[extra >= 0]])
        nic = np.concatenate([nic, extra[extra >= 0]])
    # NIC -> leaf (one leg per plane), the legs in (rank, leaf) order
    which, idx = expand_matches(nic, arcs.up_src)
    pos, leaf = rank_pos[which], arcs.up_dst[idx]
    order = np.lexsort((leaf, pos))
    pos, leaf = pos[order], leaf[order]
    group = rank_group[pos]
    legs_per_rank = np.bincount(pos, minlength=len(ranks))
    if (legs_per_rank == 0).any():
        first = int(rank_group[np.argmin(legs_per_rank)])
        failed = (first, f"rank node {int(ranks[np.argmin(legs_per_rank)])} has no scale-out"
                         " NIC link")
    if failed is None and not capable[leaf].all():  # refused before the roots are sought
        bad = int(leaf[np.argmin(capable[leaf])])
        return ((int(group[np.argmin(capable[leaf])]), no_reduction(fabric, bad)), empty,
                np.empty(0, np.int64))
    fraction = 1.0 / legs_per_rank[pos]
    plane = nodes["plane"][leaf]
    by_rank_plane, starts, run = runs(pos, plane)
    place = np.empty(len(pos), np.int64)
    place[by_rank_plane] = np.arange(len(pos))
    portion = place - starts[run]  # the leg's place among its rank's legs on its plane
    # aggregation root per (group, plane): its first leaf's if it has one leaf, else a
    # spine (or core) above all its leaves
    by_plane, plane_starts, plane_of = runs(group, plane)
    planes_group = group[by_plane[plane_starts]]
    first_leaf = leaf[by_plane[plane_starts]]
    _, triple_starts, triple_of = runs(plane_of, leaf)  # distinct (group, plane, leaf)
    triple_rows = np.empty(len(triple_starts), np.int64)
    triple_rows[triple_of] = np.arange(len(leaf))  # a row of each (any: same values)
    triple_plane, triple_leaf = plane_of[triple_rows], leaf[triple_rows]
    leaves = np.bincount(triple_plane, minlength=len(plane_starts))
    spine = arcs.first_up[first_leaf]
    core = np.where(spine >= 0, arcs.first_up[np.maximum(spine, 0)], -1)
    linked = _linked(arcs.adjacency, len(nodes))
    via_spine = _all_per(linked(triple_leaf, spine[triple_plane]), triple_plane, len(spine))
    via_core = _all_per(_reaches(triple_leaf, core[triple_plane], arcs.upward_src,
                                 arcs.upward_dst, linked), triple_plane, len(spine))
    root = np.where(leaves == 1, first_leaf,
                    np.where(via_spine, spine, np.where(via_core, core, -1)))
    if failed is None and (root < 0).any():
        failed = (int(planes_group[np.argmax(root < 0)]),
                  "no single scale-out switch above all its leaves (aggregation root) was found")
    if failed is None:
        touched = np.concatenate([leaf, root])
        unable = touched[~capable[touched]]
        if len(unable):
            bad = int(unable[0])
            groups = np.concatenate([group, planes_group])
            failed = (int(groups[np.argmax(touched == bad)]), no_reduction(fabric, bad))
    if failed is not None:
        return failed, empty, np.empty(0, np.int64)
    # the leaf's reduced stream: one copy of each portion it receives, in group, leaf,
    # portion order
    by_portion, portion_starts, _ = runs(group, leaf, portion)
    most = np.maximum.reduceat(fraction[by_portion], portion_starts)
    heads = by_portion[portion_starts]  # a leg of each (group, leaf, portion)
    _, stream_starts, _ = runs(group[heads], leaf[heads])
    share = run_sums(most, stream_starts)
    stream = heads[stream_starts]  # a leg of each (group, leaf), in that order
    stream_root = root[plane_of[stream]]
    keep = leaf[stream] != stream_root
    flows = (np.concatenate([ranks[pos], leaf[stream][keep]]),
             np.concatenate([leaf, stream_root[keep]]),
             np.concatenate([fraction, share[keep]]),
             np.concatenate([group, group[stream][keep]]).astype(np.int32))
    return None, flows, root


def _linked(adjacency: np.ndarray, nodes: int) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """Whether each ``a[i]`` has an upward arc to ``b[i]`` (``adjacency``: the sorted
    keys ``src * nodes + dst`` of the upward arcs)."""
    def linked(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if not len(adjacency):
            return np.zeros(len(a), bool)
        keys = np.asarray(a).astype(np.int64) * nodes + b  # ends may be int32
        where = np.minimum(np.searchsorted(adjacency, keys), len(adjacency) - 1)
        found: np.ndarray = (b >= 0) & (adjacency[where] == keys)
        return found
    return linked


def _all_per(flags: np.ndarray, run: np.ndarray, count: int) -> np.ndarray:
    """Per run number below ``count``: whether every flag of its rows is set."""
    bad = np.zeros(count, bool)
    bad[run[~flags]] = True
    return ~bad


def no_reduction(fabric: Fabric, switch: int) -> str:
    """Why scale-out switch node ``switch`` does not reduce in the network."""
    nodes = fabric.node_arrays
    name, model = nodes["name"][switch], nodes["model"].labels()[switch]
    if getattr(fabric.catalog.entries.get(str(model)), "in_network_reduction", False):
        return (f"scale-out switch {name} ({model}) could reduce, but the design does not"
                " enable it (scaleout.in_network_reduction: true)")
    return f"scale-out switch {name} ({model}) has no in-network reduction"


def _reaches(leaf: np.ndarray, core: np.ndarray, up_src: np.ndarray, up_dst: np.ndarray,
             linked: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """Whether each leaf reaches its core through one of the spines it links up to (each
    distinct pair looked up once: the slices of a group share their leaves and core)."""
    width = int(max(leaf.max(initial=0), core.max(initial=0))) + 2
    pairs, back = np.unique(leaf.astype(np.int64) * width + (core + 1), return_inverse=True)
    leaf, core = pairs // width, pairs % width - 1
    order = np.argsort(up_src, kind="stable")
    sorted_src, sorted_dst = up_src[order], up_dst[order]
    which, idx = expand_matches(leaf, sorted_src)
    ok = linked(sorted_dst[idx], core[which])
    reached: np.ndarray = np.bincount(which, weights=ok, minlength=len(leaf)) > 0
    return reached[back.ravel()]
