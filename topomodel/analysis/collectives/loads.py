"""Where a collective's bytes went: the load of each link tier, the busiest links and
the traffic across the bisection, as typed results (the report layer turns them into
tables and JSON). Utilisation is a link's busy time over the collective's time (0-1),
with the time model's effective rates (the same numbers ``route`` and ``draw`` show)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topomodel.analysis.bisection import closed_form, halves
from topomodel.analysis.collectives.collective import CollectiveRun
from topomodel.analysis.collectives.timing import TrafficTime
from topomodel.fabric.tables import Fabric, ignores_failures, link_weaker_Bps
from topomodel.traffic.phases import AllPairsPhase, Traffic
from topomodel.vocabulary import LINK_TIERS


@dataclass(frozen=True)
class TierLoad:
    """One link tier under a collective."""

    name: str
    bytes: float  # on every link of the tier, both directions
    capacity_Bps: float  # all links of the tier, one direction
    peak_utilization: float  # busiest link's busy time / collective time, 0-1
    mean_utilization: float
    time_share: float  # share of the bandwidth time whose slowest link is in this tier


@dataclass(frozen=True)
class Hotspot:
    """One of the busiest links."""

    link: str  # "src -> dst"
    tier: str
    bytes: float
    utilization: float  # busy time / collective time, 0-1
    groups: tuple[str, ...]  # group sets that put bytes on it


@dataclass(frozen=True)
class BisectionTraffic:
    """Bytes crossing between the bisection halves (the busier direction)."""

    bytes: float
    capacity_Bps: float  # closed-form bisection, one direction
    time_s: float  # the bytes at that capacity


def link_utilization(timing: TrafficTime) -> np.ndarray:
    """Each link's busy time over the traffic's time, 0-1 (indexed like the links)."""
    return timing.link_busy_s / (timing.time_s or 1.0)


def tier_loads(fabric: Fabric, timing: TrafficTime) -> list[TierLoad]:
    """The load of every link tier present, in tier order."""
    links = fabric.link_arrays
    codes = links["tier"].codes
    names = list(links["tier"].categories)
    bottleneck_time: dict[str, float] = {}
    for p in timing.phases:
        if p.bottleneck >= 0 and p.bandwidth_s > 0:
            tier = names[codes[p.bottleneck]]
            bottleneck_time[tier] = bottleneck_time.get(tier, 0.0) + p.steps * p.bandwidth_s
    all_bw = sum(bottleneck_time.values()) or 1.0
    by_tier = fabric.derived(rows_by_tier)
    order, starts = by_tier.order, by_tier.starts
    # each tier's rows side by side, in row order: the sums a mask per tier gives
    capacity = by_tier.capacity  # one direction: the weaker where they differ
    link_bytes, util = timing.link_bytes[order], link_utilization(timing)[order]
    rows = []
    for code in by_tier.present:
        tier = slice(starts[code], starts[code + 1])
        rows.append(TierLoad(names[code], float(link_bytes[tier].sum()),
                             float(capacity[tier].sum() / 2), float(util[tier].max()),
                             float(util[tier].mean()),
                             bottleneck_time.get(names[code], 0.0) / all_bw))
    return sorted(rows, key=lambda r: LINK_TIERS.index(r.name))


@dataclass(frozen=True, eq=False)
class _RowsByTier:
    """The link rows grouped by tier code, each tier's in row order (``order``), where
    each code's start (``starts``, one more than there are codes), the codes present,
    and the weaker direction's capacity of each row in that order."""

    order: np.ndarray
    starts: np.ndarray
    present: np.ndarray
    capacity: np.ndarray


@ignores_failures
def rows_by_tier(fabric: Fabric) -> _RowsByTier:
    tier = fabric.link_arrays["tier"]
    codes = tier.codes
    counts = np.bincount(codes, minlength=len(tier.categories))
    order = np.argsort(codes, kind="stable")
    return _RowsByTier(order, np.concatenate([[0], np.cumsum(counts)]),
                       np.flatnonzero(counts), fabric.derived(link_weaker_Bps)[order])


def hotspots(fabric: Fabric, run: CollectiveRun, top: int) -> list[Hotspot]:
    """The ``top`` busiest links of a run, busiest first (of equally busy ones, the
    lowest rows)."""
    util = link_utilization(run.timing)
    count = min(top, int((util > 0).sum()))
    if not count:
        return []
    rows = busiest_rows(util, count)
    names = fabric.node_arrays["name"]
    links = fabric.link_arrays
    src, dst = links["src"], links["dst"]
    tier = links["tier"]
    codes, categories = tier.codes, tier.categories
    return [Hotspot(f"{names[src[r]]} -> {names[dst[r]]}", str(categories[codes[r]]),
                    float(run.timing.link_bytes[r]), float(util[r]),
                    tuple(name for name, per in zip(run.group_sets, run.set_link_bytes,
                                                    strict=True) if per[r] > 0))
            for r in rows]


def busiest_rows(values: np.ndarray, count: int) -> np.ndarray:
    """The rows of the ``count`` largest ``values`` (1 to len), largest first, equal ones
    by row: ``np.argsort(-values, kind="stable")[:count]`` without sorting every row.

    Examples
    --------
    >>> busiest_rows(np.array([1.0, 3.0, 2.0, 3.0, 2.0]), 3).tolist()
    [1, 3, 2]
    """
    positive = np.flatnonzero(values > 0)  # where they are enough, the busiest are there
    among = positive if count <= len(positive) else np.arange(len(values))
    negated = -values[among]
    kth = np.partition(negated, count - 1)[count - 1]
    above = np.flatnonzero(negated < kth)
    rows = np.concatenate([above, np.flatnonzero(negated == kth)[:count - len(above)]])
    rows.sort()
    return among[rows[np.argsort(negated[rows], kind="stable")]]


def node_sides(fabric: Fabric) -> np.ndarray:
    """Per node, its side of the bisection (:func:`~topomodel.analysis.bisection.halves`):
    0 or 1 for the accelerators; a system's other nodes (its NICs, its switch chips) on
    its accelerators' side, then a scale-up domain's on its side; -1 for a node on no
    side (the scale-out switches the cut runs through, a node of a system or domain
    split by the cut). An in-network reduction's flows between an accelerator and its
    own switch chip or NIC then stay on one side, and those to a scale-out switch
    cross no side."""
    nodes = fabric.node_arrays
    side_a, side_b = halves(fabric)
    side = np.full(len(nodes), -1)
    side[side_a], side[side_b] = 0, 1
    for column in ("system", "domain"):
        owner = nodes[column]
        acc = fabric.accelerators
        acc = acc[owner[acc] >= 0]
        width = int(owner.max(initial=-1)) + 1
        low = np.full(width, 2)
        high = np.full(width, -1)
        np.minimum.at(low, owner[acc], side[acc])
        np.maximum.at(high, owner[acc], side[acc])
        whole = np.where(low == high, low, -1)  # -1: split, or no accelerator
        rest = np.flatnonzero((side < 0) & (owner >= 0))
        side[rest] = whole[owner[rest]]
    return side


def bisection_traffic(fabric: Fabric, traffic: Traffic) -> BisectionTraffic | None:
    """Bytes crossing between the bisection halves, or ``None`` where the fabric has no
    closed-form bisection."""
    capacity, _ = closed_form(fabric)
    if not capacity:
        return None
    side = node_sides(fabric)
    in_a, in_b = side == 0, side == 1
    crossing = 0.0
    for p in traffic.phases:
        if isinstance(p, AllPairsPhase) and p.rewrite is None:
            # every rank of a row sends to every other: |row in A| x |row in B| pairs
            # each way, the same bytes each
            each_way = sum(float((b.bytes * in_a[b.ranks].sum(axis=1)
                                  * in_b[b.ranks].sum(axis=1)).sum()) for b in p.blocks)
            crossing += each_way * p.steps
            continue
        a_to_b = float(p.bytes[in_a[p.src] & in_b[p.dst]].sum())
        b_to_a = float(p.bytes[in_b[p.src] & in_a[p.dst]].sum())
        crossing += max(a_to_b, b_to_a) * p.steps
    return BisectionTraffic(crossing, capacity, crossing / capacity)
