"""Channels: how NCCL spreads a ring or a tree over the NICs of the nodes a group spans.

A group's ranks fall into *domain parts*: its ranks in one scale-up domain (a rank
outside any domain is a part of its own), in order of first appearance, rank order
inside a part (:func:`domain_parts`). NCCL builds its rings and trees over nodes, one
*channel* per NIC: the channel's path enters and leaves each node through the same NIC
(``NCCL_CROSS_NIC`` unset: same-rail NIC pairs), and the channels together use every NIC
of the node. topomodel does the same (:func:`channels`): a group spanning two or more
parts runs C channels, C = the distinct scale-out NICs its ranks reach in each part (the
fewest over its parts, at most :data:`MAX_CHANNELS`), each carrying S/C. Channel c's
*head* in a part is the rank serving the part's c-th NIC in rail order (round the rails
where a part spanning several systems has several NICs per rail), so with the same
ranks in every node (a whole DGX each) channel c's hops between parts run from a rail-c
NIC to a rail-c NIC and stay on the rail's leaves. A group inside one part has one
channel (on a switched domain more channels would only split the same flows).

Ring (:func:`ring_flows`): channel c visits each part from its head round the part's
ranks; the last rank's chunk goes over the scale-up links back to the head, which sends
it to the next part's channel-c head. NCCL does the same: its ring leaves the node
through the entry NIC, reached by the last GPU through PCIe where they share a switch or
over NVLink through the NIC's own GPU (PXN) where they do not; topomodel has no PCIe path
from a GPU to another GPU's NIC, so it always takes the NVLink one. Summed over the
channels, every rank sends S/n per step round its part's cycle and every head S/(C n)
to the next part: per GPU 2(n-1)/n S on scale-up and per NIC 2(n-1)/n S/C on
scale-out for an AllReduce.

Tree (:func:`tree_flows`, AllReduce): channel c is a chain inside each part from its
head (head, then the part's next ranks round its order) and NCCL's double binary tree
over the parts among the channel-c heads (NCCL's ``NCCL_TOPO_PATTERN_TREE``: all of a
channel's network traffic at its head). Each channel runs both trees with S/(2C) each;
the reduction goes up (chain to head, child head to parent head) while the result comes
down, chunk by chunk at once (NCCL's ``runTreeSplit``), so one phase carries both.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topomodel.arrays import distinct, lexsort_ints
from topomodel.errors import CollectiveError
from topomodel.fabric.tables import Fabric

MAX_CHANNELS = 64
"""Most channels NCCL runs (``MAXCHANNELS`` in ``src/include/device.h``, NCCL 2.30.7 at
NVIDIA/nccl 5067397c, as transcribed in shared/reference/collectives-compute-power.md
part 2.3). It binds only where a part has more NICs (a 72-NIC NVL72 rack)."""


@dataclass(frozen=True, eq=False)
class PartLayout:
    """Groups of one size with their ranks reordered part by part.

    Arrays are (groups, n): ``ranks`` the node numbers in part order, ``part`` each
    position's part index in its group, ``start`` the position of its part's first rank,
    ``size`` its part's size; ``parts`` (groups,) the parts of each group.
    """

    ranks: np.ndarray
    part: np.ndarray
    start: np.ndarray
    size: np.ndarray
    parts: np.ndarray
    order: np.ndarray  # (groups, n) the rank position at each part-order position

    @property
    def n(self) -> int:
        return int(self.ranks.shape[1])


def domain_parts(fabric: Fabric, ranks: np.ndarray) -> PartLayout:
    """Each group's domain parts, in order of first appearance, rank order inside.

    Examples
    --------
    >>> from topomodel.inputs.design import load_design
    >>> from topomodel.fabric.build import build_fabric
    >>> pod = build_fabric(*load_design("examples/dgx-h100-superpod.yaml"))
    >>> acc = pod.accelerators
    >>> layout = domain_parts(pod, np.r_[acc[8:10], acc[0:2], acc[10:11]].reshape(1, 5))
    >>> layout.ranks.tolist(), layout.part.tolist(), layout.size.tolist()
    ([[8, 9, 10, 0, 1]], [[0, 0, 0, 1, 1]], [[3, 3, 3, 2, 2]])
    """
    count, n = ranks.shape
    domain = fabric.node_arrays["domain"][ranks]
    key = np.where(domain >= 0, domain, -1 - ranks)  # a rank outside a domain: alone
    order = np.argsort(key, axis=1, kind="stable")
    sorted_key = np.take_along_axis(key, order, 1)
    first = np.ones((count, n), bool)
    first[:, 1:] = sorted_key[:, 1:] != sorted_key[:, :-1]
    positions = np.arange(n)
    run_start = np.maximum.accumulate(np.where(first, positions, 0), axis=1)
    first_rank = np.take_along_axis(order, run_start, 1)
    perm = np.take_along_axis(order, np.argsort(first_rank * n + order, axis=1), 1)
    permuted_key = np.take_along_axis(key, perm, 1)
    start_flag = np.ones((count, n), bool)
    start_flag[:, 1:] = permuted_key[:, 1:] != permuted_key[:, :-1]
    part = np.cumsum(start_flag, axis=1) - 1
    start = np.maximum.accumulate(np.where(start_flag, positions, 0), axis=1)
    flat = (np.arange(count)[:, None] * n + part).ravel()
    size = np.bincount(flat, minlength=count * n)[flat].reshape(count, n)
    return PartLayout(np.take_along_axis(ranks, perm, 1), part, start, size,
                      part[:, -1] + 1, perm)


@dataclass(frozen=True, eq=False)
class Channels:
    """The channels of groups of one size: ``count`` (groups,) channels per group and
    ``heads``, flat positions into ``layout.ranks.ravel()`` of channel c's head in part j
    of group g at ``head_start[g] + j * count[g] + c``."""

    layout: PartLayout
    count: np.ndarray
    heads: np.ndarray
    head_start: np.ndarray

    def head(self, group: np.ndarray, part: np.ndarray, channel: np.ndarray) -> np.ndarray:
        """Node numbers of the heads of (group, part, channel) triples."""
        flat = self.heads[self.head_start[group] + part * self.count[group] + channel]
        return self.layout.ranks.ravel()[flat]


def channels(fabric: Fabric, layout: PartLayout) -> Channels:
    """Channels and their heads (see the module docstring).

    Examples
    --------
    >>> from topomodel.inputs.design import load_design
    >>> from topomodel.fabric.build import build_fabric
    >>> pod = build_fabric(*load_design("examples/dgx-h100-superpod.yaml"))
    >>> two_dgx = channels(pod, domain_parts(pod, pod.accelerators[:16].reshape(1, 16)))
    >>> int(two_dgx.count[0]), two_dgx.head(np.zeros(8, int), np.ones(8, int),
    ...                                     np.arange(8)).tolist()
    (8, [8, 9, 10, 11, 12, 13, 14, 15])
    """
    count, n = layout.ranks.shape
    serving, node_rail = fabric.derived(node_nics)
    node = layout.ranks.ravel()
    nic = serving[node]
    rail = node_rail[node]
    nic_key = np.where(nic >= 0, nic, -1 - node)  # a rank without a NIC: its own, last
    row = np.repeat(np.arange(count), n)
    flat_part = row * n + layout.part.ravel()
    position = np.arange(count * n)
    order = lexsort_ints((position, nic_key, flat_part))
    new = np.ones(len(order), bool)
    new[1:] = (flat_part[order][1:] != flat_part[order][:-1]) | (
        nic_key[order][1:] != nic_key[order][:-1])
    candidate = order[new]  # the first rank of its part on each NIC
    candidate = candidate[lexsort_ints((nic_key[candidate], rail[candidate],
                                      flat_part[candidate]))]
    # round the rails: each rail's first NIC, then each rail's second, ... (a part
    # spanning several systems has several NICs per rail; the cap keeps the first ones)
    same_rail = np.r_[False, (flat_part[candidate][1:] == flat_part[candidate][:-1])
                      & (rail[candidate][1:] == rail[candidate][:-1])]
    index = np.arange(len(candidate))
    nth = index - np.maximum.accumulate(np.where(~same_rail, index, 0))
    candidate = candidate[lexsort_ints((nic_key[candidate], rail[candidate], nth,
                                      flat_part[candidate]))]
    single = layout.parts == 1
    part_starts = np.flatnonzero(layout.start.ravel() == position % n)
    available = np.bincount(flat_part[candidate], minlength=count * n)
    per_part = available[flat_part[part_starts]]
    offsets = np.searchsorted(row[part_starts], np.arange(count))
    channel_count = np.minimum(np.minimum.reduceat(per_part, offsets), MAX_CHANNELS)
    channel_count = np.where(single, 1, channel_count)
    cand_part = flat_part[candidate]
    run = np.ones(len(candidate), bool)
    run[1:] = cand_part[1:] != cand_part[:-1]
    rank_in_part = np.arange(len(candidate)) - np.maximum.accumulate(
        np.where(run, np.arange(len(candidate)), 0))
    keep = rank_in_part < channel_count[row[candidate]]
    heads = candidate[keep]
    # one channel inside a single part: its head is the part's first rank
    single_rows = np.flatnonzero(single)
    if len(single_rows):
        mask = single[row[heads]]
        heads = heads.copy()
        heads[mask] = single_rows * n  # rows are in order, one head each
    head_start = np.concatenate([[0], np.cumsum(layout.parts * channel_count)[:-1]])
    return Channels(layout, channel_count, heads, head_start)


def node_nics(fabric: Fabric) -> tuple[np.ndarray, np.ndarray]:
    """Per node of ``fabric``: the NIC serving it (-1: none, as for every node but an
    accelerator) and that NIC's rail (the largest int64 where there is none: last),
    read-only, kept with the fabric (:meth:`~topomodel.fabric.tables.Fabric.derived`):
    :func:`channels` reads them for every communicator it is asked of."""
    rails = fabric.node_arrays["rail"]
    serving = np.full(len(rails), -1, np.int64)
    serving[fabric.accelerators] = fabric.injection.nic
    rail = np.where(serving >= 0, rails[np.maximum(serving, 0)], np.iinfo(np.int64).max)
    serving.setflags(write=False)
    rail.setflags(write=False)
    return serving, rail


def double_binary_tree(n: int) -> tuple[np.ndarray, np.ndarray]:
    """NCCL's double binary tree over ranks 0..n-1: each rank's parent in tree 1 and 2.

    A root's parent is -1. Tree 1 is NCCL's ``ncclGetBtree``: the in-order binary tree
    rooted at rank 0 (which has one child) in which rank r's parent is found from r's
    lowest set bit b: ``(r ^ b) | (b << 1)``, or ``r ^ b`` if that is not a rank. Tree 2
    is tree 1 mirrored (n even, root n-1) or shifted by one rank (n odd, root 1), so no
    rank is a leaf in both.

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


def _btree_parents(ranks: np.ndarray, n: int) -> np.ndarray:
    """NCCL ``ncclGetBtree`` parents: from the lowest set bit b of r, ``(r^b)|(b<<1)``."""
    bit = ranks & -ranks
    up = (ranks ^ bit) | (bit << 1)
    up = np.where(up >= n, ranks ^ bit, up)
    return np.where(ranks == 0, -1, up)


Flows = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""src, dst (node numbers), bytes per flow and the row (group of the bucket) of each."""


def _cycle(layout: PartLayout) -> tuple[np.ndarray, np.ndarray]:
    """Flat positions of each rank and of its successor round its part."""
    count, n = layout.ranks.shape
    positions = np.arange(n)
    successor = layout.start + (positions - layout.start + 1) % layout.size
    flat = np.arange(count * n)
    nxt = (np.arange(count)[:, None] * n + successor).ravel()
    keep = nxt != flat
    return flat[keep], nxt[keep]


def _mesh_pairs(layout: PartLayout) -> tuple[np.ndarray, np.ndarray]:
    """Flat positions of every rank and of each other rank of its part (a part of m
    ranks gives m (m - 1) pairs, each direction)."""
    count, n = layout.ranks.shape
    size = layout.size.ravel()
    flat = np.arange(count * n)
    start = (np.arange(count)[:, None] * n + layout.start).ravel()
    here_parts, other_parts = [], []
    for m in distinct(size[size > 1]):
        m = int(m)
        at = flat[size == m]
        offset = at - start[at]
        k = np.arange(1, m)
        here_parts.append(np.repeat(at, m - 1))
        other_parts.append((start[at][:, None] + (offset[:, None] + k) % m).ravel())
    if not here_parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(here_parts), np.concatenate(other_parts)


def ring_flows(ch: Channels, size_bytes: float, *, mesh: bool = False) -> Flows:
    """One ring step of every group: bytes per flow per step (the module docstring).

    ``mesh``: the scale-up domain is a full mesh (every pair of its accelerators
    directly linked). RCCL's rings there (``rome_models.cc``, the 8 x MI300X models 79,
    81, 84 and 87 at ROCm/rccl 0cbce2a7) visit each node's GPUs in a different order per
    channel, chosen so that every directed link carries the same number of channels
    (model 79's 14 rings: each of the 56 links twice); and across nodes a channel leaves
    through its last GPU's own NIC (``N0 0 1 2 3 4 5 6 7 N7``), not back through its
    entry GPU. So each rank's bytes inside its part are spread evenly over the links to
    the part's other ranks: per step S / n each (a part of the whole group), or
    S / n x (m - 1) / m in a part of m ranks of a group spanning several (m - 1 hops
    per channel). The hops between parts stay head to head (the same NICs send and
    receive the same bytes; RCCL's exit NIC is on another rail, which only the spine
    would see).
    """
    layout = ch.layout
    n = layout.n
    ranks = layout.ranks.ravel()
    if mesh:
        here, nxt = _mesh_pairs(layout)
        m = layout.size.ravel()[here]
        several = (layout.parts > 1)[here // n]
        per_pair = size_bytes / n / (m - 1) * np.where(several, (m - 1) / m, 1.0)
    else:
        here, nxt = _cycle(layout)
        per_pair = np.full(len(here), size_bytes / n)
    multi = np.flatnonzero(layout.parts > 1)
    group = np.repeat(multi, layout.parts[multi] * ch.count[multi])
    within = np.arange(len(group)) - np.repeat(
        np.cumsum(layout.parts[multi] * ch.count[multi]) - layout.parts[multi]
        * ch.count[multi], layout.parts[multi] * ch.count[multi])
    part, channel = within // ch.count[group], within % ch.count[group]
    net_src = ch.head(group, part, channel)
    net_dst = ch.head(group, (part + 1) % layout.parts[group], channel)
    return (np.concatenate([ranks[here], net_src]), np.concatenate([ranks[nxt], net_dst]),
            np.concatenate([per_pair, size_bytes / (n * ch.count[group])]),
            np.concatenate([here // n, group]))


def tree_flows(ch: Channels, size_bytes: float, *, mesh: bool = False
               ) -> tuple[Flows, int]:
    """Tree AllReduce flows (both trees, reduction and broadcast at once) and the hops a
    chunk takes up and back down (chain plus tree depth, twice).

    ``mesh``: on a full-mesh scale-up domain each channel's chain follows its ring's
    order (:func:`ring_flows`), so a part's chain bytes, up and down, spread evenly over
    the directed links between its ranks."""
    layout = ch.layout
    count, n = layout.ranks.shape
    ranks = layout.ranks.ravel()
    here, nxt = _cycle(layout)
    is_head = np.zeros(count * n, bool)
    is_head[ch.heads] = True
    channels_of = ch.count[here // n]
    chain = size_bytes / channels_of * (channels_of - is_head[nxt])
    if mesh:
        part_of = (here // n) * n + layout.start.ravel()[here]
        total = np.bincount(part_of, weights=chain, minlength=count * n)
        pair_here, pair_other = _mesh_pairs(layout)
        m = layout.size.ravel()[pair_here]
        start = (pair_here // n) * n + layout.start.ravel()[pair_here]
        spread = 2 * total[start] / (m * (m - 1))  # up and down, each directed pair
        parts: list[Flows] = [(ranks[pair_here], ranks[pair_other], spread,
                               pair_here // n)]
    else:
        parts = [(ranks[here], ranks[nxt], chain, here // n),
                 (ranks[nxt], ranks[here], chain, here // n)]
    depth = 0
    for p in distinct(layout.parts[layout.parts > 1]):
        trees = double_binary_tree(int(p))
        depth = max(depth, *(tree_depth(t) for t in trees))
        rows = np.flatnonzero(layout.parts == p)
        for parents in trees:
            child = np.flatnonzero(parents >= 0)
            group = np.repeat(rows, ch.count[rows] * len(child))
            within = np.arange(len(group)) - np.repeat(
                np.cumsum(ch.count[rows] * len(child)) - ch.count[rows] * len(child),
                ch.count[rows] * len(child))
            c = ch.count[group]
            kid, channel = child[within // c], within % c
            low = ch.head(group, kid, channel)
            high = ch.head(group, parents[kid], channel)
            nbytes = size_bytes / (2 * c)
            parts += [(low, high, nbytes, group), (high, low, nbytes, group)]
    flows = tuple(np.concatenate([f[k] for f in parts]) for k in range(4))
    keep = flows[2] > 0
    chain_hops = int(layout.size.max()) - 1
    return (flows[0][keep], flows[1][keep], flows[2][keep], flows[3][keep]), 2 * (
        chain_hops + depth)
