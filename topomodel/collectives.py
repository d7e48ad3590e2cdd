"""Collective operations as :class:`~topomodel.traffic.Traffic`: flows in bytes per step.

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
are scaled so its total is kept (as :func:`topomodel.traffic.concurrent` does). A group
of one rank sends nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from topomodel.errors import TopomodelError
from topomodel.fabric import Fabric, labels
from topomodel.traffic import Phase, Traffic

COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce",
               "sendrecv")

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


class CollectiveError(TopomodelError, ValueError):
    """A collective that cannot be generated as asked (bad group, algorithm or size)."""


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


def in_network_capable(fabric: Fabric, groups: Sequence[np.ndarray]) -> bool:
    """Whether every group can AllReduce in the switches (NVLS in-system or SHARP).

    See the module docstring (``innetwork``) for the two cases. Groups of one rank need
    no network and count as capable.
    """
    rows = _check_groups(fabric, groups)
    try:
        _plan_in_network(fabric, rows, _group_names(None, len(rows)))
    except CollectiveError:
        return False
    return True


# ---------------------------------------------------------------------------------------
# groups


@dataclass(frozen=True)
class _Groups:
    """Groups of one size: ``ranks[g, i]`` is rank i of group ``gid[g]``."""

    ranks: np.ndarray  # (groups, n) int64 node numbers
    gid: np.ndarray  # (groups,) int32 index into the caller's groups
    names: tuple[str, ...]
    fabric: Fabric

    @property
    def n(self) -> int:
        return int(self.ranks.shape[1])

    def phase(self, a: np.ndarray, b: np.ndarray, bytes_per_flow: float | np.ndarray, *,
              steps: int, label: str, messages: int = 1) -> Phase:
        """Flows rank ``a[k]`` -> rank ``b[k]`` (rank positions) in every group."""
        count, flows = len(self.gid), len(a)
        src = self.ranks.take(a, axis=1).ravel()  # take: C order, ~10x faster than [:, a]
        dst = self.ranks.take(b, axis=1).ravel()
        if np.ndim(bytes_per_flow) == 0:
            nbytes = np.full(count * flows, float(bytes_per_flow))
        else:
            nbytes = np.tile(np.asarray(bytes_per_flow, dtype=float), count)
        group = np.repeat(self.gid, flows)
        return Phase(src, dst, nbytes, group, steps, label, messages)


def _check_collective(collective: str) -> None:
    if collective not in COLLECTIVES:
        raise CollectiveError(f"unknown collective {collective!r}; choose from"
                              f" {', '.join(COLLECTIVES)}")


def _check_groups(fabric: Fabric, groups: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Groups as int64 arrays; refuse empty groups, repeats and non-accelerators."""
    if isinstance(groups, np.ndarray) and groups.ndim == 2:
        rows = list(groups.astype(np.int64, copy=False))
    else:
        rows = [np.asarray(g, dtype=np.int64).ravel() for g in groups]
    if not rows:
        raise CollectiveError("no groups given")
    lengths = np.fromiter((len(r) for r in rows), np.int64, len(rows))
    if (lengths == 0).any():
        raise CollectiveError(f"group {int(np.argmin(lengths))} has no ranks")
    is_acc = (fabric.nodes["kind"] == "accelerator").to_numpy()
    for _, ranks in _buckets(rows):
        bad = (ranks < 0) | (ranks >= len(is_acc))
        if not bad.any():
            bad = ~is_acc[ranks]
        if bad.any():
            raise CollectiveError(f"node {int(ranks[bad][0])} is not an accelerator of the"
                                  " fabric")
        ordered = np.sort(ranks, axis=1)
        repeated = ordered[:, 1:] == ordered[:, :-1]
        if repeated.any():
            raise CollectiveError(f"node {int(ordered[:, 1:][repeated][0])} appears twice in"
                                  " one group")
    return rows


def _group_names(names: Sequence[str] | None, count: int) -> tuple[str, ...]:
    if names is None:
        return tuple(f"g{i}" for i in range(count))
    if len(names) != count:
        raise CollectiveError(f"{len(names)} group names for {count} groups")
    return tuple(str(n) for n in names)


def _buckets(rows: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(group indices, 2-D ranks) per group size, sizes in order of first appearance."""
    sizes = np.fromiter((len(r) for r in rows), np.int64, len(rows))
    if (sizes == sizes[0]).all():
        return [(np.arange(len(rows), dtype=np.int32), np.stack(rows))]
    out = []
    for size in dict.fromkeys(sizes.tolist()):
        gid = np.flatnonzero(sizes == size).astype(np.int32)
        out.append((gid, np.stack([rows[i] for i in gid])))
    return out


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


# ---------------------------------------------------------------------------------------
# algorithms: each returns one list of phases per bucket of same-shaped groups


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


# ---------------------------------------------------------------------------------------
# in-network reduction


@dataclass(frozen=True)
class _InNetworkPlan:
    """Up-phase flows as fractions of S; the down phase reverses them."""

    src: np.ndarray
    dst: np.ndarray
    fraction: np.ndarray
    group: np.ndarray
    notes: tuple[str, ...]


_Flows = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # src, dst, fraction, group


def _expand(keys: np.ndarray, sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each entry of ``keys``, every index into ``sorted_keys`` equal to it.

    Returns (which entry of ``keys``, index into ``sorted_keys``) pairs.
    """
    lo = np.searchsorted(sorted_keys, keys, "left")
    count = np.searchsorted(sorted_keys, keys, "right") - lo
    which = np.repeat(np.arange(len(keys)), count)
    within = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
    return which, np.repeat(lo, count) + within


def _plan_in_network(fabric: Fabric, rows: list[np.ndarray],
                     names: tuple[str, ...]) -> _InNetworkPlan:
    nodes, links = fabric.nodes, fabric.links
    n_nodes = len(nodes)
    kind = _codes(nodes["kind"], _KINDS)
    model = pd.Categorical(nodes["model"])
    capable = np.append([bool(getattr(fabric.catalog.entries.get(str(m)), "in_network_reduction",
                                      False)) for m in model.categories], False)[model.codes]
    system = nodes["system"].to_numpy()
    live = ~links["failed"].to_numpy()
    lsrc = links["src"].to_numpy()[live]
    ldst = links["dst"].to_numpy()[live]
    lcables = links["cables"].to_numpy()[live].astype(float)

    sizes = np.fromiter((len(r) for r in rows), np.int64, len(rows))
    active = np.flatnonzero(sizes > 1)
    if not len(active):
        return _empty_plan()
    ranks = np.concatenate([rows[i] for i in active])
    rank_group = np.repeat(active, sizes[active]).astype(np.int32)
    offsets = np.concatenate([[0], np.cumsum(sizes[active])[:-1]])

    # case A: one system, every rank's chip links to reducing chips
    to_chip = (kind[lsrc] == _ACC) & (kind[ldst] == _CHIP) & (
        system[lsrc] == system[ldst])
    order = np.argsort(lsrc[to_chip], kind="stable")
    chip_src, chip_dst = lsrc[to_chip][order], ldst[to_chip][order]
    chip_cables = lcables[to_chip][order]
    total = np.bincount(chip_src, weights=chip_cables, minlength=n_nodes)
    reducing = np.bincount(chip_src, weights=chip_cables * capable[chip_dst], minlength=n_nodes)
    rank_ok = (total[ranks] > 0) & (reducing[ranks] == total[ranks])
    rank_sys = system[ranks]
    one_system = (np.minimum.reduceat(rank_sys, offsets) == np.maximum.reduceat(rank_sys, offsets)
                  ) & (np.minimum.reduceat(nodes["domain"].to_numpy()[ranks], offsets) >= 0)
    case_a = one_system & np.minimum.reduceat(rank_ok, offsets)
    in_a = np.repeat(case_a, sizes[active])

    parts: list[_Flows] = []
    if in_a.any():
        which, idx = _expand(ranks[in_a], chip_src)
        src = ranks[in_a][which]
        parts.append((src, chip_dst[idx], chip_cables[idx] / total[src],
                      rank_group[in_a][which]))
    notes = []
    if case_a.any():
        notes.append(f"innetwork: {int(case_a.sum())} group(s) reduce in scale-up switch chips"
                     " (NVLS), S split by cables")
    if not case_a.all():
        b_groups = active[~case_a]
        problem, flows, roots = _sharp_plan(fabric, ranks[~in_a], rank_group[~in_a], kind,
                                            capable, lsrc, ldst)
        if problem is not None:
            first, reason = problem
            name = names[first]
            members = rows[first]
            chips = np.unique(chip_dst[np.isin(chip_src, members)])
            models = ", ".join(sorted(set(nodes["model"].to_numpy()[chips].astype(str))))
            why_a = ("its ranks are not all in one scale-up system"
                     if not one_system[np.searchsorted(active, first)]
                     else "its ranks reach no scale-up switch chip" if (total[members] == 0).any()
                     else f"its scale-up switch chips ({models}) do not all reduce in the"
                     " network")
            raise CollectiveError(f"in-network reduction does not apply to group {name!r}:"
                                  f" {why_a}, and {reason}")
        parts.append(flows)
        tiers = labels(nodes["tier"])[roots]
        counts = ", ".join(f"{c} at {t}" for t, c in zip(*np.unique(tiers, return_counts=True),
                                                          strict=True))
        notes.append(f"innetwork: {len(b_groups)} group(s) reduce in scale-out switches (SHARP);"
                     f" aggregation roots: {counts}")
    src, dst, fraction, group = (np.concatenate([p[k] for p in parts]) for k in range(4))
    return _InNetworkPlan(src, dst, fraction, group, tuple(notes))


def _empty_plan() -> _InNetworkPlan:
    empty = np.empty(0, np.int64)
    return _InNetworkPlan(empty, empty, np.empty(0), empty.astype(np.int32), ())


def _sharp_plan(fabric: Fabric, ranks: np.ndarray, rank_group: np.ndarray, kind: np.ndarray,
                capable: np.ndarray, lsrc: np.ndarray, ldst: np.ndarray
                ) -> tuple[tuple[int, str] | None, _Flows, np.ndarray]:
    """Case B flows (rank -> leaf, leaf -> root), or the first group that cannot, and why."""
    nodes = fabric.nodes
    failed: tuple[int, str] | None = None
    empty: _Flows = (np.empty(0, np.int64),) * 2 + (np.empty(0), np.empty(0, np.int32))
    # rank -> NIC: its host links, else the builder's rule (NIC local*nics//per)
    host = (kind[lsrc] == _ACC) & (kind[ldst] == _NIC)
    order = np.argsort(lsrc[host], kind="stable")
    host_src, host_dst = lsrc[host][order], ldst[host][order]
    which, idx = _expand(ranks, host_src)
    rank_pos, nic = which, host_dst[idx]
    has_host = np.zeros(len(ranks), bool)
    has_host[which] = True
    orphan = np.flatnonzero(~has_host)
    if len(orphan):
        nics = int(fabric.structure.get("nics_per_system", 0))
        per = int(fabric.structure.get("accelerators_per_system", 1))
        table = np.full((int(fabric.structure.get("systems", 0)), max(nics, 1)), -1)
        nic_nodes = np.flatnonzero(kind == _NIC)
        table[nodes["system"].to_numpy()[nic_nodes], nodes["local"].to_numpy()[nic_nodes]] = (
            nic_nodes)
        local = nodes["local"].to_numpy()[ranks[orphan]]
        extra = table[nodes["system"].to_numpy()[ranks[orphan]], local * nics // per] if (
            nics and len(table)) else np.full(len(orphan), -1)
        rank_pos = np.concatenate([rank_pos, orphan[extra >= 0]])
        nic = np.concatenate([nic, extra[extra >= 0]])
    # NIC -> leaf (one leg per plane)
    up = (kind[lsrc] == _NIC) & (kind[ldst] == _SWITCH)
    order = np.argsort(lsrc[up], kind="stable")
    up_src, up_dst = lsrc[up][order], ldst[up][order]
    which, idx = _expand(nic, up_src)
    legs = pd.DataFrame({"pos": rank_pos[which], "leaf": up_dst[idx]})
    legs = legs.sort_values(["pos", "leaf"], kind="stable", ignore_index=True)
    legs["group"] = rank_group[legs["pos"].to_numpy()]
    legs_per_rank = np.bincount(legs["pos"], minlength=len(ranks))
    if (legs_per_rank == 0).any():
        first = int(rank_group[np.argmin(legs_per_rank)])
        failed = (first, f"rank node {int(ranks[np.argmin(legs_per_rank)])} has no scale-out"
                         " NIC link")
    legs["fraction"] = 1.0 / legs_per_rank[legs["pos"].to_numpy()]
    legs["plane"] = nodes["plane"].to_numpy()[legs["leaf"].to_numpy()]
    legs["portion"] = legs.groupby(["pos", "plane"]).cumcount()
    # aggregation root per (group, plane)
    level = _codes(nodes["tier"], ("leaf", "spine", "core"))
    upward = (level[lsrc] >= 0) & (level[ldst] == level[lsrc] + 1)
    first_up = np.full(len(nodes), np.iinfo(np.int64).max)
    np.minimum.at(first_up, lsrc[upward], ldst[upward])
    first_up[first_up == np.iinfo(np.int64).max] = -1
    adjacency = np.sort(lsrc[upward] * len(nodes) + ldst[upward])

    def linked(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if not len(adjacency):
            return np.zeros(len(a), bool)
        keys = a * len(nodes) + b
        where = np.minimum(np.searchsorted(adjacency, keys), len(adjacency) - 1)
        found: np.ndarray = (b >= 0) & (adjacency[where] == keys)
        return found

    per_plane = legs.groupby(["group", "plane"], sort=True)
    planes = per_plane["leaf"].agg(["first", "nunique"]).reset_index()
    spine = first_up[planes["first"].to_numpy()]
    core = np.where(spine >= 0, first_up[np.maximum(spine, 0)], -1)
    leaf_root = legs[["group", "plane", "leaf"]].drop_duplicates()
    leaf_root = leaf_root.merge(planes.assign(spine=spine, core=core), on=["group", "plane"])
    leaf = leaf_root["leaf"].to_numpy()
    leaf_root["via_spine"] = linked(leaf, leaf_root["spine"].to_numpy())
    leaf_root["via_core"] = _reaches(leaf, leaf_root["core"].to_numpy(), lsrc[upward],
                                     ldst[upward], linked)
    reach = leaf_root.groupby(["group", "plane"], sort=True)[["via_spine", "via_core"]].all()
    root = np.where(planes["nunique"].to_numpy() == 1, planes["first"].to_numpy(),
                    np.where(reach["via_spine"].to_numpy(), spine,
                             np.where(reach["via_core"].to_numpy(), core, -1)))
    planes["root"] = root
    if failed is None and (root < 0).any():
        failed = (int(planes["group"].to_numpy()[np.argmax(root < 0)]),
                  "no single scale-out switch above all its leaves (aggregation root) was found")
    if failed is None:
        touched = np.concatenate([legs["leaf"].to_numpy(), root])
        unable = touched[~capable[touched]]
        if len(unable):
            bad = int(unable[0])
            groups = np.concatenate([legs["group"].to_numpy(), planes["group"].to_numpy()])
            failed = (int(groups[np.argmax(touched == bad)]),
                      f"scale-out switch {nodes['name'].iloc[bad]} ({nodes['model'].iloc[bad]})"
                      " has no in-network reduction")
    if failed is not None:
        return failed, empty, np.empty(0, np.int64)
    # the leaf's reduced stream: one copy of each portion it receives
    portions = legs.groupby(["group", "leaf", "portion"], sort=True)["fraction"].max()
    stream = portions.groupby(level=["group", "leaf"]).sum().reset_index()
    stream["plane"] = nodes["plane"].to_numpy()[stream["leaf"].to_numpy()]
    stream = stream.merge(planes[["group", "plane", "root"]], on=["group", "plane"])
    stream = stream[stream["leaf"] != stream["root"]]
    flows = (
        np.concatenate([ranks[legs["pos"].to_numpy()], stream["leaf"].to_numpy()]),
        np.concatenate([legs["leaf"].to_numpy(), stream["root"].to_numpy()]),
        np.concatenate([legs["fraction"].to_numpy(), stream["fraction"].to_numpy()]),
        np.concatenate([legs["group"].to_numpy(), stream["group"].to_numpy()]).astype(np.int32),
    )
    return None, flows, root


def _reaches(leaf: np.ndarray, core: np.ndarray, up_src: np.ndarray, up_dst: np.ndarray,
             linked: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """Whether each leaf reaches its core through one of the spines it links up to."""
    order = np.argsort(up_src, kind="stable")
    sorted_src, sorted_dst = up_src[order], up_dst[order]
    which, idx = _expand(leaf, sorted_src)
    ok = linked(sorted_dst[idx], core[which])
    return np.bincount(which, weights=ok, minlength=len(leaf)) > 0


def _in_network_phases(plan: _InNetworkPlan, size: float) -> tuple[Phase, ...]:
    if not len(plan.src):
        return ()
    nbytes = plan.fraction * size
    # The switches reduce and multicast chunk by chunk: the reduction going up and the
    # result coming down run at once, on opposite directions of the same links.
    return (Phase(np.concatenate([plan.src, plan.dst]), np.concatenate([plan.dst, plan.src]),
                  np.concatenate([nbytes, nbytes]), np.concatenate([plan.group, plan.group]),
                  1, "in-network reduce and multicast"),)


_KINDS = ("accelerator", "nic", "scaleup_switch", "switch")
_ACC, _NIC, _CHIP, _SWITCH = range(4)


def _codes(column: pd.Series, values: Sequence[str]) -> np.ndarray:
    """Each row's index in ``values`` (-1 where absent), through categorical codes."""
    categorical = pd.Categorical(column)
    lookup = np.array([values.index(c) if c in values else -1
                       for c in map(str, categorical.categories)] + [-1], dtype=np.int64)
    codes: np.ndarray = lookup[categorical.codes]
    return codes


def _btree_parents(ranks: np.ndarray, n: int) -> np.ndarray:
    """NCCL ``ncclGetBtree`` parents: from the lowest set bit b of r, ``(r^b)|(b<<1)``."""
    bit = ranks & -ranks
    up = (ranks ^ bit) | (bit << 1)
    up = np.where(up >= n, ranks ^ bit, up)
    return np.where(ranks == 0, -1, up)
