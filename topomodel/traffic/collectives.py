"""Collective operations as :class:`~topomodel.traffic.phases.Traffic`: flows in bytes per step.

:func:`collective_traffic` turns one collective, run by one or more communicator groups
at the same time, into phases of flows between node numbers of a fabric. Everything is
generated with array arithmetic over a (groups x ranks) array, so a ring over 131,072
ranks or a direct AlltoAll over 2,048 groups of 64 (8.3 M flows) takes a fraction of a
second.

Sizes
-----
``size_bytes`` (S) follows the nccl-tests conventions, so ``algbw = S / time`` and
``busbw = algbw * busbw_factor(collective, n)`` compare with published nccl-tests figures:

============= =========================================================================
AllReduce     S = the buffer every rank holds (and ends with, reduced)
AllGather     S = the total receive buffer: n ranks x a chunk of S/n each
ReduceScatter S = the total send buffer: each rank ends with its reduced S/n
AlltoAll      S = each rank's send buffer: S/n to every peer (itself included)
Broadcast     S = the buffer, sent from the root (rank 0 of the group)
Reduce        S = the buffer, reduced to the root (rank 0 of the group)
SendRecv      S = bytes each rank sends to the next rank of its group: rank i -> i+1
              for i < n-1 (no wraparound; a group of 2 is one flow)
============= =========================================================================

Algorithms (``ALGORITHMS``; the first of each collective is its default)
-------------------------------------------------------------------------
- ``ring``: AllReduce is one phase, rank i -> (i+1) mod n, S/n bytes, 2(n-1) steps;
  AllGather and ReduceScatter the same with n-1 steps. Broadcast is a pipelined chain
  root -> 1 -> ... -> n-1 (one phase, S bytes per hop, one step); Reduce the reverse chain.
- ``tree`` (AllReduce): NCCL's double binary tree built over the group's ranks (NCCL
  builds it over nodes; here every rank is a tree node). Tree 1 is NCCL's ``ncclGetBtree``:
  the in-order binary tree rooted at rank 0 in which rank r's parent is found from r's
  lowest set bit b: ``(r ^ b) | (b << 1)``, or ``r ^ b`` if that is not a rank. Tree 2 is
  tree 1 mirrored (rank r <-> n-1-r) when n is even and shifted by one rank when n is odd,
  so no rank is a leaf in both. Each tree carries S/2: a reduce phase (every child sends
  S/2 to its parent in each tree) and a broadcast phase (every parent sends S/2 to each
  child), one step each: NCCL pipelines the buffer in chunks, so the bandwidth term is the
  whole S/2 per tree edge and the latency is that of the deepest path (see below).
- ``rhd`` (AllReduce, AllGather, ReduceScatter; n a power of two): Rabenseifner's
  reduce-scatter by recursive halving then allgather by recursive doubling, in MPICH's
  order. Halving phase k (k = 0 .. log2 n - 1) pairs rank r with r XOR 2^k and sends
  S/2^(k+1); doubling mirrors it, distances n/2, ..., 2, 1 with S/n, ..., S/4, S/2. In
  both halves a phase at distance d sends S/(2d), so the largest transfers go between the
  nearest ranks (often in one scale-up domain). AllGather is the doubling half alone,
  ReduceScatter the halving half.
- ``direct`` (AlltoAll): one phase with every ordered pair, S/n bytes each.
  ``pairwise`` (AlltoAll): n-1 phases, phase k sends rank i -> (i+k) mod n, S/n bytes.
- ``p2p`` (SendRecv): one phase, rank i -> i+1, S bytes.
- ``hierarchical`` (AllReduce, AllGather, ReduceScatter): each group is split into
  *domain parts*, its ranks in one scale-up domain (``domain`` -1: each rank alone), in
  order of first appearance, ranks in rank order inside a part; every part must hold the
  same number m of ranks (p = n/m parts). The rank at position j of a part talks to the
  ranks at position j of the other parts. AllReduce: ring ReduceScatter inside each part
  (S/m per step, m-1 steps), ring AllReduce of the S/m piece across parts (S/(m p) per
  step, 2(p-1) steps), ring AllGather inside each part (S/m, m-1 steps). AllGather: ring
  AllGather across parts first (the own chunk S/n, p-1 steps), then inside each part
  (S/m, m-1 steps), so the small transfers cross domains. ReduceScatter mirrors it:
  inside (S/m, m-1 steps), then across (S/n, p-1 steps). Phases with no steps (m = 1 or
  p = 1) are left out.
- ``innetwork`` (AllReduce; only where :func:`in_network_capable`): the switches reduce.
  Case A (NVLS): the whole group in one system whose scale-up switch chips (kind
  ``scaleup_switch``, same system) all have ``in_network_reduction``; phase "up": every
  rank sends S to the chips it is linked to, split in proportion to its cables to each
  chip (5:5:4:4 on an HGX H100); phase "down": each chip returns the same share. Case B
  (SHARP): the group in a fat-tree whose switches have ``in_network_reduction``; every
  rank sends S, split evenly over its NIC legs (one per plane), to the leaf of each leg;
  the aggregation root of each plane is the common leaf if the group has one leaf there,
  else the lowest-numbered spine linked to the leaf of the group's first rank if every
  leaf of the group links to it, else the lowest-numbered core linked to that spine if
  every leaf reaches it through some spine. Phase "up": rank -> leaf (S / legs) and
  leaf -> root (the leaf's reduced stream, S / planes); phase "down": root -> leaf and
  leaf -> rank, the same bytes. Flows have switch endpoints; switches in between only
  forward. Case A is used where it applies, else case B.

Latency convention
------------------
A phase costs ``steps x (slowest link's bytes / capacity + latency)``. Here
``messages_per_step`` is the number of message latencies (path latency plus per-message
overhead) one step costs: 1 for ring steps, rhd and pairwise phases and in-network
phases; n-1 for a direct AlltoAll (each rank posts n-1 messages) and for a pipelined
Broadcast/Reduce chain (the first chunk crosses n-1 hops one after another); the depth
of the deeper tree for the tree's reduce and broadcast phases.

Concurrent groups
-----------------
All groups run at once and their flows share phases; every flow's ``group`` is the index
of its communicator. Groups of different sizes are generated per size and merged: phases
with the same label run together (in an order consistent with every group's sequence), a
merged phase repeats as often as its longest member, and a shorter member's bytes per step
are scaled so its total is kept (as :func:`topomodel.traffic.phases.concurrent` does). A group
of one rank sends nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from topomodel.fabric.tables import Fabric
from topomodel.traffic.communicators import (
    CollectiveError,
    _buckets,
    _check_collective,
    _check_groups,
    _group_names,
    _Groups,
)
from topomodel.traffic.innetwork import _in_network_phases, _plan_in_network
from topomodel.traffic.phases import Phase, Traffic

ALGORITHMS: dict[str, tuple[str, ...]] = {
    "allreduce": ("ring", "tree", "rhd", "hierarchical", "innetwork"),
    "allgather": ("ring", "rhd", "hierarchical"),
    "reducescatter": ("ring", "rhd", "hierarchical"),
    "alltoall": ("direct", "pairwise"),
    "broadcast": ("ring",),
    "reduce": ("ring",),
    "sendrecv": ("p2p",),
}
"""Algorithms each collective supports; the first is the default."""


def busbw_factor(collective: str, n: int) -> float:
    """The nccl-tests bus-bandwidth factor (busbw = algbw x factor, both in bytes/s).

    AllReduce 2(n-1)/n; AllGather, ReduceScatter and AlltoAll (n-1)/n; Broadcast, Reduce
    and SendRecv 1.

    Raises
    ------
    CollectiveError
        For an unknown collective or n < 1.

    Examples
    --------
    >>> busbw_factor("allreduce", 8), busbw_factor("allgather", 8), busbw_factor("reduce", 8)
    (1.75, 0.875, 1.0)
    """
    _check_collective(collective)
    if n < 1:
        raise CollectiveError(f"a group has at least one rank, got n={n}")
    if collective == "allreduce":
        return 2.0 * (n - 1) / n
    if collective in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    return 1.0


def double_binary_tree(n: int) -> tuple[np.ndarray, np.ndarray]:
    """NCCL's double binary tree over ranks 0..n-1: each rank's parent in tree 1 and 2.

    A root's parent is -1. Tree 1 is rooted at rank 0 (which has one child); tree 2 is
    tree 1 mirrored (n even, root n-1) or shifted by one rank (n odd, root 1).

    Examples
    --------
    >>> t1, t2 = double_binary_tree(8)
    >>> t1.tolist()
    [-1, 2, 4, 2, 0, 6, 4, 6]
    >>> t2.tolist()
    [1, 3, 1, 7, 5, 3, 5, -1]
    """
    if n < 1:
        raise CollectiveError(f"a group has at least one rank, got n={n}")
    ranks = np.arange(n, dtype=np.int64)
    tree1 = _btree_parents(ranks, n)
    if n % 2 == 0:
        mirrored = tree1[n - 1 - ranks]
        tree2 = np.where(mirrored < 0, -1, n - 1 - mirrored)
    else:
        shifted = tree1[(ranks - 1) % n]
        tree2 = np.where(shifted < 0, -1, (shifted + 1) % n)
    return tree1, tree2


def tree_depth(parents: np.ndarray) -> int:
    """Hops from the deepest rank to the root of a tree given by parent numbers.

    Examples
    --------
    >>> tree_depth(double_binary_tree(8)[0])
    3
    """
    current = np.arange(len(parents))
    for depth in range(len(parents) + 1):
        up = parents[current]
        if (up < 0).all():
            return depth
        current = np.where(up < 0, current, up)
    raise CollectiveError("the parent array has a cycle")


def collective_traffic(fabric: Fabric, collective: str, groups: Sequence[np.ndarray],
                       size_bytes: float, *, algorithm: str,
                       group_names: Sequence[str] | None = None) -> Traffic:
    """The flows of one collective of ``size_bytes`` (bytes, nccl-tests convention) per group.

    Parameters
    ----------
    fabric
        The fabric the groups live on.
    collective
        One of :data:`COLLECTIVES`.
    groups
        Communicators that run at the same time, each an int array of accelerator node
        numbers in rank order (or one 2-D array, a row per group).
    size_bytes
        S in bytes, as nccl-tests counts it (see the module docstring).
    algorithm
        One of ``ALGORITHMS[collective]``.
    group_names
        A name per group; default ``g0``, ``g1``, ...

    Returns
    -------
    Traffic
        Phases in order; every flow's ``group`` indexes ``groups``.

    Raises
    ------
    CollectiveError
        (a ``ValueError``) for an unknown collective or algorithm, a negative size, a
        group that is empty, repeats a node or holds a node that is not an accelerator,
        ``rhd`` on a group whose size is not a power of two, ``hierarchical`` on a group
        whose domain parts differ in size, ``innetwork`` where the switches cannot reduce.
    """
    _check_collective(collective)
    supported = ALGORITHMS[collective]
    if algorithm not in supported:
        raise CollectiveError(f"{collective} has no algorithm {algorithm!r}; choose from"
                              f" {', '.join(supported)}")
    size = float(size_bytes)
    if not math.isfinite(size) or size < 0:
        raise CollectiveError(f"size_bytes must be a finite number >= 0, got {size_bytes!r}")
    rows = _check_groups(fabric, groups)
    names = _group_names(group_names, len(rows))
    if algorithm == "innetwork":
        plan = _plan_in_network(fabric, rows, names)
        return Traffic(_in_network_phases(plan, size), names, algorithm, plan.notes)
    make = _GENERATORS[algorithm]
    per_bucket = []
    for gid, ranks in _buckets(rows):
        if ranks.shape[1] > 1:
            per_bucket.extend(make(collective, _Groups(ranks, gid, names, fabric), size))
    phases = _merge(per_bucket)
    return Traffic(phases, names, algorithm, (_NOTES[algorithm],))


def _merge(per_bucket: list[list[Phase]]) -> tuple[Phase, ...]:
    """Phases of different group sizes, merged by label in an order all of them respect."""
    if len(per_bucket) <= 1:
        return tuple(per_bucket[0]) if per_bucket else ()
    first: dict[str, int] = {}
    before: dict[str, set[str]] = {}
    for phases in per_bucket:
        for i, p in enumerate(phases):
            first.setdefault(p.label, len(first))
            before.setdefault(p.label, set())
            if i:
                before[p.label].add(phases[i - 1].label)
    sequence: list[str] = []
    done: set[str] = set()
    while len(sequence) < len(first):
        ready = [label for label in first if label not in done and before[label] <= done]
        label = ready[0] if ready else next(la for la in first if la not in done)
        sequence.append(label)
        done.add(label)
    merged = []
    for label in sequence:
        members = [p for phases in per_bucket for p in phases if p.label == label]
        if len(members) == 1:
            merged.append(members[0])
            continue
        steps = max(p.steps for p in members)
        merged.append(Phase(
            np.concatenate([p.src for p in members]),
            np.concatenate([p.dst for p in members]),
            np.concatenate([p.bytes * (p.steps / steps) for p in members]),
            np.concatenate([p.group for p in members]),
            steps, label, max(p.messages_per_step for p in members)))
    return tuple(merged)


def _ring(collective: str, g: _Groups, size: float) -> list[list[Phase]]:
    n = g.n
    a = np.arange(n)
    nxt = (a + 1) % n
    if collective == "allreduce":
        return [[g.phase(a, nxt, size / n, steps=2 * (n - 1), label="ring allreduce")]]
    if collective in ("allgather", "reducescatter"):
        return [[g.phase(a, nxt, size / n, steps=n - 1, label=f"ring {collective}")]]
    chain = a[:-1]
    if collective == "broadcast":
        return [[g.phase(chain, chain + 1, size, steps=1, label="chain broadcast",
                         messages=n - 1)]]
    return [[g.phase(chain + 1, chain, size, steps=1, label="chain reduce", messages=n - 1)]]


def _tree(collective: str, g: _Groups, size: float) -> list[list[Phase]]:
    tree1, tree2 = double_binary_tree(g.n)
    child = np.concatenate([np.flatnonzero(tree1 >= 0), np.flatnonzero(tree2 >= 0)])
    parent = np.concatenate([tree1[tree1 >= 0], tree2[tree2 >= 0]])
    depth = max(tree_depth(tree1), tree_depth(tree2))
    return [[g.phase(child, parent, size / 2, steps=1, label="tree reduce", messages=depth),
             g.phase(parent, child, size / 2, steps=1, label="tree broadcast",
                     messages=depth)]]


def _rhd(collective: str, g: _Groups, size: float) -> list[list[Phase]]:
    n = g.n
    if n & (n - 1):
        raise CollectiveError("recursive halving-doubling needs a power-of-two group size"
                              f" (group {g.names[int(g.gid[0])]!r} has {n} ranks)")
    a = np.arange(n)
    halving = [1 << k for k in range(n.bit_length() - 1)]
    phases = []
    if collective in ("allreduce", "reducescatter"):
        phases += [g.phase(a, a ^ d, size / (2 * d), steps=1,
                           label=f"recursive halving, distance {d}") for d in halving]
    if collective in ("allreduce", "allgather"):
        phases += [g.phase(a, a ^ d, size / (2 * d), steps=1,
                           label=f"recursive doubling, distance {d}") for d in halving[::-1]]
    return [phases]


def _direct(collective: str, g: _Groups, size: float) -> list[list[Phase]]:
    n = g.n
    a = np.repeat(np.arange(n), n)
    b = np.tile(np.arange(n), n)
    keep = a != b
    return [[g.phase(a[keep], b[keep], size / n, steps=1, label="direct alltoall",
                     messages=n - 1)]]


def _pairwise(collective: str, g: _Groups, size: float) -> list[list[Phase]]:
    n = g.n
    a = np.arange(n)
    return [[g.phase(a, (a + k) % n, size / n, steps=1, label=f"pairwise shift {k}")
             for k in range(1, n)]]


def _p2p(collective: str, g: _Groups, size: float) -> list[list[Phase]]:
    a = np.arange(g.n - 1)
    return [[g.phase(a, a + 1, size, steps=1, label="sendrecv")]]


def _hierarchical(collective: str, g: _Groups, size: float) -> list[list[Phase]]:
    out = []
    for part in _domain_parts(g):
        parts, m = part.ranks.shape[1] // part.m, part.m
        n = parts * m
        a = np.arange(n)
        inside = (a // m) * m + (a % m + 1) % m
        across = ((a // m + 1) % parts) * m + a % m
        rs_in = ("ring reduce-scatter inside domains", inside, size / m, m - 1)
        ag_in = ("ring allgather inside domains", inside, size / m, m - 1)
        plan = {
            "allreduce": [rs_in, ("ring allreduce across domains", across, size / n,
                                  2 * (parts - 1)), ag_in],
            "allgather": [("ring allgather across domains", across, size / n, parts - 1),
                          ag_in],
            "reducescatter": [rs_in, ("ring reduce-scatter across domains", across,
                                      size / n, parts - 1)],
        }[collective]
        out.append([part.groups.phase(a, b, nbytes, steps=steps, label=label)
                    for label, b, nbytes, steps in plan if steps > 0])
    return out


@dataclass(frozen=True)
class _Parts:
    groups: _Groups  # ranks permuted: part by part, m ranks each
    m: int

    @property
    def ranks(self) -> np.ndarray:
        return self.groups.ranks


def _domain_parts(g: _Groups) -> list[_Parts]:
    """Reorder each group's ranks part by part (domain parts in order of appearance)."""
    ranks = g.ranks
    count, n = ranks.shape
    domain = g.fabric.nodes["domain"].to_numpy()[ranks]
    key = np.where(domain >= 0, domain, -1 - ranks)  # -1: every rank its own part
    order = np.argsort(key, axis=1, kind="stable")
    sorted_key = np.take_along_axis(key, order, 1)
    start = np.ones((count, n), bool)
    start[:, 1:] = sorted_key[:, 1:] != sorted_key[:, :-1]
    run_start = np.maximum.accumulate(np.where(start, np.arange(n), 0), axis=1)
    first_rank = np.take_along_axis(order, run_start, 1)
    perm = np.take_along_axis(order, np.argsort(first_rank * n + order, axis=1), 1)
    # part sizes: run lengths of the (row-major) run starts
    flat = np.flatnonzero(start.ravel())
    row = flat // n
    ends = np.append(flat[1:], count * n)
    ends = np.where(np.append(row[1:], count) != row, (row + 1) * n, ends)
    lengths = ends - flat
    offsets = np.searchsorted(row, np.arange(count))
    smallest = np.minimum.reduceat(lengths, offsets)
    largest = np.maximum.reduceat(lengths, offsets)
    uneven = np.flatnonzero(smallest != largest)
    if len(uneven):
        i = int(uneven[0])
        sizes = lengths[offsets[i]:offsets[i + 1] if i + 1 < count else len(lengths)]
        raise CollectiveError(
            f"hierarchical needs the same number of ranks in every scale-up domain part of a"
            f" group; group {g.names[int(g.gid[i])]!r} has parts of"
            f" {', '.join(map(str, sizes.tolist()))} ranks")
    permuted = np.take_along_axis(ranks, perm, 1)
    out = []
    for m in dict.fromkeys(smallest.tolist()):
        rows = np.flatnonzero(smallest == m)
        out.append(_Parts(_Groups(permuted[rows], g.gid[rows], g.names, g.fabric), int(m)))
    return out


_Generator = Callable[[str, _Groups, float], list[list[Phase]]]


_GENERATORS: dict[str, _Generator] = {
    "ring": _ring, "tree": _tree, "rhd": _rhd, "direct": _direct, "pairwise": _pairwise,
    "p2p": _p2p, "hierarchical": _hierarchical,
}


_NOTES = {
    "ring": "ring: one phase per collective, S/n per step; Broadcast/Reduce a pipelined chain"
            " from/to rank 0 with n-1 message latencies",
    "tree": "tree: NCCL double binary tree over each group's ranks, S/2 per tree edge per"
            " phase, latency = tree depth messages",
    "rhd": "rhd: recursive halving (distance 1, 2, ...) then doubling (..., 2, 1), S/(2d)"
           " per flow at distance d",
    "direct": "direct: every ordered pair at once, S/n each, n-1 messages per rank",
    "pairwise": "pairwise: n-1 phases, rank i -> i+k, S/n each",
    "p2p": "sendrecv: rank i -> i+1 of each group, S each",
    "hierarchical": "hierarchical: rings inside scale-up domain parts and across them among"
                    " ranks of the same position",
}


def _btree_parents(ranks: np.ndarray, n: int) -> np.ndarray:
    """NCCL ``ncclGetBtree`` parents: from the lowest set bit b of r, ``(r^b)|(b<<1)``."""
    bit = ranks & -ranks
    up = (ranks ^ bit) | (bit << 1)
    up = np.where(up >= n, ranks ^ bit, up)
    return np.where(ranks == 0, -1, up)
