"""The healthy Clos view of a structured fabric: its switched scale-up and fat-tree
levels as fan-out tables by address, made once per fabric, and the even climb that
spreads traffic over them."""

from __future__ import annotations

from functools import cached_property

import numpy as np

from topomodel.fabric.arcs import ArcIndex
from topomodel.fabric.tables import Coded, Fabric, ignores_capacities, ignores_failures, index_dtype
from topomodel.routing.pieces import Piece, Rows
from topomodel.vocabulary import FAT_TREE_TIERS, SCALEUP_TIERS


class Fanout:
    """Arcs from each node of one tier to the tier above (or below), as a table.

    Between switch tiers every arc carries the same cables (``cables``); from an
    accelerator to its in-system chips they may differ (5, 5, 4, 4 on HGX), so
    ``uniform=False`` keeps them per arc in ``weights``.
    """

    def __init__(self, owners: np.ndarray, arcs: np.ndarray, n_nodes: int,
                 cables: np.ndarray, *, uniform: bool = True) -> None:
        order = np.lexsort((arcs, owners))
        # the arcs (link rows) in int32 where the rows allow: the table is kept
        owners, arcs = owners[order], arcs[order].astype(index_dtype(len(cables)), copy=False)
        unique = owners[np.r_[True, owners[1:] != owners[:-1]]] if len(owners) else owners
        self.slot = np.full(n_nodes, -1, index_dtype(n_nodes))  # a table row per node
        self.slot[unique] = np.arange(len(unique))
        width = len(arcs) // max(1, len(unique))
        if len(unique) and width * len(unique) != len(arcs):
            raise Irregular("nodes of one tier have different fan-outs")
        self.table = arcs.reshape(len(unique), width) if len(unique) else arcs.reshape(0, 0)
        self.width = width
        self.weights = cables[self.table] if len(unique) else np.zeros((0, 0), np.int64)
        if uniform and self.weights.size and (self.weights != self.weights.flat[0]).any():
            raise Irregular("uneven cable counts between tiers")
        self.cables = int(self.weights.flat[0]) if self.weights.size else 1

    def arcs(self, owner: np.ndarray) -> np.ndarray:
        """(len(owner), width) arcs of each owner, sorted by the other end's node."""
        return self.table[self.slot[owner]]

    @cached_property
    def shares(self) -> tuple[np.ndarray, np.ndarray]:
        """(owners, (owners, width) each arc's share of its owner's bytes by its cables):
        the owners in node order, one per row of ``table``; made once, the split
        :func:`spread` makes with these weights."""
        owners = np.flatnonzero(self.slot >= 0)
        weights = self.weights[self.slot[owners]]
        return owners, weights / weights.sum(axis=1, keepdims=True)


class Irregular(ValueError):
    """A fabric the structured router cannot aggregate exactly."""


@ignores_capacities
@ignores_failures
class ClosView:
    """Addresses of a fabric with switched (or mesh) scale-up and a fat-tree."""

    def __init__(self, fabric: Fabric) -> None:
        nodes, links = fabric.node_arrays, fabric.link_arrays
        src, dst = links["src"], links["dst"]
        cables = links["cables"]
        tier, node_tier, kind = Coded(links["tier"]), Coded(nodes["tier"]), Coded(nodes["kind"])
        n = len(nodes)
        self.n_links = len(links)
        self.src, self.dst, self.cables = src, dst, cables
        self.pod = nodes["pod"]
        self.domain = nodes["domain"]
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
        self.access_up = Fanout(src[up], up, n, cables) if len(up) else None
        self.access_down = Fanout(dst[down], down, n, cables) if len(down) else None
        self.fat_tree = Climb(src, dst, cables, tier, tier_src, tier_dst, n, FAT_TREE_TIERS)
        self.supernode = Climb(src, dst, cables, tier, tier_src, tier_dst, n, SCALEUP_TIERS)
        scaleup_tier = tier.equals("scaleup")
        su = np.flatnonzero(scaleup_tier & kind_src.equals("accelerator"))
        sd = np.flatnonzero(scaleup_tier & kind_dst.equals("accelerator"))
        self.scaleup_up = self.scaleup_down = None
        if len(su) and not self.mesh:
            self.scaleup_up = Fanout(src[su], su, n, cables, uniform=False)
            self.scaleup_down = Fanout(dst[sd], sd, n, cables, uniform=False)
        self.system = nodes["system"]

    @cached_property
    def _domain_narrow(self) -> np.ndarray:
        """:attr:`domain` as int32 where node numbers fit (a domain's number is below
        the nodes'): the same values, half the bytes gathered per flow."""
        return self.domain.astype(index_dtype(len(self.domain)), copy=False)

    @cached_property
    def _system_narrow(self) -> np.ndarray:
        """:attr:`system` as int32 where node numbers fit (see :attr:`_domain_narrow`)."""
        return self.system.astype(index_dtype(len(self.system)), copy=False)

    def same_domain(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Per flow ``src[i] -> dst[i]``, whether both ends lie in one scale-up domain
        (bool; a node in none is -1): each end's domain gathered once, in int32."""
        home = self._domain_narrow[src]
        same = home == self._domain_narrow[dst]
        same &= home >= 0
        return same

    def other_system(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Per flow, whether its ends lie in two systems (bool)."""
        return self._system_narrow[src] != self._system_narrow[dst]

    @cached_property
    def arcs(self) -> ArcIndex:
        """The link rows by their ends, for a full mesh's direct links (made on first
        use: other scale-up kinds never look an arc up)."""
        return ArcIndex.of(self.src, self.dst, len(self.domain))


class Climb:
    """A folded Clos above a tier of leaves: leaf -> spine (-> core) fan-outs, pods.

    Pods are found from the wiring, not from names: a leaf's pod is the lowest-numbered
    spine it reaches, so pods of different planes or supernodes never mix.
    """

    def __init__(self, src: np.ndarray, dst: np.ndarray, cables: np.ndarray,
                 tier: Coded, tier_src: Coded, tier_dst: Coded, n: int,
                 names: tuple[str, str, str]) -> None:
        leaf, spine, core = names
        self.n_links = len(src)
        self.up: dict[str, Fanout] = {}
        self.down: dict[str, Fanout] = {}
        for name, lower in ((spine, leaf), (core, spine)):
            here = tier.equals(name)
            u = np.flatnonzero(here & tier_src.equals(lower))
            d = np.flatnonzero(here & tier_dst.equals(lower))
            if len(u):
                self.up[name] = Fanout(src[u], u, n, cables)
                self.down[name] = Fanout(dst[d], d, n, cables)
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

    def down_column(self, slot: np.ndarray, spine: np.ndarray) -> np.ndarray:
        """For rows ``slot`` of the spine -> leaf table, the column of each row's first
        arc from ``spine`` (0 where none): the argmax over each row's spines compared
        with ``spine``, by one search in the table's sorted (row, spine) keys instead of
        a (flows, spines) comparison (gigabytes at 98k accelerators with many spines)."""
        keys, column = self._down_keys
        want = slot.astype(np.int64)  # a copy, then in place
        want *= self.n
        want += spine
        at = np.searchsorted(keys, want)
        np.minimum(at, len(keys) - 1, out=at)
        found: np.ndarray = column[at]
        found[keys[at] != want] = 0
        return found

    @cached_property
    def _down_keys(self) -> tuple[np.ndarray, np.ndarray]:
        """The spine -> leaf table's entries as sorted keys (row, spine), and the column
        of each (the lowest first where a row has two arcs from one spine)."""
        down = self.down[self.spine]
        keys = (np.arange(len(down.table), dtype=np.int64)[:, None] * self.n
                + self._src[down.table]).ravel()
        order = np.argsort(keys, kind="stable")
        return keys[order], order % max(down.width, 1)


def clos_view(fabric: Fabric) -> ClosView:
    return fabric.derived(ClosView)


def spread(fanout: Fanout, owners: np.ndarray, amount: np.ndarray,
            weights: np.ndarray | None = None) -> Rows:
    """``amount`` (bytes per owner; distinct owners) over each owner's arcs, evenly or
    split by ``weights`` (owners, width)."""
    index = fanout.slot[owners]
    if weights is None:
        return Rows(fanout.table, index, amount / fanout.width)
    return Rows(fanout.table, index,
                weights / weights.sum(axis=1, keepdims=True) * amount[:, None])


def climb_even(climb: Climb, sent: np.ndarray, received: np.ndarray, leaving: np.ndarray,
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
    pieces: list[Piece] = [spread(up, leaves_up, sent[leaves_up]),
                           spread(down, leaves_down, received[leaves_down])]
    if climb.core not in climb.up or not leaving.any():
        return pieces
    up_core, down_core = climb.up[climb.core], climb.down[climb.core]
    arcs = up.arcs(leaves_up)
    spine_out = np.bincount(climb.dst_of(arcs).ravel(), weights=np.repeat(
        leaving[leaves_up] / up.width, up.width), minlength=climb.n)
    spines = np.flatnonzero(up_core.slot >= 0)
    # into each pod: every spine of the pod gets an equal share, then its cores evenly
    return [*pieces, spread(up_core, spines, spine_out[spines]),
            spread(down_core, spines, entering[climb.pod[spines]] / up.width)]
