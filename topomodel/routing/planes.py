"""The router around failures on flows that enter a Clos at one of several planes (a
NIC's ports into the fat-tree's planes, a system's chips into a supernode's planes):
each plane's (entry, exit) leaf pair, the live paths between them, and the bytes on the
arcs, as pieces for :func:`~topomodel.routing.pieces.link_bytes`.

The leaf pairs of every (flow, plane) entry are deduped once (a million and more
entries at 100k accelerators): by the leaves' rows in the Clos, so that on a fat-tree a
table finds them (:func:`~topomodel.arrays.sorted_distinct`); where every
entry crosses (the usual all-live case) no entry is picked out or masked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from topomodel.arrays import sorted_distinct
from topomodel.routing.clos.live import LiveClimb, Survivors
from topomodel.routing.hashing import choose, queue_pairs, subflow_ids
from topomodel.routing.pieces import Piece, Rows


@dataclass(frozen=True, eq=False)
class Chosen:
    """What hash routing chose over the planes: each queue pair's plane (its column of
    the entry arcs, in queue-pair order: the flows not lost, ``qps`` each, as
    :func:`~topomodel.routing.hashing.queue_pairs` lists them), the distinct (entry,
    exit) leaf pairs of the (flow, plane) entries that cross, in node order, and each
    flow's row in the table of arcs into the entries (a queue pair's arc is that
    table's ``[entry[flow], pick]``)."""

    pick: np.ndarray
    pair_s: np.ndarray
    pair_d: np.ndarray
    entry: np.ndarray


# PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
def route_planes(view: Survivors, climb: LiveClimb, ids: np.ndarray, dst: np.ndarray,  # noqa: PLR0913
                 node: np.ndarray, volume: np.ndarray, lower_s: np.ndarray,
                 lower_d: np.ndarray, ok: np.ndarray, weights: np.ndarray,
                 arcs: tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
                 routing: str, seed: int, qps: int,
                 groups: tuple[np.ndarray, np.ndarray] | None = None
                 ) -> tuple[list[Piece], np.ndarray, np.ndarray, np.ndarray, Chosen | None]:
    """Flows that enter a Clos at one of several planes (a NIC's ports, a system's chips):
    ``lower_s``/``lower_d`` (flows, planes) are the plane's entry and exit nodes,
    ``arcs`` the arcs into the entry and out of the exit (each a table and the flows'
    rows in it: ``table[index]`` (flows, planes)), ``ok`` whether those are live,
    ``weights`` their cables, ``node`` where the plane is chosen. ``groups``: (each
    flow's group, one flow of each group) where flows of a group have the same rows of
    ``ok``, ``lower_s`` and ``lower_d``; then ``lower_s``/``lower_d`` are given per group
    (groups, planes) and the leaf pairs are found among the groups' entries
    (:func:`_grouped_pairs`).

    Returns the load (pieces for :func:`~topomodel.routing.pieces.link_bytes`), the
    extra hops inside the Clos per flow, the flows with no plane still joined (detours)
    and (flows, planes) whether the plane carries some of the flow (what its share of
    the flow depends on), and under hash routing the choices a plane patch reads
    (:class:`Chosen`; None under ECMP and d-mod-k)."""
    if groups is None:
        cross = ok & (lower_s != lower_d)
    else:
        cross_of = ok[groups[1]] & (lower_s != lower_d)  # per group
        cross = cross_of[groups[0]]
    # the (flow, plane) entries whose ends differ, as a (flows, planes) mask (None: all
    # of them): read and written through it in C order, as their flat indices would
    # list them, without those indices (8 bytes per entry where the mask is one)
    flat = None if cross.all() else cross
    del cross

    def crossing(a: np.ndarray) -> np.ndarray:
        return a.ravel() if flat is None else a[flat]

    if groups is None:
        pair_s, pair_d, inverse = leaf_pairs(climb, crossing(lower_s), crossing(lower_d),
                                             len(view.clos.domain))
    else:
        pair_s, pair_d, inverse = _grouped_pairs(climb, lower_s, lower_d, cross_of,
                                                 groups[0], flat, len(view.clos.domain))
    paths = climb.paths(pair_s, pair_d)
    joined = np.asarray(paths.ok.any(axis=1))
    # hops above the entry: 0 (same leaf, or no path), 2 (spine), 4 (core)
    climbed = np.where(joined, np.where(paths.cross, 4, 2), 0).astype(np.int8)
    if flat is None:
        usable = joined[inverse].reshape(ok.shape)
        extra = _most_per_row(climbed, inverse.reshape(ok.shape))
    else:
        usable = ok.copy()
        usable[flat] = joined[inverse]
        hops = np.zeros(ok.shape, np.int8)
        hops[flat] = climbed[inverse]
        extra = _most_per_row(hops, None)
        del hops
    lost: np.ndarray = (np.zeros(len(ok), bool) if flat is None and joined.all()
                        and ok.shape[1] else
                        ~_over_planes(np.logical_or, usable, np.zeros(len(ok), bool)))
    # the planes not usable carry nothing (zero cables); under hash and d-mod-k masked
    # a block of queue pairs at a time (:func:`_by_blocks`), not a (flows, planes) copy
    masked = None if usable.all() else usable
    enter, leave = arcs
    if routing == "ecmp":
        if masked is not None:
            weights = np.where(usable, weights, 0)
        cables = _over_planes(np.add, weights, np.zeros(len(ok), weights.dtype))
        part = weights / np.maximum(cables, 1)[:, None]
        part *= volume[:, None]
        # every plane's share of a flow one value (no plane masked, one cable count for
        # all): the arcs' bytes are those of one column, summed once per table row
        each = part[:, 0] if masked is None and _one_count(weights) else part
        pieces: list[Piece] = [Rows(*enter, each), Rows(*leave, each)]
        amount = np.bincount(inverse, crossing(part), len(pair_s))
        if len(pair_s):
            pieces += climb.even(pair_s, pair_d, amount, paths)
        return pieces, extra, lost, usable, None
    # the flows routed (None: every one, the usual case, numbered block by block
    # instead of a list of them all)
    keep = np.flatnonzero(~lost) if lost.any() else None
    split = queue_pairs(routing, ids[:0], qps)[2]
    pair_at: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
    if flat is None:  # every entry crosses: its leaf pair is read off its flat index
        width = ok.shape[1]
        pair_at = lambda row, pick: inverse[row * width + pick]  # noqa: E731
    elif len(pair_s):  # some entries cross
        # each entry's leaf pair (int32 where the pairs fit: the same values)
        pair_of = np.full(ok.shape, -1, np.int32 if len(pair_s) < 1 << 31 else np.int64)
        pair_of[flat] = inverse
        del inverse  # read through pair_of from here on
        pair_at = lambda row, pick: pair_of[row, pick]  # noqa: E731
    climbed_load = np.zeros(view.clos.n_links if pair_at is not None else 0)

    def climb_block(row: np.ndarray, chosen: np.ndarray, part: np.ndarray) -> None:
        """The block's queue pairs (flow ``row``, plane ``chosen``, bytes ``part`` each,
        in queue-pair order) that cross to another leaf, each up a spine (and core) of
        its leaf pair, added to ``climbed_load`` queue pair by queue pair in order."""
        assert pair_at is not None
        pair = pair_at(row, chosen)
        go = np.flatnonzero(pair >= 0)
        if not len(go):
            return
        up = row[go]
        stride = ((_cables(weights, masked, up) > 0).sum(axis=1) if routing == "dmodk"
                  else _ones(len(go)))
        # the queue pairs' hash ids, as queue_pairs numbers them: flow id x split + index
        # (a block starts at a flow, so a queue pair's index is its position mod split)
        qp_ids = ids[up].astype(np.int64) * split + go % split
        for piece in climb.picked(pair[go], pair_s, pair_d, paths, qp_ids,
                                  _destinations(routing, dst, up), part[go], stride,
                                  routing, seed):
            rows, amount = piece.plain() if isinstance(piece, Rows) else piece
            np.add.at(climbed_load, rows, amount)

    pick, pieces = _by_blocks(routing, seed, (ids, node, dst, volume, weights, masked),
                              keep, split, arcs,
                              climb_block if pair_at is not None and len(pair_s) else None)
    hit = np.flatnonzero(climbed_load)
    pieces.append((hit, climbed_load[hit]))
    chosen = Chosen(pick, pair_s, pair_d, enter[1]) if routing == "hash" else None
    return pieces, extra, lost, usable, chosen


_Flows = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]
"""What :func:`_by_blocks` reads per flow: ids, nodes, destinations, bytes, cables,
usable planes (None: all)."""

PICK_BLOCK = 1 << 18
"""Flows whose queue pairs are picked and summed at once: the hash's temporaries (some ten
arrays of 8 bytes per queue pair) stay a few tens of MB, reused block after block,
instead of fresh arrays over the 10 M queue pairs of a 98k-accelerator All-to-All (their
first touch, the kernel zeroing new pages, was much of its system time). They sit on
top of everything a degraded step holds, so they set its peak: ``goodput --workers 1``
on a 32k cut of the 98k NPU servers peaked at 957 MiB with 2**20 flows a block, 821 with
2**19 and 788 with 2**18, at the same CPU time (``benchmarks/README.md``, "verbs3")."""


def _by_blocks(routing: str, seed: int, flow: _Flows, keep: np.ndarray | None,
               split: int,
               arcs: tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
               climb: Callable[[np.ndarray, np.ndarray, np.ndarray], None] | None
               ) -> tuple[np.ndarray, list[Piece]]:
    """The queue pairs of the flows ``keep`` (``split`` each, in
    :func:`~topomodel.routing.hashing.queue_pairs`' order; None: every flow, in
    order; ``flow`` their ids, nodes
    where the plane is chosen, destinations, bytes, (flows, planes) cables and which
    planes are usable (None: all; the others' cables read as 0)), over
    blocks of :data:`PICK_BLOCK` flows: each one's plane by
    :func:`~topomodel.routing.hashing.choose` (a byte or two each) and the bytes on the
    entry and exit arcs (``arcs``) as pieces; ``climb(flow rows, planes, bytes)`` is
    handed each block's queue pairs in order (None: none climbs).

    A queue pair's pick reads its own row alone, so the picks are those of one call
    over every queue pair; each arc's bytes are added queue pair by queue pair in
    order (``np.add.at``, as one bincount over every queue pair adds them), so the
    sums are bit for bit those of a :class:`~topomodel.routing.pieces.Rows` piece over
    them all."""
    ids, node, dst, volume, weights, usable = flow
    small = np.int8 if weights.shape[1] <= np.iinfo(np.int8).max else np.int32
    count = len(ids) if keep is None else len(keep)
    pick = np.empty(count * split, small)
    sums = [np.zeros(table.size) for table, _ in arcs]
    # a read-only broadcast where every flow has the same cables (the scale-out NIC
    # arcs, all live): the same values as ``weights[row]`` without a (queue pairs,
    # planes) array; likewise the unit strides
    same = not any(weights.strides) and len(weights)
    spare: list[np.ndarray] = []  # a block's masked planes and cables, reused
    for lo in range(0, count, PICK_BLOCK):
        flows = (np.arange(lo, min(lo + PICK_BLOCK, count)) if keep is None
                 else keep[lo:lo + PICK_BLOCK])
        row, qp_ids = _block_queue_pairs(routing, ids, flows, split)
        candidates = np.broadcast_to(weights[:1], (len(row), weights.shape[1])) if same else (
            weights[row])
        if usable is not None:
            candidates = _masked(candidates, usable, row, spare)
        chosen = choose(routing, seed, qp_ids, node[row], _destinations(routing, dst, row),
                        _ones(len(row)), candidates)
        del candidates, qp_ids
        pick[lo * split:lo * split + len(row)] = chosen
        part = volume[row] / split
        for total, (table, index) in zip(sums, arcs, strict=True):
            np.add.at(total, index[row] * table.shape[1] + chosen, part)
        if climb is not None:
            climb(row, chosen, part)
    pieces: list[Piece] = []
    for total, (table, _) in zip(sums, arcs, strict=True):
        hit = np.flatnonzero(total)
        pieces.append((table.ravel()[hit], total[hit]))
    return pick, pieces


def _block_queue_pairs(routing: str, ids: np.ndarray, flows: np.ndarray, split: int
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Each queue pair's flow (a row of ``ids``) and hash id, for the flows ``flows``:
    ``flows[take]`` and the ids of :func:`~topomodel.routing.hashing.queue_pairs` (``take``
    its first value), the same values; under hash routing (``split`` queue pairs per
    flow, :func:`~topomodel.routing.hashing.subflows`) the rows repeated at once instead
    of a repeated index and a gather through it."""
    if routing == "hash":
        return np.repeat(flows, split), subflow_ids(ids[flows], split)
    take, qp_ids, _ = queue_pairs(routing, ids[flows], split)
    return flows[take], qp_ids


def _cables(weights: np.ndarray, usable: np.ndarray | None, row: np.ndarray,
            taken: bool = False) -> np.ndarray:
    """The rows ``row`` of ``weights`` (already taken where ``taken``) with the planes not
    ``usable`` (None: all usable) at 0 cables: ``np.where(usable, weights, 0)[row]``,
    the same values and type, without masking every flow's row."""
    rows = weights if taken else weights[row]
    return rows if usable is None else np.where(usable[row], rows, 0)


def _masked(rows: np.ndarray, usable: np.ndarray, row: np.ndarray,
            spare: list[np.ndarray]) -> np.ndarray:
    """:func:`_cables` of rows already taken (``rows``, (len(row), planes)), written into
    ``spare`` (a mask and cables arrays, made at the first, largest block and reused by
    the next ones, else a fresh (queue pairs, planes) pair of arrays each block): the
    same values and type, 0 where the plane is not usable, else the row's cables."""
    n = len(row)
    if not spare or len(spare[0]) < n:
        spare[:] = [np.empty((n, usable.shape[1]), bool),
                    np.empty((n, rows.shape[1]), rows.dtype)]
    mask, out = spare[0][:n], spare[1][:n]
    np.take(usable, row, axis=0, out=mask)
    out.fill(0)
    np.copyto(out, rows, where=mask)
    return out


def _destinations(routing: str, dst: np.ndarray, row: np.ndarray) -> np.ndarray:
    """``dst[row]``, the queue pairs' destinations, where the choice reads them (d-mod-k);
    under hash routing, which hashes the queue pair and the node alone
    (:func:`~topomodel.routing.hashing.choose`, :func:`~topomodel.routing.clos.live.rank_of`),
    a read-only broadcast of 0 in their place: no gather of a destination per queue pair
    (22 M of them, 8 bytes each, for the 98k NPU servers' relayed All-to-All)."""
    if routing == "hash":
        return np.broadcast_to(np.int64(0), (len(row),))
    return dst[row]


def _ones(n: int) -> np.ndarray:
    """``n`` int64 ones as a read-only broadcast of one (read, never written)."""
    return np.broadcast_to(np.int64(1), (n,))


def _most_per_row(values: np.ndarray, at: np.ndarray | None) -> np.ndarray:
    """Per row of ``at`` (flows, planes) of indices into ``values`` (small integers,
    int8), the largest value it reaches (at least 0) as int64, 0 for no planes:
    ``_over_planes(np.maximum, values[at], zeros)``, the same values, a plane's column
    of indices at a time in ``values``' type (no (flows, planes) array of them, no
    cast per element and plane) and cast once at the end. ``at`` None: ``values`` is
    itself (flows, planes), each row's own."""
    rows = values if at is None else at
    if not rows.shape[1]:
        return np.zeros(len(rows), np.int64)
    most = values[:, 0].copy() if at is None else values[at[:, 0]]
    for k in range(1, rows.shape[1]):
        np.maximum(most, values[:, k] if at is None else values[at[:, k]], out=most)
    return np.maximum(most, 0).astype(np.int64)


def _one_count(weights: np.ndarray) -> bool:
    """Whether ``weights`` (flows, planes) is one row broadcast (a zero row stride: the
    same cables for every flow) whose planes all carry the same cables."""
    return bool(weights.ndim == 2 and len(weights) and weights.strides[0] == 0
                and (weights[0] == weights[0, 0]).all())


def _over_planes(ufunc: np.ufunc, per_plane: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out`` combined with each column of ``per_plane`` (flows, planes) in turn by
    ``ufunc``, in place: a reduction over a handful of planes, column by column (numpy
    reduces a short last axis slowly); exact for the integer and boolean reductions it
    serves."""
    for column in per_plane.T:
        ufunc(out, column, out=out)
    return out


def even_by_group(view: Survivors, climb: LiveClimb, volume: np.ndarray,
                  lower_s: np.ndarray, lower_d: np.ndarray, weights: np.ndarray,
                  arcs: tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
                  groups: tuple[np.ndarray, np.ndarray]
                  ) -> tuple[list[Piece], np.ndarray, np.ndarray, np.ndarray] | None:
    """:func:`route_planes` under ECMP, bit for bit, where every flow's arcs to its
    entries and exits are live and a group's flows share their rows of ``lower_s``,
    ``lower_d`` and ``weights`` (each given per group, (groups, planes)): the planes, hops
    and leaf pairs are worked out per group, and the bytes a column (plane) at a time,
    without (flows, planes) arrays but the planes used; the extra hops as int8 (the
    same values as :func:`route_planes`' int64: 0, 2 or 4). None where two of the groups'
    (group, plane) entries share a leaf pair (then each pair's bytes are not one
    group's sum in flow order).

    A leaf pair's bytes over every (flow, plane) entry are added in flow order; where
    its entries are one group's on one plane, that is the group's bincount of the
    plane's column, in the same order. An arc into an entry (out of an exit) is one
    entry of its table, its bytes each flow's in flow order: the column's bincount over
    the table's rows, as :meth:`~topomodel.routing.pieces.Rows.sums` adds them."""
    group, one = groups
    cross_of = lower_s != lower_d
    pair_s, pair_d, inverse = leaf_pairs(climb, lower_s[cross_of], lower_d[cross_of],
                                          len(view.clos.domain))
    if len(pair_s) != len(inverse):
        return None
    paths = climb.paths(pair_s, pair_d)
    joined = np.asarray(paths.ok.any(axis=1))
    usable_of = np.ones(cross_of.shape, bool)
    usable_of[cross_of] = joined[inverse]
    hops_of = np.zeros(cross_of.shape, np.int8)
    hops_of[cross_of] = np.where(joined, np.where(paths.cross, 4, 2), 0)[inverse]
    # int8 per flow (the hops above the entry: 0, 2 or 4), as the section keeps them
    extra = _over_planes(np.maximum, hops_of, np.zeros(len(one), np.int8))[group]
    lost = ~_over_planes(np.logical_or, usable_of, np.zeros(len(one), bool))[group]
    if not usable_of.all():
        weights = np.where(usable_of, weights, 0)
    cables = _over_planes(np.add, weights, np.zeros(len(one), weights.dtype))
    split = weights / np.maximum(cables, 1)[:, None]
    at = np.full(cross_of.shape, -1)
    at[cross_of] = inverse
    amount = np.zeros(len(pair_s))
    sums = [np.zeros(table.shape) for table, _ in arcs]
    part = np.empty(len(group))
    summed: tuple[list[np.ndarray], np.ndarray] | None = None
    for k in range(split.shape[1]):
        # a plane whose shares are the last summed plane's (equal cables, no plane cut:
        # the usual case) has its bytes, and so its sums, bit for bit
        if summed is None or not _same_bits(split[:, k], split[:, k - 1]):
            np.take(np.ascontiguousarray(split[:, k]), group, out=part)
            part *= volume
            summed = ([np.bincount(index, part, len(table)) for table, index in arcs],
                      np.bincount(group, part, len(one)))
        for total, column in zip(sums, summed[0], strict=True):
            total[:, k] = column
        crossing = at[:, k] >= 0
        amount[at[crossing, k]] = summed[1][crossing]
    del part, summed  # a float per flow, freed before the climb's pieces are made (peak)
    pieces: list[Piece] = []
    for (table, _), total in zip(arcs, sums, strict=True):
        hit = np.flatnonzero(total)
        pieces.append((table.ravel()[hit], total.ravel()[hit]))
    if len(pair_s):
        pieces += climb.even(pair_s, pair_d, amount, paths)
    return pieces, extra, lost, usable_of[group]


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two float arrays of one shape hold the same bits (``-0.0`` is not ``0.0``)."""
    unsigned = f"u{a.dtype.itemsize}"
    return bool(np.array_equal(a.view(unsigned), b.view(unsigned)))


def _grouped_pairs(climb: LiveClimb, lower_s: np.ndarray, lower_d: np.ndarray,
                   cross_of: np.ndarray, group: np.ndarray, flat: np.ndarray | None,
                   nodes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`leaf_pairs` of the crossing (flow, plane) entries (``flat``, a (flows,
    planes) mask as in :func:`route_planes`; None: all of them) where each flow's
    entries are its group's (``lower_s``/``lower_d``/``cross_of`` (groups, planes),
    ``group`` per flow): the distinct pairs are those of the groups' crossing entries,
    the same set and so the same sorted pairs, found by sorting a group's entries once
    instead of every flow's (at 98k NPUs in 4K supernodes, 86 k system pairs of the EP
    All-to-All's 5.5 M flows over 7 planes: 0.6 M keys instead of 38 M); each entry's
    pair is its group's."""
    pair_s, pair_d, inverse = leaf_pairs(climb, lower_s[cross_of], lower_d[cross_of],
                                          nodes)
    at = np.full(cross_of.shape, -1, inverse.dtype)
    at[cross_of] = inverse
    per_flow = at[group]
    return pair_s, pair_d, per_flow.ravel() if flat is None else per_flow[flat]


def leaf_pairs(climb: LiveClimb, lower_s: np.ndarray, lower_d: np.ndarray, nodes: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct (entry, exit) node pairs of flat ``lower_s``, ``lower_d`` in node
    order (``nodes`` of them in the fabric) and each entry's pair: keyed by the leaves'
    rows in the Clos where every end is a leaf (rows follow node order, so the order is
    the same, and the key space small enough for a table on a fat-tree), else by node."""
    slot = climb.slot if climb.present else None
    if slot is not None and len(lower_s):
        leaves = np.flatnonzero(slot >= 0)
        width = len(leaves)
        # the rows (and keys) in int32 where the keys fit: the same values in half the
        # bytes over the millions of entries of a 100k-accelerator All-to-All
        small = width * width <= np.iinfo(np.int32).max
        rows = slot.astype(np.int32) if small else slot.astype(np.int64)
        row_s, row_d = rows[lower_s], rows[lower_d]
        if min(row_s.min(), row_d.min()) >= 0:
            row_s *= width
            row_s += row_d
            del row_d
            pairs, inverse = sorted_distinct(row_s, width * width)
            return leaves[pairs // width], leaves[pairs % width], inverse
    pairs, inverse = sorted_distinct(lower_s.astype(np.int64) * nodes + lower_d)
    return pairs // nodes, pairs % nodes, inverse
