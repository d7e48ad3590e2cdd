"""The arcs a failure leaves on a structured fabric, indexed for the routers: the
survivors' view (which paths of each climb are still live), shared by the fabric's
copies where failures do not reach it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from topomodel.arrays import sorted_distinct
from topomodel.fabric.arcs import ArcIndex, arc_index
from topomodel.fabric.tables import Fabric, ignores_failures
from topomodel.routing.clos.view import Climb, Irregular, clos_view
from topomodel.routing.hashing import ticket
from topomodel.routing.pieces import Piece, Rows

ALL_CORE_CHOICES = 4_000_000
"""Up to this many (spine, pod) pairs, a Clos's core choices are worked out for all of
them once per fabric (131,072 GPUs: 48,672); above it (a 100k-accelerator supernode's
59,136 upper switches x 3,696 pods), only for the pairs a phase needs."""


def ranked(usable: np.ndarray) -> np.ndarray:
    """Per row of a 2-D ``usable``, the usable columns first (in column order): the
    ``r``-th usable column of row ``i`` is ``out[i, r]``; a row with every column usable
    (most of them: a failure touches few) is its columns in order, unsorted."""
    out = np.broadcast_to(np.arange(usable.shape[1]), usable.shape).copy()
    partial = np.flatnonzero(~usable.all(axis=1))
    if len(partial):
        out[partial] = np.argsort(~usable[partial], axis=1, kind="stable")
    return out


@dataclass(frozen=True, eq=False)
class Paths:
    """The live shortest paths of some leaf pairs: ``ok`` (pairs, spines) whether uplink
    ``j`` of the source leaf starts one, ``cross`` whether the pair crosses pods; for
    the (spine, destination pod) keys ``keys`` those pairs need (sorted), their usable
    cores: ``count``, ``rank`` (usable columns first), and the arcs ``core_up``
    (spine -> core) and ``core_down`` (core -> the destination pod's spine); ``at``
    (crossing pairs, spines) the key of uplink ``j`` of each crossing pair, as a
    position in ``keys``."""

    ok: np.ndarray
    cross: np.ndarray
    keys: np.ndarray
    at: np.ndarray
    count: np.ndarray
    rank: np.ndarray
    core_up: np.ndarray
    core_down: np.ndarray

    @cached_property
    def usable(self) -> np.ndarray:
        """Per pair, how many spines start a live path (``ok``'s row sums)."""
        return np.asarray(self.ok.sum(axis=1))

    @cached_property
    def order(self) -> np.ndarray:
        """Per pair, its usable spines first (:func:`ranked` of ``ok``)."""
        return ranked(self.ok)

    @cached_property
    def crossing_row(self) -> np.ndarray:
        """Per pair, its row in ``at`` (meaningful where it crosses pods)."""
        return np.cumsum(self.cross) - 1


class ClimbShape:
    """The wiring of a folded Clos (leaf -> spine -> core) that the live view reads,
    failures aside: made once per fabric and shared by its copies with failed parts.

    Leaves joined to the same spines form a group (a pod; in a two-tier Clos, all the
    leaves of one plane); within a group every leaf's uplink ``j`` goes to the same
    spine, and every core joins spines of one index ``j`` only, so between pods spine
    ``j`` reaches spine ``j`` of the destination pod through each of its cores. A fabric
    wired otherwise is irregular.
    """

    def __init__(self, climb: Climb, lookup: ArcIndex) -> None:
        self.present = climb.present
        self.lookup = lookup
        if not self.present:
            return
        up = climb.up[climb.spine]
        self.slot = up.slot
        leaves = np.flatnonzero(up.slot >= 0)
        self.up_arcs = up.table
        self.cables = up.cables
        spines = climb.dst_of(up.table)
        self.down_arcs = lookup.row(spines, leaves[:, None])  # spine j -> leaf
        if (self.down_arcs < 0).any():
            raise Irregular("a leaf uplink without its downlink")
        self.group = spines.min(axis=1)
        self.pods, first, inverse = np.unique(self.group, return_index=True,
                                              return_inverse=True)
        if (spines != spines[first[inverse]]).any():
            raise Irregular("leaves of one pod reach different spines")
        self.spines = spines
        self.pod_spines = spines[first]  # (pods, spines): spine j of each pod
        self.cores = climb.core in climb.up
        if not self.cores:
            return
        self.col = np.full(climb.n, -1)
        self.col[self.pod_spines] = np.arange(spines.shape[1])[None, :]
        core = climb.up[climb.core]
        self.core_slot = core.slot
        self.core_cables = core.cables
        self.core_up = core.table  # (spines, cores of a spine)
        self.core_nodes = climb.dst_of(core.table)
        below = np.repeat(self.col[np.flatnonzero(core.slot >= 0)], core.width)
        cores = self.core_nodes.ravel()
        some = np.full(climb.n, -1)
        some[cores] = below  # one of each core's spine indices: all must be that one
        if (some[cores] != below).any():
            raise Irregular("a core joins spines of different indices")
        self._core_downlinks(climb)

    def _core_downlinks(self, climb: Climb) -> None:
        """Each spine's cores in node order (``core_sorted``, and where each of its core
        columns falls in it, ``core_rank``), and the arcs down from its cores in the
        same order (``down_by_core``, ``down_cores``, rows by ``down_slot``): a core's
        arc down to a spine whose cores are those of the spine it came up from is then
        found by position, not searched among all link rows. Only where no two link rows
        join the same ends (else ``down_by_core`` is None and the search finds them)."""
        self.down_by_core: np.ndarray | None = None
        if self.lookup.parallel:
            return
        down = climb.down[climb.core]
        order = np.argsort(self.core_nodes, axis=1, kind="stable")
        self.core_rank = np.argsort(order, axis=1, kind="stable")
        self.core_sorted = np.take_along_axis(self.core_nodes, order, axis=1)
        below = climb.src_of(down.table)
        order = np.argsort(below, axis=1, kind="stable")
        self.down_cores = np.take_along_axis(below, order, axis=1)
        self.down_by_core = np.take_along_axis(down.table, order, axis=1)
        self.down_slot = down.slot


class LiveClimb(ClimbShape):
    """A folded Clos with its failed arcs: the shape's arrays (shared, read-only use)
    and which of its up- and downlinks are live."""

    def __init__(self, shape: ClimbShape, alive: np.ndarray) -> None:
        vars(self).update(vars(shape))  # the same arrays, not copies
        if not self.present:
            return
        self.alive = alive
        self.up_alive = alive[self.up_arcs]
        self.down_alive = alive[self.down_arcs]
        self._every: tuple[np.ndarray, ...] | None = None

    def paths(self, leaf_s: np.ndarray, leaf_d: np.ndarray) -> Paths:
        """The live shortest paths between pairs of different leaves."""
        empty, none = np.zeros(0, np.int64), np.zeros((0, 0), np.int64)
        if not self.present:  # one leaf per plane: no pair of different leaves to join
            return Paths(np.zeros((len(leaf_s), 1), bool), np.zeros(len(leaf_s), bool),
                          empty, none, empty, none, none, none)
        i, k = self.slot[leaf_s], self.slot[leaf_d]
        ok = self.up_alive[i] & self.down_alive[k]
        cross = self.group[i] != self.group[k]
        no_cores = Paths(ok, cross, empty, none, empty, none, none, none)
        if not cross.any():
            return no_cores
        if not self.cores:
            ok[cross] = False
            return no_cores
        spine = self.spines[i[cross]]  # (pairs, spines)
        pod = np.searchsorted(self.pods, self.group[k[cross]])
        wanted = self._key(spine, pod[:, None])
        if len(self.core_up) * len(self.pods) <= ALL_CORE_CHOICES:
            keys, inverse = np.arange(len(self.core_up) * len(self.pods)), wanted
            if self._every is None:
                self._every = self._choices(keys)
            count, rank, core_up, core_down = self._every
        else:
            keys, inverse = sorted_distinct(wanted)
            count, rank, core_up, core_down = self._choices(keys)
        at = inverse.reshape(wanted.shape)
        ok[cross] &= count[at] > 0
        return Paths(ok, cross, keys, at, count, rank, core_up, core_down)

    def _choices(self, keys: np.ndarray) -> tuple[np.ndarray, ...]:
        """For (spine, destination pod) keys: usable cores' count and ranking, and the
        arcs up to each core and down from it to the pod's spine of the same index."""
        top, pod_index = keys // len(self.pods), keys % len(self.pods)
        spine_node = np.flatnonzero(self.core_slot >= 0)[top]
        peer = self.pod_spines[pod_index, self.col[spine_node]]
        core_up = self.core_up[top]
        core_down = self._core_down(top, peer)
        usable = self.alive[core_up] & (core_down >= 0) & self.alive[np.maximum(core_down, 0)]
        return usable.sum(axis=1), ranked(usable), core_up, core_down

    def _core_down(self, top: np.ndarray, peer: np.ndarray) -> np.ndarray:
        """(keys, cores) the arc from each core of spine row ``top`` down to spine node
        ``peer``, -1 where there is none: by position where ``peer``'s cores are the
        spine's own (:meth:`ClimbShape._core_downlinks`), else searched."""
        if self.down_by_core is None or self.down_cores.shape[1] != self.core_nodes.shape[1]:
            return self.lookup.row(self.core_nodes[top], peer[:, None])
        row = self.down_slot[peer]
        same = (row >= 0) & (self.down_cores[np.maximum(row, 0)]
                             == self.core_sorted[top]).all(axis=1)
        out = np.take_along_axis(self.down_by_core[np.maximum(row, 0)], self.core_rank[top],
                                 axis=1)
        other = np.flatnonzero(~same)
        if len(other):  # the cores gathered for these keys alone
            out[other] = self.lookup.row(self.core_nodes[top[other]], peer[other, None])
        return out

    def _key(self, spine: np.ndarray, pod: np.ndarray) -> np.ndarray:
        """Key of (spine node, destination pod index) pairs, as :meth:`paths` sorts them."""
        return self.core_slot[spine].astype(np.int64) * len(self.pods) + pod

    def even(self, leaf_s: np.ndarray, leaf_d: np.ndarray, amount: np.ndarray,
             paths: Paths) -> list[Piece]:
        """Even ECMP of ``amount`` per leaf pair over its usable spines (and cores), as
        pieces for :func:`~topomodel.routing.pieces.link_bytes`: up-, down-, core up-
        and core downlinks."""
        ok = paths.ok
        i, k = self.slot[leaf_s], self.slot[leaf_d]
        cross = paths.cross
        share = spine_shares(ok, amount)
        pieces: list[Piece] = [Rows(self.up_arcs, i, share), Rows(self.down_arcs, k, share)]
        crossing = (np.repeat(share[cross], ok.shape[1]) if share.ndim == 1
                    else share[cross].ravel())
        if not cross.any() or not len(paths.keys):
            return pieces
        into = np.bincount(paths.at.ravel(), crossing, len(paths.keys))
        width = paths.rank.shape[1]
        per_core = into / np.maximum(paths.count, 1)
        if (paths.count == width).all():  # every core usable: ranks in column order
            top = paths.keys // len(self.pods)  # each key's row in ``core_up``
            weight = np.broadcast_to(per_core[:, None], paths.core_up.shape)
            return [*pieces, Rows(self.core_up, top, per_core), (paths.core_down, weight)]
        used = np.arange(width)[None, :] < paths.count[:, None]
        cores = np.where(used, paths.rank, 0)
        weight = np.where(used, per_core[:, None], 0.0)
        rows = np.arange(len(paths.keys))[:, None]
        # unused columns weigh 0 (on a core_down of -1: on row 0, which 0 leaves as is)
        return [*pieces, (paths.core_up[rows, cores], weight),
                (np.maximum(paths.core_down[rows, cores], 0), weight)]

    # PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
    def picked(self, pair: np.ndarray, leaf_s: np.ndarray, leaf_d: np.ndarray,  # noqa: PLR0913
               paths: Paths, ids: np.ndarray, dst: np.ndarray, volume: np.ndarray,
               stride: np.ndarray, routing: str, seed: int) -> list[Piece]:
        """One spine (and core) per queue pair, by hash or d-mod-k, among the usable
        ones of its leaf pair ``pair`` (an index into ``leaf_s``, ``leaf_d``, ``paths``),
        as pieces for :func:`~topomodel.routing.pieces.link_bytes`. The per-pair tables
        (:attr:`Paths.usable`, :attr:`Paths.order`, :attr:`Paths.crossing_row`) are made
        once per ``paths``, so calls on blocks of queue pairs choose as one call over
        all of them."""
        count = paths.usable[pair]
        at = leaf_s[pair]
        rank = rank_of(routing, seed, ids, at, dst, stride, count, self.cables)
        col = paths.order[pair, rank]
        i, k = self.slot[at], self.slot[leaf_d[pair]]
        pieces: list[Piece] = [Rows(self.up_arcs, i, volume, col),
                               Rows(self.down_arcs, k, volume, col)]
        far = np.flatnonzero(paths.cross[pair])
        if len(far):
            spine = self.spines[i[far], col[far]]
            row = paths.at[paths.crossing_row[pair[far]], col[far]]
            cores = paths.count[row]
            rank = rank_of(routing, seed, ids[far], spine, dst[far], stride[far] * count[far],
                         cores, self.core_cables)
            core = paths.rank[row, rank]
            pieces += [Rows(self.core_up, paths.keys[row] // len(self.pods), volume[far], core),
                       (paths.core_down[row, core], volume[far])]
        return pieces


def rank_of(routing: str, seed: int, ids: np.ndarray, node: np.ndarray, dst: np.ndarray,
          stride: np.ndarray, count: np.ndarray, cables: int) -> np.ndarray:
    """Which of ``count`` usable candidates of ``cables`` each a queue pair takes, as
    :func:`~topomodel.routing.hashing.choose` picks it."""
    if routing == "hash":
        return ticket(seed, ids, node, count * cables, cables)
    return (dst // stride) % count


@ignores_failures
class SurvivorShape:
    """What the failure view reads of a structured fabric's wiring, failures aside (the
    arc look-up, :func:`~topomodel.fabric.arcs.arc_index`, and both Clos' shapes): made
    once and shared by the fabric's copies with failed parts
    (:meth:`~topomodel.fabric.tables.Fabric.with_failed`)."""

    def __init__(self, fabric: Fabric) -> None:
        clos = clos_view(fabric)
        self.lookup = fabric.derived(arc_index)
        self.fat_tree = ClimbShape(clos.fat_tree, self.lookup)
        self.supernode = ClimbShape(clos.supernode, self.lookup)


def spine_shares(ok: np.ndarray, amount: np.ndarray) -> np.ndarray:
    """Each leaf pair's ``amount`` split evenly over its usable spines (``ok``, (pairs,
    spines)): one share per pair, the same on each of its spines, where every spine of
    a pair is usable or none is (0 for such a dead pair: its plane failed whole), else
    (pairs, spines) with 0 on the unusable ones. Either way the values of the masked
    division, bit for bit.

    Examples
    --------
    >>> ok = np.array([[True, True], [False, False]])
    >>> spine_shares(ok, np.array([3.0, 5.0])).tolist()
    [1.5, 0.0]
    >>> spine_shares(np.array([[True, False]]), np.array([3.0])).tolist()
    [[3.0, 0.0]]
    """
    whole = ok.all(axis=1)
    if whole.all() or not ok[~whole].any():
        share = amount / max(ok.shape[1], 1)
        return share if whole.all() else np.where(whole, share, 0.0)
    return np.where(ok, (amount / np.maximum(ok.sum(axis=1), 1))[:, None], 0.0)


class Survivors:
    """A structured fabric's failed arcs, indexed for the structured router."""

    def __init__(self, fabric: Fabric, alive: np.ndarray | None = None) -> None:
        clos = clos_view(fabric)
        shape = fabric.derived(SurvivorShape)
        self.clos = clos
        self.alive = ~fabric.link_arrays["failed"] if alive is None else alive
        self.lookup = shape.lookup
        self.fat_tree = LiveClimb(shape.fat_tree, self.alive)
        self.supernode = LiveClimb(shape.supernode, self.alive)

    @cached_property
    def live_planes(self) -> np.ndarray | None:
        """The columns of the NICs' fan-out tables (their planes) left, where failures took
        whole planes from every NIC alike (each column's arcs into the planes, or out of
        them, all failed; every arc of the other columns and every host link live: a
        failed plane), else None.

        Routed over those columns alone, every flow picks the same plane as over all of
        them with the failed ones masked: a dead column carries no cables, so the hash's
        modulus is the live columns' cables either way and its ticket passes the same live
        column (:func:`~topomodel.routing.hashing.choose`); ECMP and d-mod-k split or count
        over the usable columns alone too. The same paths, in the same queue-pair order:
        the same sums, without the (flows, planes) masks of the failed columns (a 98k
        NPU goodput's step with a plane failed: 3.0 -> 2.3 CPU s)."""
        clos = self.clos
        up, down = clos.access_up, clos.access_down
        if up is None or down is None:
            return None
        live_up, live_down = self.alive[up.table], self.alive[down.table]
        whole = live_up.all(axis=0) & live_down.all(axis=0)
        gone = ~live_up.any(axis=0) | ~live_down.any(axis=0)
        if whole.all() or not whole.any() or not (whole | gone).all() or not (
                self.alive[clos.host_up[clos.host_up >= 0]].all()
                and self.alive[clos.host_down[clos.host_down >= 0]].all()):
            return None
        return np.flatnonzero(whole)


def survivors_view(fabric: Fabric) -> Survivors:
    return fabric.derived(Survivors)


@ignores_failures
def intact_view(fabric: Fabric) -> Survivors:
    """The failure view with every arc live: what a copy gives on a section whose tiers
    it leaves intact (:mod:`topomodel.routing.sections`), shared by every copy."""
    return Survivors(fabric, np.ones(len(fabric.link_arrays), bool))


def chips_of(view: Survivors, src: np.ndarray, dst: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(flows, chips) arcs to each in-system chip, from chip ``k`` of the destination's
    system, and whether both are live."""
    up, down = view.clos.scaleup_up, view.clos.scaleup_down
    assert up is not None and down is not None
    into, out = up.table[up.slot[src]], down.table[down.slot[dst]]
    return into, out, view.alive[into] & view.alive[out]
