"""The scale-out section of the router around failures on a copy whose failed parts sit
inside the fat-tree's planes (a spine, a core, a leaf - spine or spine - core link),
under hash routing: the intact section, with the failed planes' switch links routed
again for the queue pairs that picked those planes.

Each plane of a fat-tree is its own Clos component (its leaves, spines and cores: no
switch link joins two planes). Hash routing picks each queue pair's plane among the
flow's usable planes (:func:`~topomodel.routing.planes.route_planes`): those whose NIC
arcs and host links are live and whose two leaves are still joined. A failure inside a
plane leaves every NIC arc and host link live; where it also leaves every (entry, exit)
leaf pair of the section joined as before, every flow's usable planes are unchanged,
so every queue pair picks the same plane as with every arc live, and the flows' hops
and lost flows are the same. A switch link of a plane then carries only the queue pairs
that picked that plane, in the same order: outside the failed planes every link gets
the same bytes in the same order (the kept intact section's sums hold there bit for
bit), and on the failed planes' switch links the copy's sums over those queue pairs
replace them. A failed NIC arc, leaf or host link changes some flows' planes (their
bytes move to other planes): such copies are routed whole, as are ECMP and d-mod-k
(which split or pick differently).
"""

from __future__ import annotations

import numpy as np

from topomodel.fabric.tables import Fabric, ignores_failures
from topomodel.routing.clos.live import LiveClimb, Paths, Survivors, intact_view
from topomodel.routing.clos.paths import scaleout_chosen
from topomodel.routing.pieces import Rows
from topomodel.routing.sections import failed_rows, intact_section
from topomodel.traffic.phases import Phase
from topomodel.vocabulary import SCALE_OUT_TIERS

PLANE_TIERS = ("spine", "core")
"""The scale-out link tiers inside a plane: leaf - spine and spine - core arcs. A failed
row of another scale-out tier (a host link, a NIC - leaf arc) changes flows' planes."""

BLOCK = 1 << 20
"""Queue pairs handled at once where a pass over all of them needs only small
temporaries (a million: some 8 MB per int64 array, reused, instead of arrays over the
10 M queue pairs of a 98k-accelerator All-to-All)."""


class _Planes:
    """The fat-tree's Clos components: ``node`` per node (-1: in none), ``row`` per link
    row of :data:`PLANE_TIERS` (-1 for others), ``entry`` per row and column of the
    NICs' uplink table (the component of the leaf that arc reaches), ``count``;
    ``scaleout`` the link rows of every scale-out tier; and ``column`` per row of that
    table and component, the first column whose arc reaches it (0 where none does)."""

    def __init__(self, node: np.ndarray, row: np.ndarray, entry: np.ndarray,
                 count: int, scaleout: np.ndarray) -> None:
        self.node, self.row, self.entry, self.count = node, row, entry, count
        self.scaleout = scaleout
        self.column = first_columns(entry, count)


def first_columns(entry: np.ndarray, count: int) -> np.ndarray:
    """Per row of ``entry`` (rows, columns) of components (-1: none) and per component
    of ``count``, the first column holding it, 0 where none does: for a row ``r`` and
    component ``c``, ``np.argmax(entry[r] == c)``, the same values, looked up in a
    (rows, components) table instead of a (queue pairs, columns) comparison and its
    arg-max per queue pair (int8 where the columns fit, as the picks are).

    Examples
    --------
    >>> entry = np.array([[1, 0, 1], [-1, 2, 2]])
    >>> first_columns(entry, 3).tolist()
    [[1, 0, 0], [0, 0, 1]]
    >>> [[int(np.argmax(e == c)) for c in range(3)] for e in entry]
    [[1, 0, 0], [0, 0, 1]]
    """
    small = np.int8 if entry.shape[1] <= np.iinfo(np.int8).max else np.int32
    column = np.zeros((len(entry), count), small)
    rows = np.arange(len(entry))
    for k in range(entry.shape[1] - 1, -1, -1):  # the first column written last
        held = entry[:, k] >= 0
        column[rows[held], entry[held, k]] = k
    return column


@ignores_failures
def _plane_components(fabric: Fabric) -> _Planes | None:
    """The components of ``fabric``'s fat-tree (its leaf - spine and spine - core arcs'
    connected components), None where it has no NIC arcs or no spines."""
    view = fabric.derived(intact_view)
    clos = view.clos
    up = clos.access_up
    if up is None or clos.access_down is None or not view.fat_tree.present:
        return None
    tier = fabric.link_arrays["tier"]
    names = [str(t) for t in tier.categories]
    rows = np.flatnonzero(np.isin(tier.codes, [names.index(t) for t in PLANE_TIERS
                                               if t in names]))
    src, dst = clos.src[rows], clos.dst[rows]
    label = _connected(src, dst, len(clos.domain))
    fat = np.unique(label[src])  # the components with a switch link
    relabel = np.full(int(label.max(initial=-1)) + 1, -1)
    relabel[fat] = np.arange(len(fat))
    node = relabel[label]
    row = np.full(clos.n_links, -1, np.int32)
    row[rows] = node[src]
    scaleout = np.flatnonzero(np.isin(tier.codes, [names.index(t) for t in SCALE_OUT_TIERS
                                                   if t in names]))
    return _Planes(node, row, node[clos.dst[up.table]], len(fat), scaleout)


def _connected(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """Each of ``n`` nodes' connected component under the edges ``src[i] -- dst[i]``,
    labelled by its lowest node: each edge's ends take the lower of their labels, then
    every label its own label's (pointer jumping), until none changes (a few rounds on a
    fat-tree, whose diameter is a handful of hops; scipy's ``connected_components``
    gives the same partition but its import alone costs about 0.4 s)."""
    label = np.arange(n)
    while True:
        low = np.minimum(label[src], label[dst])
        before = label.copy()
        np.minimum.at(label, src, low)
        np.minimum.at(label, dst, low)
        label = label[label]
        if np.array_equal(label, before):
            return label


def _joined(climb: LiveClimb, leaf_s: np.ndarray, leaf_d: np.ndarray) -> np.ndarray:
    """Whether each pair of different leaves still has a live shortest path."""
    return np.asarray(climb.paths(leaf_s, leaf_d).ok.any(axis=1))


def whole_scaleout(fabric: Fabric, view: Survivors, phase: Phase, flows: np.ndarray,
                   routing: str, seed: int, qps: int) -> tuple[np.ndarray, ...]:
    """The scale-out section of ``flows`` routed whole on ``view``: (bytes per link row,
    hops, lost flows) as :func:`~topomodel.routing.clos.paths.scaleout_paths` gives
    them, then what a patch reads (empty where none reads it: not hash routing, no
    planes to split, or a failed scale-out row on ``view``, whose section is not kept
    for other copies): each queue pair's plane component (a byte or two each) and the
    crossing entries' distinct leaf pairs. Kept with the intact section
    (:mod:`topomodel.routing.sections`)."""
    load, hops, lost, chosen = scaleout_chosen(view, phase, flows, routing, seed, qps)
    planes = fabric.derived(_plane_components) if chosen is not None else None
    if chosen is None or planes is None or not view.alive[planes.scaleout].all():
        none = np.zeros(0, np.int32)
        return load, hops, lost, np.zeros(0, np.int8), none, none
    small = np.int8 if planes.count <= np.iinfo(np.int8).max else np.int32
    entry = planes.entry.astype(small)
    comp = np.empty(len(chosen.pick), small)
    nic_row = chosen.entry[~lost]  # each routed flow's NIC row, as the router read it
    for lo in range(0, len(comp), BLOCK):  # each queue pair's flow: qp // qps of them
        hi = min(lo + BLOCK, len(comp))
        comp[lo:hi] = entry[nic_row[np.arange(lo, hi) // qps], chosen.pick[lo:hi]]
    return (load, hops, lost, comp, chosen.pair_s.astype(np.int32),
            chosen.pair_d.astype(np.int32))


def patched_scaleout(fabric: Fabric, view: Survivors, phase: Phase,
                     flows: np.ndarray, routing: str, seed: int, qps: int
                     ) -> tuple[np.ndarray, ...] | None:
    """The scale-out section of ``flows`` on the copy ``view``, as the module docstring
    builds it, bit for bit what :func:`whole_scaleout` gives; None where it must be
    routed whole (not hash routing, a failed scale-out row outside the planes' switch
    links, or a leaf pair of the section joined otherwise than with every arc live)."""
    if routing != "hash":
        return None
    planes = fabric.derived(_plane_components)
    failed = failed_rows(fabric, view.alive, SCALE_OUT_TIERS)
    if planes is None or not len(failed) or len(
            failed_rows(fabric, view.alive, PLANE_TIERS)) != len(failed):
        return None  # none failed, or one outside the planes' switch links
    hit = np.zeros(planes.count + 1, bool)  # per component, whether it failed; -1: none
    hit[planes.row[failed]] = True
    intact = fabric.derived(intact_view)
    kept = intact_section(fabric, "scaleout", phase, flows, (routing, seed, qps),
                          lambda: whole_scaleout(fabric, intact, phase, flows, routing,
                                                 seed, qps))
    hops, lost, comp, pair_s, pair_d = kept.rest
    inside = hit[planes.node[pair_s]]  # the failed planes' leaf pairs
    leaf_s, leaf_d = pair_s[inside], pair_d[inside]
    if not np.array_equal(_joined(view.fat_tree, leaf_s, leaf_d),
                          _joined(intact.fat_tree, leaf_s, leaf_d)):
        return None
    paths = view.fat_tree.paths(leaf_s, leaf_d)
    out = kept.added_to(None, view.clos.n_links)
    rows = np.flatnonzero(hit[planes.row])
    out[rows] = _picked_again(view, phase, flows, np.flatnonzero(hit[comp]),
                              (lost, comp, planes), (leaf_s, leaf_d, paths), seed,
                              qps)[rows]
    return out, hops, lost, comp, pair_s, pair_d


def _picked_again(view: Survivors, phase: Phase, flows: np.ndarray,
                  qp: np.ndarray, chose: tuple[np.ndarray, np.ndarray, _Planes],
                  pairs: tuple[np.ndarray, np.ndarray, Paths], seed: int, qps: int
                  ) -> np.ndarray:
    """Bytes per link row of the fat-tree's switch links (leaf - spine, spine - core)
    of the queue pairs ``qp`` (indices in the intact section's queue-pair order, each
    on the plane it picked there: ``chose`` is the intact section's lost flows, each
    queue pair's plane component, and the components), routed on ``view`` under hash
    routing as :func:`~topomodel.routing.planes.route_planes` routes them.

    ``pairs``: the distinct leaf pairs of the section's crossing entries on the failed
    planes, in node order, and their live paths on ``view``: every crossing queue pair
    of ``qp`` is on one of them. The queue pairs go :data:`BLOCK` at a time, each
    block's bytes added queue pair by queue pair in order (``np.add.at``; each link
    row's bytes come from one kind of piece, so bit for bit one bincount over them all,
    as :func:`~topomodel.routing.pieces.link_bytes` adds them)."""
    lost, comp, planes = chose
    leaf_s, leaf_d, paths = pairs
    clos = view.clos
    up, down = clos.access_up, clos.access_down
    assert up is not None and down is not None
    nodes = len(clos.domain)
    keys = leaf_s.astype(np.int64) * nodes + leaf_d  # ascending: the pairs' node order
    slot_up, slot_down = up.slot[clos.nic_of], down.slot[clos.nic_of]  # per node
    routed = np.flatnonzero(~lost)
    climb = view.fat_tree
    load = np.zeros(clos.n_links)
    for lo in range(0, len(qp), BLOCK):
        block = qp[lo:lo + BLOCK]
        row = flows[routed[block // qps]]
        ids = row.astype(np.int64) * qps + block % qps  # as hashing.subflows numbers them
        src, dst = phase.src[row], phase.dst[row]
        slot_s = slot_up[src]
        pick = planes.column[slot_s, comp[block]]  # np.argmax(entry[slot_s] == comp)
        lower_s = clos.dst[up.table[slot_s, pick]]
        lower_d = clos.src[down.table[slot_down[dst], pick]]
        go = np.flatnonzero(lower_s != lower_d)
        pair = np.searchsorted(keys, lower_s[go].astype(np.int64) * nodes + lower_d[go])
        part = phase.bytes[row[go]] / qps
        for piece in climb.picked(pair, leaf_s, leaf_d, paths, ids[go], dst[go], part,
                                  np.broadcast_to(np.int64(1), (len(go),)), "hash", seed):
            rows, amount = piece.plain() if isinstance(piece, Rows) else piece
            np.add.at(load, rows, amount)
    return load


def scaleout_on_copy(fabric: Fabric, view: Survivors, phase: Phase, flows: np.ndarray,
                     routing: str, seed: int, qps: int) -> tuple[np.ndarray, ...]:
    """The scale-out section of ``flows`` on the copy ``view``: :func:`patched_scaleout`
    where the failures allow, else routed whole (:func:`whole_scaleout`)."""
    patched = patched_scaleout(fabric, view, phase, flows, routing, seed, qps)
    return patched if patched is not None else whole_scaleout(fabric, view, phase, flows,
                                                              routing, seed, qps)
