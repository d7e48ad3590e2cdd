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
- ``ring``: one phase, 2(n-1) steps for AllReduce, n-1 for AllGather and ReduceScatter.
  A group inside one scale-up domain part is one ring in rank order, rank i ->
  (i+1) mod n, S/n per step. A group spanning several parts (see ``hierarchical`` for
  parts) runs NCCL's channels (:mod:`topomodel.traffic.channels`): C = the distinct
  NICs its ranks reach in each part (8 on a DGX H100; at most 64), parts in order of
  first appearance. Channel c carries S/C: round each part from its head (the rank on
  the part's c-th NIC by rail), the last rank's chunk back to the head over scale-up,
  then head to the next part's channel-c head over scale-out. Summed over channels: a
  cycle round each part, rank -> the next rank of its part, S/n per step; and C flows
  from each part to the next, head c -> head c, S/(C n) per step (same-rail NIC pairs).
  Per rank 2(n-1)/n S on scale-up for an AllReduce (2(n-1)/n S (1 + 1/C) sent in all
  where every rank is a head), per NIC 2(n-1)/n S/C. Broadcast is a pipelined chain
  root -> 1 -> ... -> n-1 (one phase, S bytes per hop, one step); Reduce the reverse
  chain (no channels).
- ``tree`` (AllReduce): NCCL's tree over nodes, not ranks: per channel (as for the
  ring) a chain inside each part from the channel's head round the part, and NCCL's
  double binary tree (:func:`double_binary_tree`) over the parts among the channel's
  heads; a group inside one part is one chain in rank order. Each channel runs both
  trees with S/(2C) each: a chain edge carries S/C each way per channel using it, a
  tree edge S/(2C) each way. The reduction (up: chain to head, child part to parent)
  and the broadcast (down) run at once chunk by chunk, so they are one phase of one
  step; its message count is the hops a chunk takes up and back down, 2 (chain +
  tree depth). NCCL's search prefers a *balanced* tree (a second child on another GPU
  of the node); topomodel keeps all of a channel's network traffic at its head (NCCL's
  plain ``TREE`` pattern).
- ``rhd`` (AllReduce, AllGather, ReduceScatter; n a power of two): Rabenseifner's
  reduce-scatter by recursive halving then allgather by recursive doubling, in MPICH's
  order. Halving phase k (k = 0 .. log2 n - 1) pairs rank r with r XOR 2^k and sends
  S/2^(k+1); doubling mirrors it, distances n/2, ..., 2, 1 with S/n, ..., S/4, S/2. In
  both halves a phase at distance d sends S/(2d), so the largest transfers go between the
  nearest ranks (often in one scale-up domain). AllGather is the doubling half alone,
  ReduceScatter the halving half.
- ``direct`` (AlltoAll): one phase with every ordered pair, S/n bytes each, kept as its
  groups (:class:`~topomodel.traffic.phases.AllPairsPhase`) until something lists them.
  ``pairwise`` (AlltoAll): n-1 phases, phase k sends rank i -> (i+k) mod n, S/n bytes.
- ``p2p`` (SendRecv): one phase, rank i -> i+1, S bytes.
- ``hierarchical`` (AllReduce, AllGather, ReduceScatter): each group is split into
  *domain parts*, its ranks in one scale-up domain (``domain`` -1: each rank alone), in
  order of first appearance, ranks in rank order inside a part; every part must hold the
  same number m of ranks (p = n/m parts). The rank at position j of a part talks to the
  ranks at position j of the other parts. AllReduce: ring ReduceScatter inside each part
  (S/m per step, m-1 steps), ring AllReduce of the S/m piece across parts (S/(m p) per
  step, 2(p-1) steps), ring AllGather inside each part (S/m, m-1 steps). AllGather: ring
  AllGather across parts (the own chunk S/n, p-1 steps) and inside each part (S/m, m-1
  steps). ReduceScatter: inside (S/m, m-1 steps) and across (S/n, p-1 steps). The
  stages are pipelined chunk by chunk, so they run at once (:func:`pipelined`): one
  phase of one step carrying each stage's bytes over all its steps, timed by its
  slowest link (the max of the stages, not their sum), with a message latency per step
  of every stage. Stages with no steps (m = 1 or p = 1) are left out; a single stage
  stays as it is.
- ``innetwork`` (AllReduce; only where :func:`in_network_capable`): the switches reduce,
  in one phase (:mod:`topomodel.traffic.algorithms.innetwork`). Case A (NVLS): the whole group in
  one system whose scale-up switch chips (kind ``scaleup_switch``, same system) all
  have ``in_network_reduction``. As NCCL does it: a ReduceScatter by multimem loads
  (every rank serves its S to the switch, gets its reduced S/n) and an AllGather by
  multimem stores (S/n up, S down), so every rank sends and receives S (1 + 1/n), split
  in proportion to its cables to each chip (5:5:4:4 on an HGX H100), each chip
  returning the same share; the phase's ``efficiency`` is the chips'
  ``nvls_efficiency`` (NCCL's ``nvlsEfficiency``: 0.85 Hopper, 0.74 Blackwell). Case B
  (SHARP): the group in a fat-tree whose switches have ``in_network_reduction``, with
  NCCL's in-node pre-reduction: a group whose domain parts hold m ranks each (the same
  m in every part) reduces inside each part first (NVLS, as case A with m for n, where
  the part's chips reduce; else a ring reduce-scatter and all-gather round the part,
  2 (m-1)/m S per rank), so the rank at position j of its part carries slice j, S/m:
  split evenly over its NIC legs (one per plane), to the leaf of each leg; each slice is
  its own reduction, whose aggregation root in each plane is the common leaf if the
  slice has one leaf there, else the lowest-numbered spine linked to the leaf of the
  slice's first rank if every leaf of the slice links to it, else the lowest-numbered
  core linked to that spine if every leaf reaches it through some spine. Up: rank ->
  leaf (S / (m legs)) and leaf -> root (the leaf's reduced stream, S / (m planes) per
  slice it holds); down: root -> leaf and leaf -> rank, the same bytes. Flows have
  switch endpoints; switches in between only forward. Case A is used where it applies,
  else case B. With m = 1 (one rank per domain) each rank carries all of S.
- ``nvlstree`` (AllReduce; two or more domain parts of m ranks each, every part in one
  system on chips that reduce): NCCL's NVLS-Tree. NVLS inside each part (S (1 + 1/m)
  each way per rank, the chips' ``nvls_efficiency``) and, for each slice j, NCCL's
  double binary tree over the parts among the ranks at position j: two trees of S/(2m)
  each, reduction up and result down at once, so a NIC carries S/(2m) each way per tree
  edge it sits on (S/ranks-per-node over the two trees, not S). One phase; its message
  count is 1 + 2 x the tree depth. NCCL runs it across nodes only, so a group inside one
  domain is refused.
- ``torus`` (AllReduce, AllGather, ReduceScatter; each group a whole torus scale-up
  domain): the bucket algorithm over every dimension (:mod:`topomodel.traffic.algorithms.torus`).
  S is split into 2D parts (D dimensions longer than 1, both directions of each); part
  (j, +/-) runs a ring reduce-scatter along dimension j, j+1, ..., j+D-1 then the
  all-gather in reverse, staggered so each stage (one phase, as many steps as its
  longest ring) uses every dimension both ways. Per rank 2(N-1)/N S for AllReduce as
  for a ring, spread over its 2D links: S (N-1)/(D N) per link direction.

Latency convention
------------------
A phase costs ``steps x (slowest link's bytes / (capacity x efficiency) + latency)``.
Here ``messages_per_step`` is the number of message latencies (path latency plus
per-message overhead) one step costs: 1 for ring steps, rhd and pairwise phases; n-1
for a direct AlltoAll (each rank posts n-1 messages) and for a pipelined
Broadcast/Reduce chain (the first chunk crosses n-1 hops one after another); 2 (chain
+ tree depth) for the tree; every step of every stage for a pipelined hierarchical
phase; the in-network phases' own counts (:mod:`topomodel.traffic.algorithms.innetwork`). The
NCCL latency model of the time model reads :attr:`Traffic.shapes` instead.

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
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from topomodel.fabric.tables import Fabric
from topomodel.limits import BYTES_PER_FLOW, above
from topomodel.traffic.algorithms import ALGORITHMS_BY_COLLECTIVE, REGISTRY
from topomodel.traffic.channels import double_binary_tree, tree_depth
from topomodel.traffic.communicators import (
    CollectiveError,
    GroupBlocks,
    GroupsLike,
    GroupView,
    check_collective,
    group_blocks,
    group_names_of,
)
from topomodel.traffic.phases import Phase, Shape, Traffic, merge_all_pairs

__all__ = ["ALGORITHMS", "busbw_factor", "collective_shape", "collective_shapes",
           "collective_traffic", "double_binary_tree", "tree_depth"]

ALGORITHMS = ALGORITHMS_BY_COLLECTIVE
"""Algorithms each collective supports, the first its default (from the registry,
:mod:`topomodel.traffic.algorithms`)."""


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
    check_collective(collective)
    if n < 1:
        raise CollectiveError(f"a group has at least one rank, got n={n}")
    if collective == "allreduce":
        return 2.0 * (n - 1) / n
    if collective in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    return 1.0


def collective_traffic(fabric: Fabric, collective: str, groups: GroupsLike | GroupBlocks,
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
        Communicators that run at the same time: a 2-D int array of accelerator node
        numbers, a row per group in rank order (:data:`~topomodel.traffic.communicators.
        Groups`); for groups of different sizes a sequence of such blocks or of 1-D
        groups; or :class:`~topomodel.traffic.communicators.GroupBlocks` already checked
        (what an algorithm search passes, so its candidates share the groups' channels).
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
        whose domain parts differ in size, ``innetwork`` or ``nvlstree`` where the
        switches cannot reduce or a group spanning domains has parts of different sizes,
        or a pairwise All-to-All of more flows than :data:`~topomodel.limits.MAX_FLOWS`
        (a direct one is refused only where its pairs must be listed:
        :class:`~topomodel.traffic.phases.AllPairsPhase`).
    """
    blocks, size = _checked(fabric, collective, algorithm, groups, size_bytes)
    if algorithm == "pairwise":  # n - 1 listed phases of n flows (direct: at listing)
        flows = sum(len(b) * b.shape[1] * (b.shape[1] - 1) for b in blocks.blocks)
        refusal = above(flows, "MAX_FLOWS", f"{algorithm} All-to-All flows", BYTES_PER_FLOW,
                        doing="to route")
        if refusal:
            raise CollectiveError(refusal)
    names = group_names_of(group_names, blocks.count)
    per_size = _per_size(blocks, names)
    shapes = tuple(dict.fromkeys(_shape(collective, algorithm, g, size)
                                 for g in per_size if g.n > 1))
    record = REGISTRY[algorithm]
    if record.plan is not None:  # all groups at once: they share switches
        phases, notes = record.plan(blocks, names, size, algorithm)
        return Traffic(phases, names, algorithm, notes, shapes)
    assert record.generate is not None
    per_bucket = []
    for g in per_size:
        if g.n > 1:
            per_bucket.extend(record.generate(collective, g, size))
    return Traffic(_merge(per_bucket), names, algorithm, (record.note,), shapes)


def collective_shapes(fabric: Fabric, collective: str, groups: GroupsLike | GroupBlocks,
                      size_bytes: float, *, algorithm: str, channels: bool = True
                      ) -> tuple[Shape, ...]:
    """The :attr:`~topomodel.traffic.phases.Traffic.shapes` that
    :func:`collective_traffic` gives the same arguments, without making any flow (what
    a bound on a candidate's time needs before its traffic is built); without
    ``channels``, with the channel count 0 (not found: over 98k ranks, a few ms a
    placement), for a latency that reads none.

    Raises
    ------
    CollectiveError
        As :func:`collective_traffic` does for the collective, algorithm, size and
        groups (not for what only building the flows finds).
    """
    blocks, size = _checked(fabric, collective, algorithm, groups, size_bytes)
    return tuple(dict.fromkeys(_shape(collective, algorithm, g, size, channels)
                               for g in _per_size(blocks, group_names_of(None, blocks.count))
                               if g.n > 1))


def _checked(fabric: Fabric, collective: str, algorithm: str,
             groups: GroupsLike | GroupBlocks, size_bytes: float
             ) -> tuple[GroupBlocks, float]:
    check_collective(collective)
    supported = ALGORITHMS[collective]
    if algorithm not in supported:
        raise CollectiveError(f"{collective} has no algorithm {algorithm!r}; choose from"
                              f" {', '.join(supported)}")
    size = float(size_bytes)
    if not math.isfinite(size) or size < 0:
        raise CollectiveError(f"size_bytes must be a finite number >= 0, got {size_bytes!r}")
    return group_blocks(fabric, groups), size


def _per_size(blocks: GroupBlocks, names: tuple[str, ...]) -> list[GroupView]:
    """One generator view per block, sharing the block's derived views."""
    return [blocks.block(k, names) for k in range(len(blocks.blocks))]


def collective_shape(fabric: Fabric, collective: str, algorithm: str, ranks: np.ndarray,
                     size_bytes: float) -> Shape:
    """The :class:`~topomodel.traffic.phases.Shape` of groups of one size (a row per
    group): ranks, the most scale-up domains one group spans (a rank outside any domain
    counts as its own) and the point-to-point rounds of algorithms NCCL does not tune.

    Examples
    --------
    >>> from topomodel.inputs.design import load_design
    >>> from topomodel.fabric.build import build_fabric
    >>> pod = build_fabric(*load_design("examples/dgx-h100-superpod.yaml"))
    >>> two_nodes = pod.accelerators[:16].reshape(1, 16)
    >>> shape = collective_shape(pod, "allreduce", "ring", two_nodes, 1e9)
    >>> shape.ranks, shape.nodes, shape.rounds
    (16, 2, 1)
    """
    gid = np.arange(len(ranks), dtype=np.int32)
    return _shape(collective, algorithm, GroupView(ranks, gid, (), fabric), float(size_bytes))


def _shape(collective: str, algorithm: str, g: GroupView, size: float,
           channels: bool = True) -> Shape:
    nodes = g.nodes  # kept with the block: every candidate reads it
    shape = spanned_shape(g.fabric, collective, algorithm, g.n, nodes, size)
    if channels and nodes > 1 and REGISTRY[algorithm].channels:
        return replace(shape, channels=int(g.channels.count.min()))
    return shape


def spanned_shape(fabric: Fabric, collective: str, algorithm: str, ranks: int, nodes: int,
                  size_bytes: float) -> Shape:
    """The :class:`~topomodel.traffic.phases.Shape` of groups of ``ranks`` the most
    scale-up domains of which one spans is ``nodes``, without channels (count 0): all
    a shape reads of where the groups lie, but for their channels.

    Examples
    --------
    >>> from topomodel.inputs.design import load_design
    >>> from topomodel.fabric.build import build_fabric
    >>> pod = build_fabric(*load_design("examples/dgx-h100-superpod.yaml"))
    >>> spanned_shape(pod, "allreduce", "ring", 16, 2, 1e9) == collective_shapes(
    ...     pod, "allreduce", pod.accelerators[:16].reshape(1, 16), 1e9,
    ...     algorithm="ring", channels=False)[0]
    True
    """
    rounds = REGISTRY[algorithm].rounds(
        collective, ranks, nodes, tuple(int(d) for d in fabric.structure.scaleup.torus.shape))
    return Shape(collective, algorithm, ranks, nodes, size_bytes, rounds, 0)


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
        pairs = merge_all_pairs(members, [0] * len(members), steps, label)
        if pairs is not None:
            merged.append(pairs)
            continue
        merged.append(Phase(
            np.concatenate([p.src for p in members]),
            np.concatenate([p.dst for p in members]),
            np.concatenate([p.bytes * (p.steps / steps) for p in members]),
            np.concatenate([p.group for p in members]),
            steps, label, max(p.messages_per_step for p in members),
            min(p.efficiency for p in members)))
    return tuple(merged)
