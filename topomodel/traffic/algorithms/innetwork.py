"""In-network reduction: NVLS in the scale-up switch chips, SHARP in the scale-out
switches, and NVLS-Tree; which switches reduce for each group, and the flows.

All three are one phase (NCCL pipelines their stages chunk by chunk), as fractions of S:

- NVLS (``innetwork``, case A: a group in one system whose switch chips all reduce).
  NCCL's NVLS AllReduce is a ReduceScatter by multimem loads (every GPU serves its whole
  buffer to the switch, S up, and gets its reduced S/n back) then an AllGather by
  multimem stores (S/n up, the switch writes all n pieces to every GPU, S down): about
  S (1 + 1/n) each way per GPU, split over its chips in proportion to its cables to each.
  NCCL keeps at most :data:`NVLS_MAX_HEADS` (32) heads and only heads reduce, so in a
  group of more than 32 (a GB200 NVL72 rack) a head carries S (1 + 1/32) each way and
  every other rank S (:func:`nvls_port_share`).
  The phase's efficiency is the chips' ``nvls_efficiency`` (NCCL's ``nvlsEfficiency``).
- SHARP (``innetwork``, case B: the scale-out switches reduce), with NCCL's in-node
  pre-reduction: a group spanning domain parts of m ranks each reduces inside each part
  first (NVLS where the part's chips reduce, as above with m for n; else a ring
  reduce-scatter and all-gather round the part, 2 (m-1)/m S per rank one way), so the
  rank at position j of its part carries only slice j, S/m, through its NIC: each NIC
  carries S/ranks-per-node, not S. Each slice is its own SHARP reduction (NCCL opens one
  CollNet communicator per head), with its own aggregation root (see the collectives
  docstring). NCCL's CollNetDirect scatters inside a node directly (up to 8 GPUs) and
  CollNetChain chains; on a switched domain their bytes per GPU are the ring's, which
  topomodel uses (on a full mesh or torus NCCL spreads them over more links).
- NVLS-Tree (``nvlstree``, across two or more parts whose chips all reduce): NVLS inside
  each part and, for each slice j, NCCL's double binary tree over the parts among the
  ranks at position j, two trees of S/(2m) each, reduction up and result down at once.

The phase efficiency is the lowest of the chips' NVLS efficiencies it uses: it derates
the network links of NVLS + SHARP and NVLS-Tree too, which NCCL does not (it applies
``nvlsEfficiency`` to the NVLink bandwidth alone); a per-flow efficiency would lift that.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topomodel.arrays import category_codes, distinct, expand_matches
from topomodel.fabric.tables import Fabric, ignores_failures, labels
from topomodel.inputs.parts import ScaleupSwitch
from topomodel.inputs.records import documented
from topomodel.traffic.algorithms.record import Algorithm
from topomodel.traffic.algorithms.sharp import SharpArcs, sharp_arcs, sharp_plan
from topomodel.traffic.channels import domain_parts, double_binary_tree, tree_depth
from topomodel.traffic.communicators import (
    GroupBlocks,
    GroupsLike,
    NotApplicable,
    group_blocks,
    group_names_of,
)
from topomodel.traffic.phases import Phase
from topomodel.vocabulary import NODE_KINDS

NVLS_MAX_HEADS = documented(
    "innetwork.NVLS_MAX_HEADS", 32,
    """NCCL's ``NCCL_MAX_NVLS_ARITY``: the NVLS graph search keeps at most this many
    heads (``src/graph/search.cc``: ``maxChannels = min(NCCL_MAX_NVLS_ARITY, GPUs)``,
    NVIDIA/nccl 5067397c), one per GPU of the node below it. Only a head runs the
    reduce-and-multicast warps (``src/device/all_reduce.h``, ``headRank != -1``), each
    reducing 1/heads of every loop; across nodes only heads send to the network
    (``nvls->out``, the NVLS-Tree's ``treeUp``), one slice of S/heads each.""")


def nvls_heads(ranks: np.ndarray | int) -> np.ndarray:
    """NCCL's NVLS heads in a part of ``ranks`` ranks: one per rank up to
    :data:`NVLS_MAX_HEADS`.

    >>> nvls_heads(np.array([8, 32, 72])).tolist()
    [8, 32, 32]
    """
    return np.minimum(ranks, NVLS_MAX_HEADS)


def nvls_port_share(position: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Per rank, the bytes its ports carry each way in NVLS, as a fraction of S: a head
    (``position`` in its part of ``ranks`` below :func:`nvls_heads`) serves its whole
    buffer to the reductions (S), takes its reduced 1/heads back and multicasts it
    (S/heads), and receives every head's multicast (S): S (1 + 1/heads); any other rank
    only serves and receives, S (NCCL's scatter and gather warps copy in local memory).

    >>> nvls_port_share(np.array([0, 7]), np.array([8, 8])).tolist()  # 1 + 1/8
    [1.125, 1.125]
    >>> nvls_port_share(np.array([0, 31, 32, 71]), np.full(4, 72)).tolist()  # 32 heads
    [1.03125, 1.03125, 1.0, 1.0]
    """
    heads = nvls_heads(ranks)
    return np.where(position < heads, 1 + 1 / heads, 1.0)


def in_network_capable(fabric: Fabric, groups: GroupsLike | GroupBlocks, *,
                       algorithm: str = "innetwork") -> bool:
    """Whether every group can AllReduce in the switches: ``innetwork`` (NVLS in-system
    or SHARP) or ``nvlstree`` (NVLS-Tree).

    See the module docstring for the cases. Groups of one rank need no network and count
    as capable.
    """
    blocks = group_blocks(fabric, groups)
    try:
        _plan_in_network(fabric, blocks, group_names_of(None, blocks.count), algorithm=algorithm)
    except NotApplicable:
        return False
    return True


@dataclass(frozen=True)
class _InNetworkPlan:
    """The phase's flows as fractions of S, with its efficiency and message count."""

    src: np.ndarray
    dst: np.ndarray
    fraction: np.ndarray
    group: np.ndarray
    notes: tuple[str, ...]
    efficiency: float = 1.0
    messages: int = 1
    label: str = "in-network reduce and multicast"


_Flows = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # src, dst, fraction, group


@dataclass(frozen=True, eq=False)
class _Chips:
    """Accelerator -> in-system switch chip arcs (sorted by accelerator), whether each
    accelerator's chips all reduce, and each chip's NVLS efficiency."""

    src: np.ndarray
    dst: np.ndarray
    cables: np.ndarray
    total: np.ndarray  # per node: cables to in-system chips
    reducing: np.ndarray  # per node: whether it has chips and they all reduce
    efficiency: np.ndarray  # per node: the chip's nvls_efficiency (1 where unset)
    system: np.ndarray  # per node: its system

    def flows(self, ranks: np.ndarray, group: np.ndarray, scale: np.ndarray) -> _Flows:
        """NVLS flows rank -> chip, ``scale`` of each rank's S split by its cables."""
        which, idx = expand_matches(ranks, self.src)
        src = ranks[which]
        return (src, self.dst[idx], self.cables[idx] / self.total[src] * scale[which],
                group[which])


def _chips(fabric: Fabric, capable: np.ndarray, lsrc: np.ndarray, ldst: np.ndarray,
           kind_src: np.ndarray, kind_dst: np.ndarray, lcables: np.ndarray) -> _Chips:
    system = fabric.node_arrays["system"]
    n_nodes = len(fabric.node_arrays)
    to_chip = np.flatnonzero((kind_src == _ACC) & (kind_dst == _CHIP))
    to_chip = to_chip[system[lsrc[to_chip]] == system[ldst[to_chip]]]  # in-system chips
    order = np.argsort(lsrc[to_chip], kind="stable")
    rows = to_chip[order]
    src, dst, cables = lsrc[rows], ldst[rows], lcables[rows].astype(float)
    total = np.bincount(src, weights=cables, minlength=n_nodes)
    reducing = np.bincount(src, weights=cables * capable[dst], minlength=n_nodes)
    model = fabric.node_arrays["model"]
    per_model = []
    for m in model.categories:
        entry = fabric.catalog.entries.get(str(m))
        value = entry.nvls_efficiency if isinstance(entry, ScaleupSwitch) else None
        per_model.append(1.0 if value is None else value)
    efficiency = np.append(per_model, 1.0)[model.codes]
    return _Chips(src, dst, cables, total, (total > 0) & (reducing == total), efficiency,
                  system)


@dataclass(frozen=True, eq=False)
class _View:
    """What every in-network plan on a fabric reads, made once per fabric: node kinds
    (codes of NODE_KINDS), which nodes reduce in the network, systems, the live arcs
    with the kinds of their ends, and the accelerator-to-chip arcs."""

    kind: np.ndarray
    capable: np.ndarray
    system: np.ndarray
    lsrc: np.ndarray
    ldst: np.ndarray
    kind_src: np.ndarray  # kind code of each live arc's ends
    kind_dst: np.ndarray
    chips: _Chips


def in_network_view(fabric: Fabric) -> _View:
    nodes, links = fabric.node_arrays, fabric.link_arrays
    kind = category_codes(nodes["kind"], NODE_KINDS)
    model = nodes["model"]
    capable = np.append([bool(getattr(fabric.catalog.entries.get(str(m)), "in_network_reduction",
                                      False)) for m in model.categories], False)[
        model.codes] & reduction_enabled(fabric, kind)
    live = ~links["failed"]
    every = live.all()  # no copies of the columns where nothing failed

    def alive(column: str) -> np.ndarray:
        values: np.ndarray = links[column]
        return values if every else values[live]

    lsrc, ldst = alive("src"), alive("dst")
    kind_src, kind_dst = kind[lsrc], kind[ldst]
    chips = _chips(fabric, capable, lsrc, ldst, kind_src, kind_dst, alive("cables"))
    return _View(kind, capable, chips.system, lsrc, ldst, kind_src, kind_dst, chips)


def _plan_in_network(fabric: Fabric, groups: GroupBlocks, names: tuple[str, ...], *,
                     algorithm: str = "innetwork") -> _InNetworkPlan:
    nodes = fabric.node_arrays
    view = fabric.derived(in_network_view)
    capable, system, chips = view.capable, view.system, view.chips

    sizes = groups.sizes
    active = np.flatnonzero(sizes > 1)
    if not len(active):
        return _empty_plan()
    ranks = groups.members(active)
    rank_group = np.repeat(active, sizes[active]).astype(np.int32)
    offsets = np.concatenate([[0], np.cumsum(sizes[active])[:-1]])
    rank_sys = system[ranks]
    one_system = (np.minimum.reduceat(rank_sys, offsets) == np.maximum.reduceat(rank_sys, offsets)
                  ) & (np.minimum.reduceat(nodes["domain"][ranks], offsets) >= 0)
    case_a = one_system & np.minimum.reduceat(chips.reducing[ranks], offsets)

    def why_not_nvls(first: int) -> str:
        members = groups.members(np.array([first]))
        used = distinct(chips.dst[np.isin(chips.src, members)])
        models = ", ".join(sorted(set(nodes["model"][used].tolist())))
        return ("its ranks are not all in one scale-up system"
                if not one_system[np.searchsorted(active, first)]
                else "its ranks reach no scale-up switch chip"
                if (chips.total[members] == 0).any()
                else f"its scale-up switch chips ({models}) do not all reduce in the network")

    if algorithm == "nvlstree":
        return _nvls_tree_plan(fabric, groups, names, active, chips)
    symmetric: list[_Flows] = []
    one_way: list[_Flows] = []
    notes = []
    used_nvls = np.zeros(len(nodes), bool)
    in_a = np.repeat(case_a, sizes[active])
    if in_a.any():
        position = np.arange(len(ranks)) - np.repeat(offsets, sizes[active])
        scale = nvls_port_share(position[in_a], np.repeat(sizes[active], sizes[active])[in_a])
        symmetric.append(chips.flows(ranks[in_a], rank_group[in_a], scale))
        used_nvls[ranks[in_a]] = True
        notes.append(f"innetwork: {int(case_a.sum())} group(s) reduce in scale-up switch chips"
                     " (NVLS): reduce-scatter by multimem loads, all-gather by multimem"
                     " stores, S (1 + 1/n) each way per rank, split by cables")
        if (sizes[active][case_a] > NVLS_MAX_HEADS).any():
            notes.append(_HEADS_NOTE)
    messages = 1
    if not case_a.all():
        b_groups = active[~case_a]
        domain = nodes["domain"][ranks]
        one_domain = (np.minimum.reduceat(domain, offsets) == np.maximum.reduceat(
            domain, offsets)) & (np.minimum.reduceat(domain, offsets) >= 0)
        inside = active[~case_a & one_domain]
        if len(inside):  # NCCL's CollNet runs across nodes only (nNodes > 1)
            first = int(inside[0])
            raise NotApplicable(f"in-network reduction does not apply to group"
                                  f" {names[first]!r}: {why_not_nvls(first)}, and SHARP"
                                  " (CollNet) runs only across scale-up domains")
        slices = _slices(fabric, groups, names, b_groups)
        nvls_part = _parts_reduce(slices, chips)
        pre = slices.m > 1
        nv = pre & nvls_part
        if nv.any():
            symmetric.append(chips.flows(slices.node[nv], slices.group[nv],
                                         nvls_port_share(slices.slice[nv], slices.m[nv])))
            used_nvls[slices.node[nv]] = True
            if (slices.m[nv] > NVLS_MAX_HEADS).any() and _HEADS_NOTE not in notes:
                notes.append(_HEADS_NOTE)
        ring = pre & ~nvls_part
        if ring.any():
            one_way.append((slices.node[ring], slices.next_node[ring],
                            2 * (slices.m[ring] - 1) / slices.m[ring], slices.group[ring]))
            messages = 1 + 2 * (int(slices.m[ring].max()) - 1)
        # NVLS parts send only their heads' slices, S/heads each; ring parts every rank's
        width = np.where(nv, nvls_heads(slices.m), slices.m)
        sends = slices.slice < width
        virtual = slices.group.astype(np.int64) * slices.width + slices.slice
        problem, flows, roots = sharp_plan(fabric, fabric.derived(_sharp_arcs),
                                           slices.node[sends], virtual[sends], capable)
        if problem is not None:
            first, reason = int(problem[0] // slices.width), problem[1]
            raise NotApplicable(f"in-network reduction does not apply to group"
                                  f" {names[first]!r}: {why_not_nvls(first)}, and {reason}")
        group = (flows[3] // slices.width).astype(np.int32)
        slices_of_group = np.zeros(groups.count, np.int64)
        slices_of_group[slices.group] = width
        share = 1 / slices_of_group[group]
        symmetric.append((flows[0], flows[1], flows[2] * share, group))
        tiers = labels(nodes["tier"])[roots]
        counts = ", ".join(f"{c} at {t}" for t, c in zip(*np.unique(tiers, return_counts=True),
                                                          strict=True))
        how = " and ".join(w for w, used in (("NVLS", nv.any()), ("rings", ring.any())) if used)
        pre_note = (f"; reduced inside each scale-up domain first ({how}), each rank's NIC"
                    " carrying S / ranks per domain" if pre.any() else "")
        notes.append(f"innetwork: {len(b_groups)} group(s) reduce in scale-out switches (SHARP);"
                     f" aggregation roots (one per slice and plane): {counts}{pre_note}")
    efficiency = float(chips.efficiency[distinct(chips.dst[np.isin(chips.src, np.flatnonzero(
        used_nvls))])].min(initial=1.0))
    if efficiency < 1:
        notes.append(f"innetwork: NVLS at {efficiency:g} of the links' effective rate"
                     " (nvls_efficiency of the switch chips)")
    return _assemble(symmetric, one_way, tuple(notes), efficiency, messages)


def _assemble(symmetric: list[_Flows], one_way: list[_Flows], notes: tuple[str, ...],
              efficiency: float, messages: int,
              label: str = "in-network reduce and multicast") -> _InNetworkPlan:
    """Flows up, the same flows reversed (down), then the one-way flows."""
    def cat(parts: list[_Flows], k: int) -> np.ndarray:
        return np.concatenate([p[k] for p in parts]) if parts else np.empty(0)

    up = [cat(symmetric, k) for k in range(4)]
    way = [cat(one_way, k) for k in range(4)]
    src = np.concatenate([up[0], up[1], way[0]]).astype(np.int64)
    dst = np.concatenate([up[1], up[0], way[1]]).astype(np.int64)
    fraction = np.concatenate([up[2], up[2], way[2]]).astype(float)
    group = np.concatenate([up[3], up[3], way[3]]).astype(np.int32)
    return _InNetworkPlan(src, dst, fraction, group, notes, efficiency, messages, label)


def _empty_plan() -> _InNetworkPlan:
    empty = np.empty(0, np.int64)
    return _InNetworkPlan(empty, empty, np.empty(0), empty.astype(np.int32), ())


@dataclass(frozen=True, eq=False)
class _Slices:
    """Every rank of some groups, flat: node, group, its part's size ``m``, its position
    (slice) in its part, the next rank round its part, its part index and the group's
    parts; ``width`` bounds the slices (for virtual group numbers)."""

    node: np.ndarray
    group: np.ndarray
    m: np.ndarray
    slice: np.ndarray
    next_node: np.ndarray
    part: np.ndarray
    parts: np.ndarray
    width: int
    m_of_group: np.ndarray  # per group index (all groups), 0 where not listed


def _slices(fabric: Fabric, groups: GroupBlocks, names: tuple[str, ...],
            which: np.ndarray) -> _Slices:
    """Domain parts of the listed groups (ascending group indices); refuse a group whose
    parts differ in size."""
    out: list[list[np.ndarray]] = [[] for _ in range(7)]
    for k, gid, rows in groups.select(which):
        block = groups.blocks[k]
        # the whole block: its parts, made once per block
        layout = (groups.block(k).layout if len(rows) == len(block)
                  else domain_parts(fabric, block[rows]))
        n = layout.n
        uneven = np.flatnonzero(layout.size.min(axis=1) != layout.size.max(axis=1))
        if len(uneven):
            i = int(uneven[0])
            sizes = layout.size[i][layout.start[i] == np.arange(n)]
            raise NotApplicable(
                f"in-network reduction across scale-up domains needs the same number of"
                f" ranks in every domain part of a group (NCCL's CollNet and NVLS-Tree"
                f" slice the buffer per node); group {names[int(gid[i])]!r} has parts of"
                f" {', '.join(map(str, sizes.tolist()))} ranks")
        position = np.arange(n)
        successor = layout.start + (position - layout.start + 1) % layout.size
        for k, value in enumerate((
                layout.ranks, np.repeat(gid, n).reshape(-1, n), layout.size,
                position - layout.start, np.take_along_axis(layout.ranks, successor, 1),
                layout.part, np.repeat(layout.parts, n).reshape(-1, n))):
            out[k].append(np.asarray(value).ravel())
    node, group, m, slice_, next_node, part, parts = (np.concatenate(v) for v in out)
    m_of_group = np.zeros(groups.count, np.int64)
    m_of_group[group] = m
    return _Slices(node.astype(np.int64), group.astype(np.int32), m, slice_,
                   next_node.astype(np.int64), part, parts, int(m.max()) + 1, m_of_group)


def _parts_reduce(slices: _Slices, chips: _Chips) -> np.ndarray:
    """Per rank: whether its whole part is in one system on chips that all reduce."""
    key = slices.group.astype(np.int64) * (int(slices.part.max()) + 1) + slices.part
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    start = np.flatnonzero(np.r_[True, sorted_key[1:] != sorted_key[:-1]])
    ok = np.minimum.reduceat(chips.reducing[slices.node[order]], start)
    system = chips.system[slices.node[order]]
    same = np.minimum.reduceat(system, start) == np.maximum.reduceat(system, start)
    out = np.empty(len(order), bool)
    out[order] = np.repeat(ok & same, np.diff(np.r_[start, len(order)]))
    return out


def _sharp_arcs(fabric: Fabric) -> SharpArcs:
    view = fabric.derived(in_network_view)
    return sharp_arcs(fabric, view.lsrc, view.ldst, view.kind_src, view.kind_dst)


def _in_network_phases(plan: _InNetworkPlan, size: float) -> tuple[Phase, ...]:
    """One phase: the switches reduce and multicast chunk by chunk, so the reduction
    going up and the result coming down run at once, on opposite directions of the same
    links (NCCL pipelines the stages)."""
    if not len(plan.src):
        return ()
    return (Phase(plan.src, plan.dst, plan.fraction * size, plan.group, 1, plan.label,
                  plan.messages, plan.efficiency),)


def _nvls_tree_plan(fabric: Fabric, groups: GroupBlocks, names: tuple[str, ...],
                    active: np.ndarray, chips: _Chips) -> _InNetworkPlan:
    """NVLS inside every part, a double binary tree per slice over the parts."""
    slices = _slices(fabric, groups, names, active)
    alone = slices.parts < 2
    if alone.any():
        raise NotApplicable(f"nvlstree needs a group spanning two or more scale-up domains"
                              f" (NCCL runs NVLS-Tree across nodes only); group"
                              f" {names[int(slices.group[np.argmax(alone)])]!r} is in one")
    reduces = _parts_reduce(slices, chips)
    if not reduces.all():
        bad = int(slices.group[np.argmax(~reduces)])
        raise NotApplicable(f"nvlstree does not apply to group {names[bad]!r}: its ranks in"
                              " a scale-up domain are not all in one system on switch chips"
                              " that reduce in the network")
    multi = slices.m > 1
    symmetric = [chips.flows(slices.node[multi], slices.group[multi],
                             nvls_port_share(slices.slice[multi], slices.m[multi]))]
    first = np.flatnonzero(np.r_[True, slices.group[1:] != slices.group[:-1]])
    group_start = np.repeat(first, np.diff(np.r_[first, len(slices.group)]))
    depth = 0
    for p in distinct(slices.parts):
        trees = double_binary_tree(int(p))
        depth = max(depth, *(tree_depth(t) for t in trees))
        # part 0's NVLS heads, slice j each (at most NVLS_MAX_HEADS per part)
        heads = np.flatnonzero((slices.parts == p) & (slices.part == 0)
                               & (slices.slice < nvls_heads(slices.m)))
        m, start = slices.m[heads], group_start[heads]
        width = nvls_heads(m)  # the slices, S/width each
        for parents in trees:
            child = np.flatnonzero(parents >= 0)
            low = (start + slices.slice[heads])[:, None] + child[None, :] * m[:, None]
            high = (start + slices.slice[heads])[:, None] + parents[child][None, :] * m[:, None]
            symmetric.append((slices.node[low.ravel()], slices.node[high.ravel()],
                              np.repeat(1 / (2 * width), len(child)),
                              np.repeat(slices.group[heads], len(child))))
    used = distinct(chips.dst[np.isin(chips.src, slices.node)])
    efficiency = float(chips.efficiency[used].min(initial=1.0))
    count = len(distinct(slices.group))
    heads_note = (_HEADS_NOTE,) if (slices.m > NVLS_MAX_HEADS).any() else ()
    notes = (f"nvlstree: {count} group(s): NVLS inside each scale-up domain (S (1 + 1/m)"
             " each way per rank), and per slice S/m a double binary tree over the domains"
             " among the ranks of that slice, S/(2m) per tree",
             f"nvlstree: NVLS at {efficiency:g} of the links' effective rate"
             " (nvls_efficiency of the switch chips)")
    rate_note = notes[1:] if efficiency < 1 else ()
    return _assemble(symmetric, [], notes[:1] + heads_note + rate_note, efficiency,
                     1 + 2 * depth, "NVLS-Tree reduce and broadcast")


_HEADS_NOTE = (f"innetwork: more than {NVLS_MAX_HEADS} ranks in a scale-up domain part:"
               f" NCCL's {NVLS_MAX_HEADS} NVLS heads each reduce 1/{NVLS_MAX_HEADS} of S and"
               f" carry S (1 + 1/{NVLS_MAX_HEADS}) each way, every other rank S")

_ACC, _NIC, _CHIP, _SWITCH = range(4)  # codes of NODE_KINDS, in its order


def in_network_traffic(groups: GroupBlocks, names: tuple[str, ...], size: float,
                       algorithm: str) -> tuple[tuple[Phase, ...], tuple[str, ...]]:
    """The phases and notes of ``algorithm`` (innetwork or nvlstree) for every group."""
    plan = _plan_in_network(groups.fabric, groups, names, algorithm=algorithm)
    return _in_network_phases(plan, size), plan.notes


def reduction_enabled(fabric: Fabric, kind: np.ndarray) -> np.ndarray:
    """Per node (``kind`` its code of NODE_KINDS): whether the fabric runs in-network
    reduction there. Scale-up switch chips do wherever their part can unless the
    design's ``scaleup.nvls`` is false (NCCL enables NVLS by default;
    ``NCCL_NVLS_ENABLE=0`` turns it off); scale-out switches only where the design's
    ``scaleout.in_network_reduction`` says so (stock NCCL runs no CollNet without the
    SHARP plugin and ``NCCL_COLLNET_ENABLE=1``)."""
    design = fabric.design
    scaleup = (kind == NODE_KINDS.index("scaleup_switch")) & bool(design.scaleup.nvls)
    return scaleup | ((kind == NODE_KINDS.index("switch"))
                      & bool(design.scaleout.in_network_reduction))


@ignores_failures
def switches_reduce(fabric: Fabric) -> bool:
    """Whether any switch of the fabric reduces in the network, failed or not: its
    catalog entry's ``in_network_reduction``, and for a scale-out switch the design's."""
    nodes = fabric.node_arrays
    kind = category_codes(nodes["kind"], NODE_KINDS)
    model = nodes["model"]
    codes = distinct(model.codes[reduction_enabled(fabric, kind)])
    return any(getattr(fabric.catalog.entries.get(model.categories[c]), "in_network_reduction",
                       False) for c in codes.tolist() if c >= 0)


INNETWORK = Algorithm(
    "innetwork", ("allreduce",),
    note="innetwork: the switches reduce (NVLS inside a system, SHARP in a fat-tree)",
    help="the switches reduce: NVLS, SHARP", nccl_intra="nvls",
    nccl_inter="collnet_direct", plan=in_network_traffic, reads_switch_state=True,
    applies=lambda fabric: fabric.derived(switches_reduce))

NVLSTREE = Algorithm(
    "nvlstree", ("allreduce",),
    note="nvlstree: NVLS inside each domain part, NCCL's double binary tree across them",
    help="NVLS inside, tree across", nccl_intra="nvls_tree", nccl_inter="nvls_tree",
    plan=in_network_traffic, reads_switch_state=True,
    applies=lambda fabric: fabric.derived(switches_reduce))
