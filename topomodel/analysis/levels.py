"""The fabric as levels: each level's group size, bandwidth per accelerator and
latency, from the scale-up domain outwards (what ASTRA-sim, Calculon and the review take)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from topomodel.analysis.collectives.linkrates import tier_efficiency
from topomodel.analysis.collectives.timing import TimeModel
from topomodel.arrays import distinct
from topomodel.errors import UsageError
from topomodel.fabric.columns import Coded
from topomodel.fabric.scaleout import scaleout_kind
from topomodel.fabric.scaleup import scaleup_kind
from topomodel.fabric.structure import nic_owner_nodes, scaleout_injection_Bps
from topomodel.fabric.tables import Fabric, link_weaker_Bps
from topomodel.vocabulary import SWITCH_KINDS


@dataclass(frozen=True)
class NetworkLevel:
    """One level of the fabric's hierarchy, as dimension-based simulators see it.

    A level joins ``npus`` groups of the level below (accelerators for the first):
    accelerators that differ only in this level's coordinate talk through it.
    """

    name: str  # "scale-up", "scale-up x", "leaf", "spine", "core"
    network: str  # "scale-up" or "scale-out"
    topology: str  # ASTRA-sim building block: Switch, Ring or FullyConnected
    npus: int  # members along this dimension
    reach: int  # accelerators that talk within one group of this level
    link_Bps: float  # one link per direction as the building block counts it
    injection_Bps: float  # per accelerator into this level, per direction
    latency_s: float  # one crossing, end to end: switches x latency + propagation
    efficiency: float  # effective / nominal rate of the slowest tier crossed
    tiers: tuple[str, ...]  # link tiers a crossing uses
    oversubscription: float  # down:up product of the tiers below this level's top (1: none)


def network_levels(fabric: Fabric, time_model: TimeModel | None = None) -> list[NetworkLevel]:
    """The fabric as a hierarchy of levels, innermost first (bytes/s per direction).

    Scale-up: a switched domain is one ``Switch`` level; a full mesh one
    ``FullyConnected`` level; a torus one ``Ring`` per dimension longer than 1; a
    supernode a ``Switch`` per system and one over the supernode (merged when their
    bandwidth is the same). Scale-out: the domains under one leaf, one pod and the whole
    fabric, each a ``Switch`` level whose bandwidth is the per-accelerator injection
    divided by the oversubscription of the tiers below it; a level is kept only where
    every group has the same number of domains (else it merges into the next), and
    neighbouring levels of equal bandwidth merge. Failed links are ignored: this is the
    design as built.
    """
    time_model = time_model or TimeModel()
    efficiency = tier_efficiency(fabric, time_model)
    levels = _scaleup_levels(fabric, time_model, efficiency)
    levels += _scaleout_levels(fabric, time_model, efficiency, levels)
    reach = 1
    out = []
    for level in levels:
        reach *= level.npus
        out.append(replace(level, reach=reach))
    return out


def _tier_stats(fabric: Fabric) -> tuple[dict[str, float], dict[str, float]]:
    """Per link tier: capacity of all links one way (bytes/s) and the longest delay (s)
    (found once per fabric: both networks' levels read them)."""
    return fabric.derived(_tier_totals)


def _tier_totals(fabric: Fabric) -> tuple[dict[str, float], dict[str, float]]:
    links = fabric.links
    grouped = links.groupby("tier", observed=True)
    weaker = pd.Series(fabric.derived(link_weaker_Bps), index=links.index)
    capacity = {str(k): float(v) / 2 for k, v in weaker.groupby(
        links["tier"], observed=True).sum().items()}
    delay = {str(k): float(v) for k, v in grouped["latency_s"].max().items()}
    return capacity, delay


def _switch_latency(fabric: Fabric, tiers: Sequence[str], time_model: TimeModel) -> float:
    """The slowest switch of these node tiers, seconds (the time model's default if none
    has a catalog figure)."""
    nodes = fabric.nodes
    mask = nodes["tier"].isin(list(tiers)).to_numpy() & nodes["kind"].isin(
        SWITCH_KINDS).to_numpy()
    slowest = float(nodes.loc[mask, "latency_s"].max()) if mask.any() else 0.0
    return slowest or time_model.hop_latency_s


def _domain_size(fabric: Fabric) -> int:
    domain = fabric.node_arrays["domain"][fabric.accelerators]
    if (domain < 0).any():
        return 1
    sizes = np.bincount(domain)
    sizes = sizes[sizes > 0]
    return int(sizes.max()) if len(sizes) else 1


def _scaleup_levels(fabric: Fabric, time_model: TimeModel,
                    efficiency: dict[str, float]) -> list[NetworkLevel]:
    """The scale-up kind's levels (:meth:`~topomodel.fabric.scaleup.kind.ScaleupKind.
    levels`), timed: its switches at the slowest chip of their tiers, its link delays at
    the longest of its tiers."""
    kind = scaleup_kind(fabric.structure)
    if not kind.has_links:
        return []
    capacity, delay = _tier_stats(fabric)
    n = max(1, fabric.accelerator_count)
    links = fabric.links
    from_acc = fabric.kind_mask("accelerator")[links["src"].to_numpy()] & Coded(
        links["tier"]).equals("scaleup")
    injection = float(links.loc[from_acc, "capacity_Bps"].sum()) / n
    out = []
    for shape in kind.levels(fabric.structure, _domain_size(fabric), capacity, injection):
        switches = (shape.switches * _switch_latency(fabric, shape.switch_tiers, time_model)
                    if shape.switches else 0.0)
        latency = switches + shape.propagations * max(delay.get(t, 0.0) for t in shape.tiers)
        out.append(NetworkLevel(shape.name, "scale-up", shape.topology, shape.npus,
                                shape.npus, shape.link_Bps, shape.injection_Bps, latency,
                                min(efficiency.get(t, 1.0) for t in shape.tiers),
                                shape.tiers, shape.oversubscription))
    return _merged(out)


def _scaleout_levels(fabric: Fabric, time_model: TimeModel, efficiency: dict[str, float],
                     inner: list[NetworkLevel]) -> list[NetworkLevel]:
    kind = scaleout_kind(fabric.structure)
    capacity, delay = _tier_stats(fabric)
    groups = kind.level_groups(list(capacity))
    if not groups:
        return []
    n = max(1, fabric.accelerator_count)
    injection = scaleout_injection_Bps(fabric.injection)
    over = dict.fromkeys(kind.switch_tiers, 1.0)
    for t in fabric.clos_tiers:
        if t.name in over and t.oversubscription > over[t.name]:
            over[t.name] = t.oversubscription
    switch_latency = _switch_latency(fabric, kind.switch_tiers, time_model)
    domains = _domain_of_accelerators(fabric)
    n_domains = int(domains.max()) + 1
    leaf_key, pod_key = _domain_keys(fabric, domains, n_domains)
    keys = {"leaf": leaf_key, "pod": pod_key, "all": None}
    out: list[NetworkLevel] = []
    below = 1  # domains per group of the level below
    for group in groups:
        name, key, tiers = group.name, keys[group.grouping], group.tiers
        size = n_domains if key is None else _uniform_group_size(key)
        if size is None or size <= below or n_domains % size or size % below:
            continue  # groups of unequal size, or nothing new: merge into the next
        crossed = tiers[1:-1]  # the uplinks of every tier below this level's top
        factor = math.prod((over[t] for t in crossed), start=1.0)
        switches = 2 * len(tiers) - 3  # leaf: 1; spine: 3; core: 5
        latency = switches * switch_latency + 2 * sum(delay.get(t, 0.0) for t in tiers)
        out.append(NetworkLevel(name, "scale-out", "Switch", size // below, 0,
                                injection / factor, injection / factor, latency,
                                min(efficiency.get(t, 1.0) for t in tiers), tiers, factor))
        below = size
    if inner and out and math.prod(level.npus for level in inner) * below != n:
        raise UsageError("the scale-up domains and the scale-out groups do not nest: the"
                         " fabric has no level structure to export")
    return _merged(out)


def _domain_of_accelerators(fabric: Fabric) -> np.ndarray:
    """Each accelerator's scale-up domain, numbered 0.. (its own when it has none)."""
    domain = fabric.node_arrays["domain"][fabric.accelerators]
    if (domain < 0).any():
        return np.arange(len(domain))
    _, numbered = np.unique(domain, return_inverse=True)
    return numbered


def _domain_keys(fabric: Fabric, domains: np.ndarray,
                 n_domains: int) -> tuple[np.ndarray, np.ndarray]:
    """Per domain: a group key for 'under the same leaves' and 'in the same pods'.

    Two domains share a key when their NICs reach exactly the same set of leaves (or of
    pods): the same rails of the same scalable unit.
    """
    nodes, links = fabric.nodes, fabric.links
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    tier = Coded(links["tier"])
    acc_domain = np.full(len(nodes), -1)
    acc_domain[fabric.accelerators] = domains
    # NIC -> the domain of the accelerator holding its host link, NIC -> leaf (leaf links)
    owner = nic_owner_nodes(nodes, fabric.structure)
    nic_domain = np.where(owner >= 0, acc_domain[np.maximum(owner, 0)], -1)
    up = np.flatnonzero(tier.equals("leaf"))
    up = up[fabric.kind_mask("nic")[src[up]]]
    pairs_domain = nic_domain[src[up]]
    leaf = dst[up]
    pod = nodes["pod"].to_numpy()[leaf]
    keys = []
    for values in (leaf, pod):
        pairs = _distinct_pairs(pairs_domain, values)
        pairs = pairs[pairs[:, 0] >= 0]
        split = np.flatnonzero(np.diff(pairs[:, 0])) + 1
        signatures = [tuple(part[:, 1]) for part in np.split(pairs, split)]
        owners = pairs[np.r_[0, split], 0] if len(pairs) else np.empty(0, np.int64)
        codes = {sig: i for i, sig in enumerate(dict.fromkeys(signatures))}
        key = np.arange(n_domains) + len(codes)  # domains without NICs stand alone
        key[owners] = [codes[sig] for sig in signatures]
        keys.append(key)
    return keys[0], keys[1]


def _distinct_pairs(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """The distinct (first, second) rows, sorted, as ``np.unique(axis=0)`` gives them
    (values from -1 up), by one integer key per row.

    Examples
    --------
    >>> _distinct_pairs(np.array([1, -1, 1, 0]), np.array([5, 2, 5, -1])).tolist()
    [[-1, 2], [0, -1], [1, 5]]
    """
    base = int(max(first.max(initial=0), second.max(initial=0))) + 2
    keys = np.unique((first.astype(np.int64) + 1) * base + (second + 1))
    return np.stack([keys // base - 1, keys % base - 1], axis=1)


def _uniform_group_size(key: np.ndarray) -> int | None:
    """Domains per group when every group is the same size, else None."""
    sizes = distinct(np.unique(key, return_counts=True)[1])
    return int(sizes[0]) if len(sizes) == 1 else None


def _merged(levels: list[NetworkLevel]) -> list[NetworkLevel]:
    """Neighbouring Switch levels of the same bandwidth as one (the outer latency)."""
    out: list[NetworkLevel] = []
    for level in levels:
        last = out[-1] if out else None
        if (last is not None and last.topology == level.topology == "Switch"
                and math.isclose(last.link_Bps, level.link_Bps, rel_tol=1e-9)):
            out[-1] = replace(level, npus=last.npus * level.npus,
                              efficiency=min(last.efficiency, level.efficiency))
        else:
            out.append(level)
    return out
