"""Time of traffic on a fabric: per phase, slowest link plus latency, split three ways.

For each phase (repeated ``steps`` times)::

    step time  = max over links (bytes / (capacity x efficiency))   bandwidth + topology
               + switches on the longest path x switch latency
    + hops x propagation + messages x per-message overhead          latency

The bandwidth part is what an ideal non-blocking fabric with the same injection
bandwidth would take (the busiest accelerator's bytes over its injection capacity,
scale-up and scale-out counted separately); the topology part is the rest of the
slowest-link time (oversubscription, slower tiers, collisions, failures).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from topomodel.catalog import ScaleupLink
from topomodel.errors import UsageError
from topomodel.fabric.tables import LINK_TIERS, Fabric, labels
from topomodel.records import Reading, check_fields, mapping_of, number, quantity, spec
from topomodel.routing import route
from topomodel.routing.routed import Routed
from topomodel.traffic.phases import Phase, Traffic
from topomodel.yamlsource import KeyPath

PER_MESSAGE_OVERHEAD_S = 5e-6
"""Software cost of one message per step (kernel launch, proxy, doorbell), seconds.
Assumed, of the order NCCL's small-message latencies show (a few microseconds); a
named parameter, not a measured figure."""

DEFAULT_HOP_LATENCY_S = 500e-9
"""Latency of a switch with no catalog figure, seconds (assumed; the same default as the
builder's switch latency)."""


def _tier_fractions(reading: Reading, path: KeyPath, value: Any) -> dict[str, float]:
    """Effective / nominal rate per link tier, each in (0, 1]; may be empty."""
    if isinstance(value, dict) and not value:
        return {}
    return dict(mapping_of(LINK_TIERS, number(0, 1, low_open=True))(reading, path, value))


@dataclass(frozen=True)
class TimeModel:
    """Assumptions of the time model, each a named parameter with a default and reason;
    checked on creation."""

    per_message_overhead_s: float = spec(
        quantity("time"), default=PER_MESSAGE_OVERHEAD_S, check=number(0),
        doc="software cost of one message per step (kernel launch, proxy, doorbell),"
        " seconds; assumed, of the order of NCCL's small-message latencies")
    hop_latency_s: float = spec(
        quantity("time"), default=DEFAULT_HOP_LATENCY_S, check=number(0),
        doc="latency of a switch with no catalog figure, seconds (assumed; the builder's"
        " default switch latency)")
    efficiency: dict[str, float] = spec(
        _tier_fractions, default={}, doc="effective / nominal rate of a link tier, 0-1"
        " (default: the catalog's scale-up link efficiency, else line rate)")

    def __post_init__(self) -> None:
        check_fields(self, UsageError)


def tier_efficiency(fabric: Fabric, model: TimeModel) -> dict[str, float]:
    """Effective/nominal rate per link tier: the model's, else the catalog's scale-up
    link efficiency for ``scaleup`` links, else 1 (line rate)."""
    out = dict.fromkeys(fabric.links["tier"].cat.categories, 1.0)
    link_id = fabric.structure.scaleup.link
    if link_id:
        out["scaleup"] = fabric.catalog.get(link_id, ScaleupLink).efficiency
    out.update(model.efficiency)
    return out


@dataclass(frozen=True, eq=False)
class PhaseTime:
    """One phase: per-step times (seconds) and where the bytes went."""

    label: str
    steps: int
    bandwidth_s: float  # per step, slowest link
    ideal_s: float  # per step, non-blocking fabric with the same injection
    latency_s: float  # per step
    bottleneck: int  # link row of the slowest link (-1 if none)
    routed: Routed

    @property
    def time_s(self) -> float:
        """The whole phase, all steps."""
        return self.steps * (self.bandwidth_s + self.latency_s)


@dataclass(frozen=True, eq=False)
class TrafficTime:
    """All phases: total time and its split, plus per-link bytes and busy time."""

    phases: tuple[PhaseTime, ...]
    link_bytes: np.ndarray  # all steps of all phases
    link_busy_s: np.ndarray  # time each link spends sending
    unroutable_flows: int
    unroutable_bytes: float

    @property
    def time_s(self) -> float:
        """Total time, seconds."""
        return sum(p.time_s for p in self.phases)

    @property
    def latency_s(self) -> float:
        """Latency part, seconds."""
        return sum(p.steps * p.latency_s for p in self.phases)

    @property
    def bandwidth_s(self) -> float:
        """Non-blocking bandwidth part, seconds."""
        return sum(p.steps * min(p.ideal_s, p.bandwidth_s) for p in self.phases)

    @property
    def topology_s(self) -> float:
        """Congestion, oversubscription, slower tiers: the rest, seconds."""
        rest = self.time_s - self.latency_s - self.bandwidth_s
        return rest if rest > 1e-9 * self.time_s else 0.0  # not rounding noise


def time_traffic(fabric: Fabric, traffic: Traffic, *, routing: str = "ecmp", seed: int = 0,
                 router: str = "auto", model: TimeModel | None = None) -> TrafficTime:
    """Route every phase of ``traffic`` and time it."""
    model = model or TimeModel()
    links = fabric.links
    efficiency = tier_efficiency(fabric, model)
    tier_codes = links["tier"].cat.codes.to_numpy()
    eff = np.array([efficiency[t] for t in links["tier"].cat.categories])[tier_codes]
    rate = links["capacity_Bps"].to_numpy() * eff
    rate = np.where(links["failed"].to_numpy(), 0.0, rate)
    switch_latency, propagation = _hop_latency(fabric, model)
    injection = _injection(fabric, efficiency)
    total_bytes = np.zeros(len(links))
    busy = np.zeros(len(links))
    phases = []
    lost_flows, lost_bytes = 0, 0.0
    for ph in traffic.phases:
        routed = route(fabric, ph, routing=routing, seed=seed, router=router)
        with np.errstate(divide="ignore", invalid="ignore"):
            link_time = np.where(routed.link_bytes > 0, routed.link_bytes / rate, 0.0)
        bottleneck = int(np.argmax(link_time)) if len(link_time) else -1
        bandwidth = float(link_time.max()) if len(link_time) else 0.0
        latency = (_path_latency(fabric, ph, routed.hops, switch_latency, propagation)
                   + ph.messages_per_step * model.per_message_overhead_s)
        phases.append(PhaseTime(ph.label, ph.steps, bandwidth, _ideal(fabric, ph, injection),
                                latency, bottleneck, routed))
        total_bytes += routed.link_bytes * ph.steps
        busy += link_time * ph.steps
        lost_flows += len(routed.unroutable)
        lost_bytes += float(ph.bytes[routed.unroutable].sum()) * ph.steps
    return TrafficTime(tuple(phases), total_bytes, busy, lost_flows, lost_bytes)


def _hop_latency(fabric: Fabric, model: TimeModel) -> tuple[float, float]:
    """The slowest switch's latency and the longest cable's propagation, seconds."""
    switch = fabric.nodes.loc[fabric.nodes["kind"].isin(["switch", "scaleup_switch"]),
                              "latency_s"]
    slowest = float(switch.max()) if len(switch) else 0.0
    propagation = float(fabric.links["latency_s"].max()) if len(fabric.links) else 0.0
    return (slowest or model.hop_latency_s), propagation


def _path_latency(fabric: Fabric, ph: Phase, hops: np.ndarray, switch_s: float,
                  propagation_s: float) -> float:
    """Longest path latency of a phase: switches crossed x switch latency + hops x
    propagation. A path between scale-up domains passes two NICs, which are not
    switches (hops - 3 switches); one inside a domain, hops - 1."""
    if not len(hops):
        return 0.0
    domain = fabric.nodes["domain"].to_numpy()
    inside = (domain[ph.src] == domain[ph.dst]) & (domain[ph.src] >= 0)
    switches = np.maximum(0, hops - np.where(inside | (hops < 4), 1, 3))
    return float((switches * switch_s + hops * propagation_s).max())


def _injection(fabric: Fabric, efficiency: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """Per node: effective scale-up and scale-out injection capacity, bytes/s; the
    builder's figures (:attr:`Fabric.injection`) at each tier's efficiency."""
    injection = fabric.injection
    acc = fabric.accelerators
    up, out = np.zeros(len(fabric.nodes)), np.zeros(len(fabric.nodes))
    up[acc] = injection.scaleup_Bps * efficiency.get("scaleup", 1.0)
    # each NIC of an accelerator: its host link or its ports, whichever is slower
    out[acc] = np.minimum(injection.host_Bps * efficiency.get("host", 1.0),
                          injection.nic_ports_Bps * efficiency.get("leaf", 1.0))
    return up, out


def _ideal(fabric: Fabric, ph: Phase, injection: tuple[np.ndarray, np.ndarray]) -> float:
    """Per-step time on a non-blocking fabric with the same injection bandwidth."""
    up, out = injection
    domain = fabric.nodes["domain"].to_numpy()
    kind = labels(fabric.nodes["kind"])
    local = ((domain[ph.src] == domain[ph.dst]) & (domain[ph.src] >= 0)) | (
        kind[ph.src] == "scaleup_switch") | (kind[ph.dst] == "scaleup_switch")
    worst = 0.0
    for mask, capacity in ((local, up), (~local, out)):
        if not mask.any():
            continue
        n = len(capacity)
        sent = np.bincount(ph.src[mask], weights=ph.bytes[mask], minlength=n)
        received = np.bincount(ph.dst[mask], weights=ph.bytes[mask], minlength=n)
        load = np.maximum(sent, received)
        busy = (load > 0) & (kind == "accelerator")  # switches reducing in-network: no
        busy &= capacity > 0  # accelerators without a NIC send through their neighbours'
        if busy.any():
            worst = max(worst, float((load[busy] / capacity[busy]).max()))
    return worst
