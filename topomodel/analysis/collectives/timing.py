"""Time of traffic on a fabric: per phase, slowest link plus latency, split three ways.

For each phase (repeated ``steps`` times) the bandwidth time is::

    max over links (bytes / (capacity x tier efficiency x phase efficiency))

at each link tier's effective rate (:func:`tier_efficiency`: NVLink and PCIe at NCCL's
achievable per-link figures, the network at its packet efficiency). A collective (a
traffic with :attr:`~topomodel.traffic.phases.Traffic.shapes`) is then timed as NCCL's
tuner times it (:mod:`topomodel.analysis.collectives.protocols`): for each protocol LL,
LL128 and Simple, NCCL's latency for the algorithm plus the bandwidth time at that
protocol's share of the bandwidth, and the fastest protocol is kept
(``TimeModel.protocol`` forces one). Where the kernel pipelines whole chunks through
several stages (NVLS inside one node) the fill and drain the tuner leaves out are
added (:mod:`topomodel.analysis.collectives.pipeline`; the choice stays the tuner's).
A collective inside one system whose catalog entry has a measured nccl-tests curve for
it is timed from that curve instead (:mod:`topomodel.analysis.collectives.curves`;
``TimeModel.measured_curves``). Other traffic pays, per phase and step, its longest
path (switches x switch latency + hops x propagation) plus a per-message overhead.

The bandwidth part is what an ideal non-blocking fabric with the same injection
bandwidth would take (the busiest accelerator's bytes over its injection capacity,
scale-up and scale-out counted separately); the topology part is the rest of the
slowest-link time (oversubscription, slower tiers, collisions, failures).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from topomodel.analysis.assumptions import TimeModel as TimeModel
from topomodel.analysis.collectives.curves import measured_time
from topomodel.analysis.collectives.linkrates import (
    FailedLinkRates,
    LinkRates,
    effective_link_Bps,
    launch_latency_s,
    network_transport,
    tier_efficiency,
)
from topomodel.analysis.collectives.pipeline import fill_share
from topomodel.analysis.collectives.protocols import (
    PROTOCOLS,
    RING_PLATEAU_FACTOR,
    NcclShape,
    latency_s,
    ll128_enabled,
    nccl_algorithm,
    nccl_architecture,
    protocol_busbw_Bps,
)
from topomodel.analysis.collectives.routes import (
    TIME_BLOCK_ROWS,
    PhaseRoute,
    phase_routes,
    pxn_traffic,
)
from topomodel.errors import UsageError
from topomodel.fabric.scaleup import scaleup_kind
from topomodel.fabric.tables import Fabric, ignores_failures
from topomodel.routing.hashing import QPS
from topomodel.routing.routed import Routed
from topomodel.traffic.allpairs import decompose
from topomodel.traffic.phases import AllPairsPhase, Phase, Shape, Traffic


@dataclass(frozen=True, eq=False)
class PhaseTime:
    """One phase: per-step times (seconds) and where the bytes went."""

    label: str
    steps: int
    bandwidth_s: float  # per step, slowest link
    ideal_s: float  # per step, non-blocking fabric with the same injection
    latency_s: float  # per step
    bottleneck: int  # link row of the slowest link (-1 if none)
    route: PhaseRoute  # the phase as routed (kept with the fabric)
    link_Bps: LinkRates  # effective rate per link row it was timed at, bytes/s
    efficiency: float  # the phase's own efficiency it was timed at

    def loaded_time_s(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Per step, seconds on ``route.loaded``'s rows (entries ``start`` to ``stop``)."""
        return self.route.loaded_time_s(self.link_Bps, self.efficiency, start, stop)

    @property
    def time_s(self) -> float:
        """The whole phase, all steps."""
        return self.steps * (self.bandwidth_s + self.latency_s)

    @cached_property
    def routed(self) -> Routed:
        """Where one step of the phase went (bytes per link row, hops per flow)."""
        return self.route.routed()


@dataclass(frozen=True, eq=False)
class TrafficTime:
    """All phases: total time and its split, plus per-link bytes and busy time.

    For a collective, ``protocol`` is the one timed, ``collective_latency_s`` its NCCL
    latency, ``bandwidth_scale`` the protocol's wire bytes per data byte (1 for
    Simple) and ``pipeline_fill`` the pipeline's fill and drain as a share of the
    bandwidth time (:mod:`~topomodel.analysis.collectives.pipeline`; the links idle
    then, so it is in the time and its bandwidth and topology parts, not in the links'
    busy time); the phases' own latencies are then zero. ``measured`` says which
    measured curve timed it (empty: the model did); its time is then the curve's, the
    latency the model's (at most the curve's time), the bandwidth scale the rest and
    the fill 0.
    """

    phases: tuple[PhaseTime, ...]
    links: int  # link rows of the fabric
    unroutable_flows: int
    unroutable_bytes: float
    protocol: str = ""
    collective_latency_s: float = 0.0
    bandwidth_scale: float = 1.0
    measured: str = ""
    traffic_bytes: float = 0.0  # bytes of every flow timed (PXN's as rewritten), if any lost
    pipeline_fill: float = 0.0  # share of the bandwidth time added by the pipeline's fill

    @property
    def delivered_share(self) -> float:
        """Share of the timed flows' bytes that have a path, 0-1 (with PXN, of the flows
        as it rewrites them, a relayed flow's two legs each counted): 1 unless some flows
        have none."""
        if not self.unroutable_flows:
            return 1.0
        if not self.traffic_bytes:
            return 0.0
        return max(0.0, 1.0 - self.unroutable_bytes / self.traffic_bytes)

    @cached_property
    def link_bytes(self) -> np.ndarray:
        """Bytes on every link row, all steps of all phases (made when first read)."""
        total = np.zeros(self.links)
        for p in self.phases:
            total[p.route.rows] += p.route.row_bytes * p.steps
        return total

    @cached_property
    def link_busy_s(self) -> np.ndarray:
        """Seconds each link row spends sending, all steps of all phases (a
        collective's at its protocol's wire bytes; made when first read)."""
        busy = np.zeros(self.links)
        for p in self.phases:
            busy[p.route.loaded] += p.loaded_time_s() * p.steps
        return busy * self.bandwidth_scale if self.protocol else busy

    @property
    def peak_busy_s(self) -> float:
        """The largest of :attr:`link_busy_s` (0 with no link busy), seconds: the same
        sums, on the loaded rows alone where every phase loads the same rows (one pass
        over millions of rows fewer than the dense array, for a review's table row)."""
        loaded = [p for p in self.phases if p.route.has_loaded]
        if "link_busy_s" in self.__dict__ or any(
                not p.route.loads_rows_of(loaded[0].route) for p in loaded):
            return float(self.link_busy_s.max(initial=0.0))
        if not loaded:
            return 0.0
        scale = self.bandwidth_scale if self.protocol else 1.0
        if len(loaded) == 1:  # x -> x * steps * scale only grows with x: its peak's,
            return loaded[0].bandwidth_s * loaded[0].steps * scale  # its slowest row's
        peak = 0.0
        for start in range(0, loaded[0].route.loaded_count, TIME_BLOCK_ROWS):
            stop = start + TIME_BLOCK_ROWS
            busy = loaded[0].loaded_time_s(start, stop) * loaded[0].steps
            for p in loaded[1:]:  # in phase order, as link_busy_s adds them
                busy += p.loaded_time_s(start, stop) * p.steps
            peak = max(peak, float(busy.max()))
        return peak * scale

    @property
    def time_s(self) -> float:
        """Total time, seconds."""
        return (self.bandwidth_scale * (1.0 + self.pipeline_fill)
                * sum(p.steps * p.bandwidth_s for p in self.phases) + self.latency_s)

    @property
    def tuner_time_s(self) -> float:
        """:attr:`time_s` without the fill, as NCCL's tuner (and ``auto``) sees it, s."""
        return self.time_s - self.pipeline_fill * self.bandwidth_scale * sum(
            p.steps * p.bandwidth_s for p in self.phases)

    @property
    def latency_s(self) -> float:
        """Latency part, seconds."""
        return self.collective_latency_s + sum(p.steps * p.latency_s for p in self.phases)

    @property
    def bandwidth_s(self) -> float:
        """Non-blocking bandwidth part, seconds."""
        return self.bandwidth_scale * (1.0 + self.pipeline_fill) * sum(
            p.steps * min(p.ideal_s, p.bandwidth_s) for p in self.phases)

    @property
    def topology_s(self) -> float:
        """Congestion, oversubscription, slower tiers: the rest, seconds."""
        rest = self.time_s - self.latency_s - self.bandwidth_s
        return rest if rest > 1e-9 * self.time_s else 0.0  # not rounding noise


def time_traffic(fabric: Fabric, traffic: Traffic, *, routing: str = "ecmp", seed: int = 0,
                 router: str = "auto", time_model: TimeModel | None = None,
                 qps: int = QPS) -> TrafficTime:
    """Route every phase of ``traffic`` and time it (``qps``: queue pairs per flow under
    hash routing, see :func:`~topomodel.routing.route`); with ``model.pxn`` cross-rail
    flows go as NCCL's PXN sends them (:func:`~topomodel.traffic.pxn.pxn`). The routes
    are kept with the fabric (:func:`~topomodel.analysis.collectives.routes.phase_routes`): the
    same traffic timed under another time model is not routed again."""
    time_model = time_model or TimeModel()
    if time_model.pxn:
        traffic = pxn_traffic(fabric, traffic)
    links = len(fabric.link_arrays)
    rates = link_rates_of(fabric, time_model)
    injection = rates.injection
    switch_latency, propagation = rates.switch_latency_s, rates.propagation_s
    phases = []
    lost_flows, lost_bytes = 0, 0.0
    nccl = bool(traffic.shapes)
    routes = phase_routes(fabric, traffic, routing=routing, seed=seed, router=router,
                          qps=qps)
    for ph, routed in zip(traffic.phases, routes, strict=True):
        # only the loaded rows (a step's TP phase loads the scale-up links alone): the
        # same per-row times, a few passes over millions of rows fewer
        slowest, bandwidth = routed.slowest(rates.link_Bps, ph.efficiency)
        # the first slowest row, as an argmax over every row (row 0 when none is busy)
        bottleneck = routed.loaded_row(slowest) if bandwidth > 0 else (0 if links else -1)
        latency = 0.0 if nccl else (
            _path_latency(fabric, ph, routed, switch_latency, propagation)
            + ph.messages_per_step * time_model.per_message_overhead_s)
        phases.append(PhaseTime(ph.label, ph.steps, bandwidth,
                                _ideal(fabric, ph, injection) / ph.efficiency, latency,
                                bottleneck, routed, rates.link_Bps, ph.efficiency))
        lost_flows += len(routed.unroutable)
        if len(routed.unroutable):  # reading ``bytes`` would list an all-pairs phase
            lost_bytes += float(ph.bytes[routed.unroutable].sum()) * ph.steps
    # the bytes the lost ones are a share of: the traffic as timed (PXN's, as rewritten)
    total = traffic.total_bytes if lost_flows else 0.0
    if not nccl:
        return TrafficTime(tuple(phases), links, lost_flows, lost_bytes, traffic_bytes=total)
    simple_s = sum(p.steps * p.bandwidth_s for p in phases)
    protocol, latency, scale, fill = _fastest_protocol(fabric, traffic.shapes, simple_s,
                                                       time_model)
    curve = measured_curve(fabric, traffic.shapes, time_model) if not lost_flows else None
    note = ""
    if curve is not None:
        seconds, note = curve
        latency, fill = min(latency, seconds), 0.0
        if simple_s > 0:
            scale = (seconds - latency) / simple_s
        else:
            latency = seconds
    return TrafficTime(tuple(phases), links, lost_flows, lost_bytes, protocol, latency,
                       scale, note, total, fill)


def measured_curve(fabric: Fabric, shapes: tuple[Shape, ...], time_model: TimeModel
              ) -> tuple[float, str] | None:
    """(seconds, note) of a collective from the system's measured curve, when the time
    model allows one (no forced protocol or scale-up efficiency: what-ifs the
    measurement cannot answer) and one covers it (:func:`~topomodel.analysis.collectives.curves.
    measured_time`)."""
    if (not time_model.measured_curves or time_model.protocol != "auto"
            or any(tier.startswith("scaleup") for tier in time_model.efficiency)):
        return None
    return measured_time(fabric, shapes)


def lower_bound_s(fabric: Fabric, traffic: Traffic, time_model: TimeModel | None = None) -> float:
    """A time ``traffic`` cannot beat, seconds, without routing it. Each phase takes at
    least as long as on a non-blocking fabric with the same injection bandwidth, and at
    least as long as the busiest switch needs to send (or take in) the bytes of the flows
    that start (end) at it over all its links (in-network reduction: a SHARP root); a
    collective adds the fastest protocol's latency and wire bytes at that bandwidth time
    (each protocol's time only grows with it), without the pipeline fill: a bound of
    the tuner's time (:attr:`TrafficTime.tuner_time_s`), by which ``auto`` selects, and
    so of the time. Lets the algorithm search skip candidates that cannot win.

    The switch bound assumes every flow is routed: on a fabric with failed parts it is
    left out (:class:`_Rates`), since a flow that cannot be routed loads no link.
    """
    time_model = time_model or TimeModel()
    curve = measured_curve(fabric, traffic.shapes, time_model) if traffic.shapes else None
    if curve is not None:  # the time itself
        return curve[0]
    rates = link_rates_of(fabric, time_model)
    simple_s = sum(ph.steps * max(_ideal(fabric, ph, rates.injection), _switch_s(ph, rates))
                   / ph.efficiency for ph in traffic.phases)
    if not traffic.shapes:
        return simple_s
    _, latency, scale, _ = _fastest_protocol(fabric, traffic.shapes, simple_s, time_model)
    return scale * simple_s + latency  # the tuner's time: no fill (what auto selects by)


def floor_s(fabric: Fabric, shapes: tuple[Shape, ...], time_model: TimeModel | None = None,
            bandwidth_s: float = 0.0) -> float:
    """A time no collective of these :attr:`~topomodel.traffic.phases.Traffic.shapes`
    can beat, seconds, before its traffic is built: a measured curve's time where one
    times it, else the fastest protocol's at a Simple bandwidth time ``bandwidth_s`` no
    more than the traffic's (each protocol's time only grows with it, and a forced one
    is never faster than the fastest). Lets the algorithm search skip a candidate that
    cannot win; 0 for traffic that is no collective."""
    time_model = time_model or TimeModel()
    if not shapes:
        return 0.0
    curve = measured_curve(fabric, shapes, time_model)
    if curve is not None:
        return curve[0]
    fastest = _fastest_protocol(fabric, shapes, bandwidth_s, replace(time_model, protocol="auto"))
    return fastest[1] + fastest[2] * bandwidth_s


def _switch_s(ph: Phase, rates: _Rates) -> float:
    """Per step: the bytes of the flows leaving (entering) the busiest switch over the
    capacity of all its links out (in), seconds; 0 when no flow starts or ends at one
    (an all-pairs phase joins accelerators only: its pairs are not listed for this)."""
    if isinstance(ph, AllPairsPhase):
        return 0.0
    worst = 0.0
    for ends, side in ((ph.src, "switch_out_Bps"), (ph.dst, "switch_in_Bps")):
        if not rates.switch_node[ends].any():  # no flow starts (ends) at a switch: no
            continue  # capacity is read, or made
        capacity = getattr(rates, side)
        at_switch = capacity[ends] > 0
        if at_switch.any():
            load = np.bincount(ends[at_switch], weights=ph.bytes[at_switch],
                               minlength=len(capacity))
            busy = load > 0
            worst = max(worst, float((load[busy] / capacity[busy]).max()))
    return worst


def _fastest_protocol(fabric: Fabric, shapes: tuple[Shape, ...], simple_s: float,
                      time_model: TimeModel) -> tuple[str, float, float, float]:
    """(protocol, latency s, bandwidth scale, pipeline fill) of the fastest protocol for
    a collective whose Simple-protocol bandwidth time is ``simple_s``. Concurrent
    collectives (several shapes) share the links; the slowest latency, the largest
    scale and the largest fill share count (:func:`~topomodel.analysis.collectives.
    pipeline.fill_share`). ``auto``
    tries LL128 only where NCCL's tuner would (:func:`~topomodel.analysis.collectives.
    protocols.ll128_enabled`); a forced protocol runs as ``NCCL_PROTO`` forces it."""
    from topomodel.traffic.collectives import busbw_factor

    architecture = nccl_architecture(fabric.structure.scaleup.link)
    intra = scaleup_kind(fabric.structure).nccl_intra
    best: tuple[float, str, float, float] | None = None
    transport = fabric.derived(network_transport)
    net_us = transport.net_latency_s * 1e6 if transport is not None else 0.0
    nccl_shapes = [NcclShape(s.ranks, s.nodes, intra, s.channels, net_us) for s in shapes]
    # a transport without LL and LL128 across nodes (aws-ofi-nccl sets NCCL_PROTO=Simple)
    simple_only = transport is not None and not transport.low_latency_protocols and any(
        shape.nodes > 1 for shape in nccl_shapes)
    tried = ((time_model.protocol,) if time_model.protocol != "auto" else
             ("Simple",) if simple_only else
             tuple(p for p in PROTOCOLS if p != "LL128" or all(
                 ll128_enabled(shape, architecture) for shape in nccl_shapes)))
    # the fill is the algorithm's, whatever the protocol (NVLS runs Simple alone)
    fill = max(fill_share(nccl_algorithm(s.algorithm, shape), s.collective, s.size_bytes,
                          ranks=s.ranks, nodes=s.nodes, architecture=architecture)
               for s, shape in zip(shapes, nccl_shapes, strict=True))
    for protocol in tried:
        latency, scale = 0.0, 1.0
        for s, shape in zip(shapes, nccl_shapes, strict=True):
            lat = latency_s(s.algorithm, s.collective, protocol, shape, rounds=s.rounds)
            if (protocol == "Simple" and s.algorithm == "ring" and s.collective == "allreduce"
                    and s.nodes > 1):
                lat *= RING_PLATEAU_FACTOR
            busbw = s.size_bytes * busbw_factor(s.collective, s.ranks) / simple_s if (
                simple_s > 0) else 0.0
            at = protocol_busbw_Bps(protocol, s.algorithm, busbw, shape, architecture)
            latency = max(latency, lat)
            if busbw > 0:
                scale = max(scale, busbw / at if at > 0 else np.inf)
        total = latency + scale * simple_s  # NCCL's tuner picks without the fill
        if np.isfinite(total) and (best is None or total < best[0]):
            best = (total, protocol, latency, scale)
    if best is None and time_model.protocol != "auto":  # a forced protocol the algorithm
        # does not run: NCCL falls back
        return _fastest_protocol(fabric, shapes, simple_s, replace(time_model, protocol="auto"))
    if best is not None:  # the system's measured launch overhead, the same for each
        best = (best[0], best[1], best[2] + launch_latency_s(fabric), best[3])
    if best is None:  # no protocol gives a finite time: the rates are (nearly) zero
        raise UsageError(f"a collective's time is not a finite number (its bandwidth time"
                         f" is {simple_s:.3g} s): the effective link rates are too small to"
                         " model; check --efficiency and the link rates")
    return best[1], best[2], best[3], fill


@dataclass(frozen=True, eq=False)
class _Rates:
    """What the timing of any traffic on a fabric under one time model shares, made
    once per (fabric, efficiencies, hop latency): effective link rates (0 where failed),
    per-node injection capacity and the hop latencies; the switches' capacities when
    first read (only flows that start or end at a switch need them)."""

    link_Bps: LinkRates  # read as 0 where failed, made on reading on a failed copy
    injection: tuple[np.ndarray, np.ndarray]
    switch_latency_s: float
    propagation_s: float
    switch_node: np.ndarray  # per node: a switch (of either kind) whose capacities count
    # (none on a fabric with failed links: see switch_out_Bps)
    link_ends: tuple[np.ndarray, np.ndarray]  # per link row: its (src, dst) node

    @cached_property
    def switch_out_Bps(self) -> np.ndarray:
        """Per node: a switch's effective rate out, bytes/s (0 else, and everywhere on
        a fabric with failed links: the switch bound of :func:`lower_bound_s` assumes
        every flow is routed, and with failed parts a flow may load no link)."""
        return self._switch_Bps(0)

    @cached_property
    def switch_in_Bps(self) -> np.ndarray:
        """Per node: a switch's effective rate in, bytes/s (as :attr:`switch_out_Bps`)."""
        return self._switch_Bps(1)

    def _switch_Bps(self, end: int) -> np.ndarray:
        n = len(self.switch_node)
        if not self.switch_node.any():
            return np.zeros(n)
        return np.where(self.switch_node, np.bincount(self.link_ends[end],
                                                      weights=self.link_Bps, minlength=n),
                        0.0)


def link_rates_of(fabric: Fabric, time_model: TimeModel) -> _Rates:
    return fabric.derived(_make_rates, tuple(sorted(time_model.efficiency.items())),
                          time_model.hop_latency_s)


def _make_rates(fabric: Fabric, efficiency_items: tuple[tuple[str, float], ...],
                hop_latency_s: float) -> _Rates:
    links = fabric.link_arrays
    shared = fabric.derived(_unfailed_rates, efficiency_items, hop_latency_s)
    failed = links["failed"]
    if not failed.any():
        return shared
    switch = np.zeros(len(fabric.node_arrays), bool)  # no switch bound with failed parts
    return replace(shared, link_Bps=FailedLinkRates(np.asarray(shared.link_Bps), failed),
                   switch_node=switch)


@ignores_failures
def _unfailed_rates(fabric: Fabric, efficiency_items: tuple[tuple[str, float], ...],
                    hop_latency_s: float) -> _Rates:
    """What :func:`_make_rates` reads no failure for, shared by a fabric's copies with
    failed parts: the effective rate of every link as if none had failed, the injection
    and the hop latencies (each copy with failed links zeroes theirs and has no switch
    capacities)."""
    model = TimeModel(efficiency=dict(efficiency_items), hop_latency_s=hop_latency_s)
    links = fabric.link_arrays
    efficiency = tier_efficiency(fabric, model)
    rate = effective_link_Bps(fabric, model)
    rate.setflags(write=False)
    slowest, propagation = fabric.derived(_slowest_hops)
    switch = fabric.kind_mask("switch") | fabric.kind_mask("scaleup_switch")
    return _Rates(rate, _injection(fabric, efficiency), slowest or model.hop_latency_s,
                  propagation, switch,
                  (links["src"], links["dst"]))


@ignores_failures
def _slowest_hops(fabric: Fabric) -> tuple[float, float]:
    """The slowest switch's latency (0 without switches) and the longest cable's
    propagation, seconds, found once per fabric: the time model only stands in for a
    switch latency of 0 (:func:`_unfailed_rates`)."""
    nodes, links = fabric.node_arrays, fabric.link_arrays
    switch = nodes["latency_s"][nodes["kind"].isin(["switch", "scaleup_switch"])]
    slowest = float(switch.max()) if len(switch) else 0.0
    propagation = float(links["latency_s"].max()) if len(links) else 0.0
    return slowest, propagation


def _path_latency(fabric: Fabric, ph: Phase, routed: PhaseRoute, switch_s: float,
                  propagation_s: float) -> float:
    """Longest path latency of a phase: switches crossed x switch latency + hops x
    propagation. A path between scale-up domains passes two NICs, which are not
    switches (hops - 3 switches); one inside a domain, hops - 1. Per flow, or per path
    class where the phase was routed in aggregate."""
    hops = routed.hops
    if not len(hops):
        return 0.0
    if routed.inside is not None:
        inside = routed.inside
    else:
        domain = fabric.derived(_node_roles).domain
        inside = (domain[ph.src] == domain[ph.dst]) & (domain[ph.src] >= 0)
    switches = np.maximum(0, hops - np.where(inside | (hops < 4), 1, 3))
    return float((switches * switch_s + hops * propagation_s).max())


def _injection(fabric: Fabric, efficiency: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """Per node: effective scale-up and scale-out injection capacity, bytes/s; the
    builder's figures (:attr:`Fabric.injection`) at each tier's efficiency."""
    injection = fabric.injection
    acc = fabric.accelerators
    up, out = np.zeros(len(fabric.node_arrays)), np.zeros(len(fabric.node_arrays))
    up[acc] = injection.scaleup_Bps * efficiency.get("scaleup", 1.0)
    # each NIC of an accelerator: its host link or its ports, whichever is slower
    out[acc] = np.minimum(injection.host_Bps * efficiency.get("host", 1.0),
                          injection.nic_ports_Bps * efficiency.get("leaf", 1.0))
    return up, out


def _ideal(fabric: Fabric, ph: Phase, injection: tuple[np.ndarray, np.ndarray]) -> float:
    """Per-step time on a non-blocking fabric with the same injection bandwidth. Kept
    per phase and injection on the fabric, so the algorithm search's bound and the
    timing of the same phase compute it once."""
    known = fabric.derived(_ideal_memo).setdefault(ph, {})
    key = id(injection[0]), id(injection[1])  # arrays held by the fabric's rate views
    if key not in known:
        known[key] = _ideal_s(fabric, ph, injection)
    return known[key]


@ignores_failures  # _ideal_s reads the injection, the node roles and the phase alone
def _ideal_memo(_: Fabric) -> weakref.WeakKeyDictionary[Phase, dict[tuple[int, int], float]]:
    return weakref.WeakKeyDictionary()


def _ideal_s(fabric: Fabric, ph: Phase, injection: tuple[np.ndarray, np.ndarray]) -> float:
    worst = 0.0
    for (node, load), capacity in zip(_injection_loads(fabric, ph), injection, strict=True):
        at = capacity[node]
        able = at > 0  # accelerators without a NIC send through their neighbours'
        if able.any():
            worst = max(worst, float((load[able] / at[able]).max()))
    return worst


InjectionLoad = tuple[np.ndarray, np.ndarray]
"""(accelerators, bytes per step): each loaded accelerator's larger of the bytes it
sends and receives, in node order."""


def _injection_loads(fabric: Fabric, ph: Phase) -> tuple[InjectionLoad, InjectionLoad]:
    """Per step, the loads of ``ph`` on the accelerators' scale-up and scale-out
    injection, found once per phase (kept while it lives): they read no time model,
    only the capacities they are divided by do (:func:`_ideal_s`)."""
    memo = fabric.derived(_injection_load_memo)
    loads = memo.get(ph)
    if loads is None:
        loads = memo[ph] = _measure_injection_loads(fabric, ph)
    return loads


@ignores_failures  # the phase and the node roles alone
def _injection_load_memo(_: Fabric) -> weakref.WeakKeyDictionary[
        Phase, tuple[InjectionLoad, InjectionLoad]]:
    return weakref.WeakKeyDictionary()


def _measure_injection_loads(fabric: Fabric, ph: Phase) -> tuple[InjectionLoad,
                                                                  InjectionLoad]:
    nodes = fabric.derived(_node_roles)
    n = len(fabric.node_arrays)
    counts = decompose(fabric, ph) if isinstance(ph, AllPairsPhase) else None
    totals: list[tuple[np.ndarray, np.ndarray]]
    if counts is not None:  # the pairs' totals per node, without listing them
        sent_local, received_local = counts.local_sent, counts.local_received
        sent_out = np.bincount(counts.node, weights=counts.out_pairs * counts.pair_bytes,
                               minlength=n)
        received_out = np.bincount(counts.node, weights=counts.in_pairs * counts.pair_bytes,
                                   minlength=n)
        totals = [(sent_local, received_local), (sent_out, received_out)]
    else:
        domain = nodes.domain
        local_flow = ((domain[ph.src] == domain[ph.dst]) & (domain[ph.src] >= 0)) | (
            nodes.chip[ph.src] | nodes.chip[ph.dst])
        local_bytes = np.where(local_flow, ph.bytes, 0.0)
        totals = [(np.bincount(ph.src, weights=weights, minlength=n),
                   np.bincount(ph.dst, weights=weights, minlength=n))
                  for weights in (local_bytes, ph.bytes - local_bytes)]
    loads = []
    for sent, received in totals:
        load = np.maximum(sent, received)
        # switches reducing in-network do not count
        node = np.flatnonzero((load > 0) & nodes.accelerator)
        loads.append((node, load[node]))
    return loads[0], loads[1]


@dataclass(frozen=True, eq=False)
class _NodeRoles:
    """Per node: its scale-up domain (-1 outside one), and whether it is a scale-up
    switch chip or an accelerator."""

    domain: np.ndarray
    chip: np.ndarray
    accelerator: np.ndarray


@ignores_failures
def _node_roles(fabric: Fabric) -> _NodeRoles:
    return _NodeRoles(fabric.node_arrays["domain"], fabric.kind_mask("scaleup_switch"),
                      fabric.kind_mask("accelerator"))
