"""An all-pairs phase (a direct All-to-All) split into what its flows add up to, without
listing its pairs.

Every rank of a group sends the same bytes to every other rank, so the traffic between
scale-up domains is fixed by counts: how many ranks of each group sit in each domain,
under each leaf, in each pod. :func:`decompose` gives

- the flows inside scale-up domains (pairs of a group in one domain, and under PXN each
  rank's first hop to the relay on a destination rail, one flow per rank and rail
  carrying all that rank's bytes for that rail) as the bytes each node sends and
  receives inside its domain (what even ECMP through a domain's switches reads), and
  listed only when read (:attr:`Decomposition.local`: a full mesh or a supernode routes
  each pair); at most ranks x domain size;
- for the pairs between domains, each rank's *weight* towards each class of destination
  (the NIC rail of the destination under PXN, one class otherwise), and
  :meth:`Decomposition.pairs_within` to count weighted pairs whose ends share any key
  (a leaf, a pod) without listing them.

Without PXN every weight is 1. With PXN (:mod:`topomodel.traffic.pxn`) a pair whose
source has a relay on the destination's rail is not sent directly (weight 0 from that
source to that rail), and the relay sends it instead, so the relay's weight to its own
rail grows by the number of ranks it relays for. Weights and counts are whole numbers,
so sums and differences of them are exact.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from topomodel.fabric.tables import Fabric
from topomodel.traffic.phases import AllPairsPhase, Phase
from topomodel.traffic.relaying import Relays


@dataclass(frozen=True, eq=False)
class Decomposition:
    """An all-pairs phase as counts; one entry per member (a rank of a row), rows of all
    blocks one after another.

    ``weight[i, q]``: how many copies of the pair bytes member ``i`` sends to each member
    of its row in another domain whose class is ``q`` (``cls``); ``out_pairs`` /
    ``in_pairs``: weighted pairs each member sends / receives across domains.
    ``local_sent`` / ``local_received``: per node (``fabric.nodes`` order), the bytes
    per step of the flows inside scale-up domains it sends / receives; ``has_local``:
    whether there is any such flow; :attr:`local`: those flows listed.
    """

    node: np.ndarray  # (m,) int64 node numbers
    row: np.ndarray  # (m,) int64 row index over all blocks
    pair_bytes: np.ndarray  # (m,) bytes per pair per step of the member's row
    domain: np.ndarray  # (m,) int64 domain key, unique per member outside any domain
    cls: np.ndarray  # (m,) int64 destination class (rail under PXN, else 0)
    weight: np.ndarray  # (m, classes) float64 whole numbers
    out_pairs: np.ndarray  # (m,) float64
    in_pairs: np.ndarray  # (m,) float64
    local_sent: np.ndarray  # (nodes,) float64
    local_received: np.ndarray  # (nodes,) float64
    has_local: bool
    moved: int  # PXN: pairs sent through a relay
    moved_bytes: float  # their bytes per step
    gid: np.ndarray  # (rows,) int64 group index of each row
    relayed: Relayed | None  # PXN's relays and first hops
    by_domain: np.ndarray  # (m,) each member's cell of its row and domain
    domain_classes: np.ndarray  # (cells, classes) float64 members of each class per cell
    shape: tuple[int, str, int, float]  # the phase's steps, label, messages, efficiency

    @cached_property
    def local(self) -> Phase:
        """The flows inside scale-up domains, listed (made when first read): every pair
        of a row in one domain, then the PXN first hops (one flow per member and relay,
        all its pairs' bytes)."""
        return _local_flows(self.shape, self.node, self.row, self.gid, self.pair_bytes,
                            self.domain, None if self.relayed is None else self.relayed.listed())

    @property
    def classes(self) -> int:
        """Destination classes."""
        return int(self.weight.shape[1])

    def pairs_within(self, key: np.ndarray, *, apart: bool = False) -> np.ndarray:
        """Per member, the weighted pairs it sends to members of its row in another
        domain that share its ``key`` (one value per member: a leaf, a pod). ``apart``:
        no two nodes of one domain share a key (a rail-optimized leaf), so of the
        members sharing a member's key, only itself is in its domain."""
        members, classes = len(self.cls), self.classes
        by_key = _cells((key,), members, self.row)
        same = _class_counts(by_key, self.cls, classes)
        if apart:  # whole numbers: exact in any order of the sum
            return (np.einsum("ij,ij->i", self.weight, same)
                    - self.weight[np.arange(members), self.cls])
        # where each row's domain lies within one key (a pod), its cells of row, key
        # and domain are its cells of row and domain, counted already
        at_domain = np.zeros(len(self.domain_classes), key.dtype)
        at_domain[self.by_domain] = key
        if (at_domain[self.by_domain] == key).all():
            same -= np.take(self.domain_classes, self.by_domain, axis=0)
        else:
            same -= _class_counts(_cells((self.domain,), members, by_key), self.cls, classes)
        # whole numbers: exact in any order of the sum
        return np.einsum("ij,ij->i", self.weight, same)


def decompose(fabric: Fabric, phase: AllPairsPhase, *,
              like: AllPairsPhase | None = None) -> Decomposition | None:
    """The counts of ``phase`` (see the module docstring), or ``None`` where they do not
    describe it exactly: a rewrite other than PXN's, two rows with one group index, or a
    PXN relay that is not a rank of its own row (its group took it from another phase).
    Made once per phase and fabric (PXN, the router and the ideal time all read it);
    ``like``, a phase of the same blocks and rewrite, lends its counts if it has them.
    """
    known = fabric.derived(_memo)
    if phase not in known and like is not None and like in known:
        known[phase] = known[like]
    elif phase not in known:
        known[phase] = _decompose(fabric, phase)
    return known[phase]


def _memo(_: Fabric) -> weakref.WeakKeyDictionary[AllPairsPhase, Decomposition | None]:
    return weakref.WeakKeyDictionary()


def _decompose(fabric: Fabric, phase: AllPairsPhase) -> Decomposition | None:
    relays = phase.rewrite
    if relays is not None and not isinstance(relays, Relays):
        return None
    blocks = phase.blocks
    if not blocks:
        return None
    node = np.concatenate([b.ranks.ravel() for b in blocks]).astype(np.int64)
    sizes = np.concatenate([np.full(len(b.ranks), b.ranks.shape[1]) for b in blocks])
    row = np.repeat(np.arange(len(sizes)), sizes)
    gid = np.concatenate([b.group for b in blocks]).astype(np.int64)
    if len(np.unique(gid)) != len(gid):
        return None
    pair_bytes = np.repeat(np.concatenate([b.bytes for b in blocks]).astype(float), sizes)
    raw_domain = fabric.node_arrays["domain"].astype(np.int64)[node]
    domain = np.where(raw_domain >= 0, raw_domain, -1 - node)
    # the cells of a row, and of a row in one domain: found once, counted over twice
    by_row = row  # rows are numbered in order: they are their own cells
    by_domain = _cells((domain,), len(node), by_row)
    cell_size = np.bincount(by_domain)[by_domain]  # members in a member's row and domain
    cls, classes = np.zeros(len(node), np.int64), 1
    if relays is not None:  # class ``rails``: a destination with no NIC
        rail = relays.rail[node]
        cls, classes = np.where(rail >= 0, rail, relays.rails), relays.rails + 1
    domain_classes = _class_table(by_domain, cls, classes)
    across = _class_counts(by_row, cls, classes) - np.take(domain_classes, by_domain, axis=0)
    weight = np.ones((len(node), classes))
    relayed = None
    if relays is not None:
        relayed = _relayed(relays, node, row, gid[row], raw_domain, across)
        if relayed is None:
            return None  # a relay outside its row: listing the pairs is exact, this is not
        relayed.reweigh(weight)
    out_pairs = np.einsum("ij,ij->i", weight, across)  # whole numbers: exact in any order
    # a member receives every pair of its row from outside its domain once: PXN moves
    # which rank of the sender's server sends it, never out of the sender's row and domain
    in_pairs = (np.bincount(by_row)[by_row] - cell_size).astype(float)
    others = np.where(raw_domain >= 0, cell_size - 1, 0)
    sent, received = _local_totals(len(fabric.node_arrays), node, others * pair_bytes, relayed,
                                   pair_bytes)
    moved, moved_bytes = (0, 0.0) if relayed is None else relayed.moved(pair_bytes)
    return Decomposition(node, row, pair_bytes, domain, cls, weight, out_pairs, in_pairs,
                         sent, received, bool(others.any()) or moved > 0, moved,
                         moved_bytes, gid, relayed, by_domain, domain_classes,
                         (phase.steps, phase.label, phase.messages_per_step,
                          phase.efficiency))


def _local_totals(nodes: int, node: np.ndarray, pairs_bytes: np.ndarray,
                  relayed: Relayed | None, pair_bytes: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Per node (of ``nodes``), the bytes per step it sends and receives inside its
    scale-up domain, without listing the flows.

    A member with ``k`` others of its row in its domain sends each of them its row's pair
    bytes and receives as much from each (one row, one size): ``k`` x the pair bytes both
    ways (``pairs_bytes``). Under PXN a member also sends its first hops, which its relays
    receive (``relayed``). The listed flows add the same bytes in another order: the same
    numbers to the last bit where the pair bytes are whole numbers (every partial sum is
    then a whole number below 2**53), within rounding otherwise.
    """
    sent, received = pairs_bytes, pairs_bytes
    at, extra = node[:0], pairs_bytes[:0]
    if relayed is not None:
        sent = pairs_bytes.copy()
        sent[relayed.members] += relayed.hops_sent(pair_bytes)
        at, extra = relayed.hops_received(pair_bytes)
    return (np.bincount(node, weights=sent, minlength=nodes),
            np.bincount(np.concatenate([node, at]), weights=np.concatenate([received, extra]),
                        minlength=nodes))


@dataclass(frozen=True, eq=False)
class Relayed:
    """PXN's relays of an all-pairs phase, per *server cell*: the members of one group
    in one system (one row, one domain), and each rail.

    A member able to relay (in a domain, with a NIC) sends what its row sends to a rail
    other than its own through its server cell's relay on that rail, where there is one
    (``found``): one first hop per such rail carrying ``targets`` pairs (the members of
    that rail in its row outside its domain; the same for every member of the cell), and
    the relay sends those pairs on, once for each member it relays for (``relaying``:
    the cell's able members on other rails).
    """

    members: np.ndarray  # (a,) the able members
    rail: np.ndarray  # (a,) their rails
    server: np.ndarray  # (a,) their server cells
    found: np.ndarray  # (cells, rails) bool: a relay on that rail
    via: np.ndarray  # (cells, rails) the relay's node (where found)
    relay: np.ndarray  # (cells, rails) the relay's member (where found, else -1)
    lead: np.ndarray  # (cells,) a member of each cell (its row's pair bytes)
    targets: np.ndarray  # (cells, rails) int64 pairs per first hop
    relaying: np.ndarray  # (cells, rails) int64 members relayed through it

    def reweigh(self, weight: np.ndarray) -> None:
        """Set PXN's weights in ``weight`` (all ones): a member sends nothing directly
        to a rail it relays to, a relay once more per member it relays for (whole
        numbers: exact in any order)."""
        rails = self.found.shape[1]
        sends = np.take(self.found, self.server, axis=0)
        sends[np.arange(len(self.members)), self.rail] = False
        if len(self.members) == len(weight):  # every member relays: no rows to pick
            weight[:, :rails] = ~sends
        else:
            weight[self.members, :rails] = ~sends
        cell, rail = np.nonzero(self.found)
        weight[self.relay[cell, rail], rail] += self.relaying[cell, rail]

    @property
    def _moving(self) -> np.ndarray:
        """(cells, rails): the pairs each first hop of the cell carries, 0 where none."""
        return np.where(self.found, self.targets, 0)

    def moved(self, pair_bytes: np.ndarray) -> tuple[int, float]:
        """Pairs sent through a relay, and their bytes per step."""
        cells = self._moving * self.relaying
        per_cell = cells.sum(axis=1)
        return int(per_cell.sum()), float((per_cell * pair_bytes[self.lead]).sum())

    def hops_sent(self, pair_bytes: np.ndarray) -> np.ndarray:
        """Bytes per step each able member sends to its relays."""
        moving = self._moving
        own = moving[self.server, self.rail]  # no first hop to its own rail
        return (moving.sum(axis=1)[self.server] - own) * pair_bytes[self.members]

    def hops_received(self, pair_bytes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The relays' nodes and the bytes per step each receives as first hops."""
        cell, rail = np.nonzero(self.found & (self.targets > 0))
        per = self.targets[cell, rail] * self.relaying[cell, rail]
        return self.via[cell, rail], per * pair_bytes[self.lead[cell]]

    def listed(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The first hops as flows: (member, relay node, pairs), member by member, rail
        by rail."""
        hops = np.take(self.found & (self.targets > 0), self.server, axis=0)
        hops[np.arange(len(self.members)), self.rail] = False
        at, rail = np.nonzero(hops)
        cell = self.server[at]
        return self.members[at], self.via[cell, rail], self.targets[cell, rail]


def _relayed(relays: Relays, node: np.ndarray, row: np.ndarray, gid: np.ndarray,
             domain: np.ndarray, across: np.ndarray) -> Relayed | None:
    """PXN's relays per server cell (:class:`Relayed`); ``None`` where a relay is not a
    member of its server cell's row and domain. ``gid``, ``domain``: per member;
    ``across``: per member and class, the members of its row outside its domain."""
    rails = relays.rails
    rail = relays.rail[node]
    able = (domain >= 0) & (rail >= 0)
    members = np.flatnonzero(able)
    # the relay keys (group, system, rail) are looked up once per server cell, for every
    # rail: the members of one server in one group share them
    keys = gid[members] * relays.systems + relays.system[node[members]]
    _, first, server = np.unique(keys, return_index=True, return_inverse=True)
    server = server.ravel()
    cells = len(first)
    found, via = relays.find(((keys[first] * rails)[:, None] + np.arange(rails)).ravel())
    found, via = found.reshape(cells, rails), via.reshape(cells, rails)
    member = members[first]  # one member per cell: row, domain and counts are the cell's
    cell, rail_to = np.nonzero(found)
    relay = np.full((cells, rails), -1, np.int64)
    at = _members_at(node, row, row[member[cell]], via[cell, rail_to])
    if at is None or not (domain[at] == domain[member[cell]]).all():
        return None
    relay[cell, rail_to] = at
    on_rail = np.bincount(server * rails + rail[members], minlength=cells * rails)
    relaying = np.bincount(server, minlength=cells)[:, None] - on_rail.reshape(cells, rails)
    return Relayed(members, rail[members], server, found, via, relay, member,
                   across[member, :rails].astype(np.int64), relaying)


def _members_at(node: np.ndarray, row: np.ndarray, rows: np.ndarray, nodes: np.ndarray
                ) -> np.ndarray | None:
    """The member of row ``rows[i]`` at node ``nodes[i]``, for each ``i``; ``None`` when
    one is not a member of that row. A node in one row at most (groups that do not
    share ranks, as a collective's) is found by a table from node to member, else by
    sorting the (row, node) keys."""
    if not len(nodes):
        return np.zeros(0, np.int64)
    members = np.arange(len(node))
    span = max(int(node.max()), int(nodes.max())) + 1  # node numbers below it
    at = np.full(span, -1, np.int64)
    at[node] = members
    if (at[node] == members).all():  # each node once
        found = at[nodes]
        if ((found >= 0) & (row[np.maximum(found, 0)] == rows)).all():
            return found
        return None
    order = np.lexsort((node, row))
    flat = row[order] * span + node[order]
    wanted = rows * span + nodes
    pos = np.minimum(np.searchsorted(flat, wanted), len(flat) - 1)
    if not (flat[pos] == wanted).all():
        return None
    return order[pos]


def _local_flows(shape: tuple[int, str, int, float], node: np.ndarray, row: np.ndarray,
                 gid: np.ndarray, pair_bytes: np.ndarray, domain: np.ndarray,
                 first: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> Phase:
    """The flows inside scale-up domains: every pair of a row in one domain, and the PXN
    first hops (one flow per member and relay, all its pairs' bytes)."""
    in_domain = domain >= 0
    order = np.lexsort((domain, row))
    cell = np.r_[True, (row[order][1:] != row[order][:-1])
                 | (domain[order][1:] != domain[order][:-1])]
    start = np.flatnonzero(cell)
    size = np.diff(np.r_[start, len(order)])
    size_of = np.repeat(size, size)
    start_of = np.repeat(start, size)
    keep = in_domain[order] & (size_of > 1)
    owner = np.repeat(np.flatnonzero(keep), size_of[keep])
    within = np.arange(len(owner)) - np.repeat(np.cumsum(size_of[keep]) - size_of[keep],
                                               size_of[keep])
    partner = start_of[owner] + within
    pairs = partner != owner
    src_m, dst_m = order[owner[pairs]], order[partner[pairs]]
    src, dst = node[src_m], node[dst_m]
    nbytes = pair_bytes[src_m]
    group = gid[row[src_m]]
    if first is not None:
        member, via, count = first
        src = np.concatenate([src, node[member]])
        dst = np.concatenate([dst, via])
        nbytes = np.concatenate([nbytes, pair_bytes[member] * count])
        group = np.concatenate([group, gid[row[member]]])
    return Phase(src, dst, nbytes, group.astype(np.int32), *shape)


def _cells(keys: tuple[np.ndarray, ...], members: int,
           within: np.ndarray | None = None) -> np.ndarray:
    """Per member (of ``members``), the number of its cell: members whose ``keys`` all
    equal share one, numbered in key order; ``within``, the cells of keys found
    before these (``_cells((b,), m, _cells((a,), m))`` is ``_cells((a, b), m)``)."""
    cell = np.zeros(members, np.int64) if within is None else within
    for key in keys:
        _, cell = np.unique(cell * (int(key.max()) - int(key.min()) + 1)
                            + (key - key.min()), return_inverse=True)
    return cell


def _class_counts(cell: np.ndarray, cls: np.ndarray, classes: int) -> np.ndarray:
    """Per member (m, ``classes``), how many members of its cell (:func:`_cells`) are of
    each class: the column sums of the members' one-hot classes, counted, as floats
    (whole numbers: products with the float weights and their sums are exact)."""
    return np.take(_class_table(cell, cls, classes), cell, axis=0)


def _class_table(cell: np.ndarray, cls: np.ndarray, classes: int) -> np.ndarray:
    """Per cell (cells, ``classes``), how many of its members are of each class
    (floats, whole numbers)."""
    cells = int(cell.max()) + 1 if len(cell) else 0
    counts = np.bincount(cell * classes + cls, minlength=cells * classes)
    return counts.reshape(cells, classes).astype(float)
