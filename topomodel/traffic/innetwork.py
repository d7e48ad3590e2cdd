"""In-network reduction (NVLS inside a system, SHARP in the scale-out switches):
which switches reduce for each group, and the up and down phases of the flows."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from topomodel.fabric.tables import Fabric, labels
from topomodel.traffic.communicators import CollectiveError, _check_groups, _group_names
from topomodel.traffic.phases import Phase
from topomodel.vocabulary import FAT_TREE_TIERS, NODE_KINDS


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
    kind = _codes(nodes["kind"], NODE_KINDS)
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
        serving = np.full(len(nodes), -1)
        serving[fabric.accelerators] = fabric.injection.nic
        extra = serving[ranks[orphan]]
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
    level = _codes(nodes["tier"], FAT_TREE_TIERS)
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


def _codes(column: pd.Series, values: Sequence[str]) -> np.ndarray:
    """Each row's index in ``values`` (-1 where absent), through categorical codes."""
    categorical = pd.Categorical(column)
    lookup = np.array([values.index(c) if c in values else -1
                       for c in map(str, categorical.categories)] + [-1], dtype=np.int64)
    codes: np.ndarray = lookup[categorical.codes]
    return codes


_ACC, _NIC, _CHIP, _SWITCH = range(4)  # codes of NODE_KINDS, in its order
