"""Where a collective's bytes went: the load of each link tier, the busiest links and
the traffic across the bisection, as typed results (the report layer turns them into
tables and JSON). Utilisation is a link's busy time over the collective's time (0-1),
with the time model's effective rates (the same numbers ``route`` and ``draw`` show)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topomodel.analysis.bisection import closed_form, halves
from topomodel.analysis.collective import CollectiveRun
from topomodel.analysis.timing import TrafficTime
from topomodel.arrays import distinct
from topomodel.fabric.tables import Fabric, labels, link_weaker_Bps
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
    links = fabric.links
    codes = links["tier"].cat.codes.to_numpy()
    names = list(links["tier"].cat.categories)
    capacity = fabric.derived(link_weaker_Bps)  # one direction: the weaker where they differ
    bottleneck_time: dict[str, float] = {}
    for p in timing.phases:
        if p.bottleneck >= 0 and p.bandwidth_s > 0:
            tier = names[codes[p.bottleneck]]
            bottleneck_time[tier] = bottleneck_time.get(tier, 0.0) + p.steps * p.bandwidth_s
    all_bw = sum(bottleneck_time.values()) or 1.0
    util = link_utilization(timing)
    rows = []
    for code in distinct(codes):
        mask = codes == code
        rows.append(TierLoad(names[code], float(timing.link_bytes[mask].sum()),
                             float(capacity[mask].sum() / 2), float(util[mask].max()),
                             float(util[mask].mean()),
                             bottleneck_time.get(names[code], 0.0) / all_bw))
    return sorted(rows, key=lambda r: LINK_TIERS.index(r.name))


def hotspots(fabric: Fabric, run: CollectiveRun, top: int) -> list[Hotspot]:
    """The ``top`` busiest links of a run, busiest first."""
    util = link_utilization(run.timing)
    count = min(top, int((util > 0).sum()))
    if not count:
        return []
    rows = np.argsort(-util, kind="stable")[:count]
    names = fabric.nodes["name"].to_numpy()
    links = fabric.links
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    tier = labels(links["tier"])
    return [Hotspot(f"{names[src[r]]} -> {names[dst[r]]}", str(tier[r]),
                    float(run.timing.link_bytes[r]), float(util[r]),
                    tuple(name for name, per in zip(run.group_sets, run.set_link_bytes,
                                                    strict=True) if per[r] > 0))
            for r in rows]


def bisection_traffic(fabric: Fabric, traffic: Traffic) -> BisectionTraffic | None:
    """Bytes crossing between the bisection halves, or ``None`` where the fabric has no
    closed-form bisection."""
    capacity, _ = closed_form(fabric)
    if not capacity:
        return None
    side_a, _ = halves(fabric)
    in_a = np.zeros(len(fabric.nodes), bool)
    in_a[side_a] = True
    crossing = 0.0
    for p in traffic.phases:
        if isinstance(p, AllPairsPhase) and p.rewrite is None:
            # every rank of a row sends to every other: |row in A| x |row in B| pairs
            # each way, the same bytes each
            each_way = sum(float((b.bytes * in_a[b.ranks].sum(axis=1)
                                  * (~in_a[b.ranks]).sum(axis=1)).sum()) for b in p.blocks)
            crossing += each_way * p.steps
            continue
        a_to_b = float(p.bytes[in_a[p.src] & ~in_a[p.dst]].sum())
        b_to_a = float(p.bytes[~in_a[p.src] & in_a[p.dst]].sum())
        crossing += max(a_to_b, b_to_a) * p.steps
    return BisectionTraffic(crossing, capacity, crossing / capacity)
