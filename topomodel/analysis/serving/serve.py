"""Disaggregated serving on the fabric: a prefill pool and a decode pool, the KV cache
handed from one to the other over the links, and the request's times.

A request's life, with every part from an existing model of the package:

- **Queue**: each prefill replica is an M/D/1 queue (Poisson arrivals, a fixed prefill
  time, one request at a time): it waits ``rho x S / (2 (1 - rho))`` on average, ``S``
  the prefill time and ``rho`` the replica's load. Batching several prompts in one
  prefill is not modelled; the replicas of one EP instance are taken as independent
  queues, though their expert all-to-alls keep them in step.
- **Prefill**: the training step's per-GEMM and attention model, forward only
  (:func:`~topomodel.analysis.training.compute.layer_times` at the prompt's length, one
  sequence, FlashAttention, no sequence parallelism, no dropout) for every layer, plus
  the logits of the last token; and its collectives (two TP all-reduces per layer, the
  EP all-to-alls of every MoE layer) routed on the prefill pool's real ranks and timed
  like decode's (:func:`~topomodel.analysis.serving.decode.serving_collectives`).
- **KV hand-off**: the request's cache moves from the prefill replica's ranks to a
  decode replica's (:func:`~topomodel.analysis.serving.kvcache.transfer_pairs`: TP
  splits and replicas on both sides). The hand-offs in flight at the arrival rate (one
  per busy prefill replica, ``ceil(rho x replicas)``, spread over the pools) are routed
  at once with the fabric's router and timed as one phase (slowest link plus path
  latency): its tier loads and bottleneck tier are the ones a design review reads. They
  are RDMA writes (NIXL, Mooncake's transfer engine), not NCCL: no PXN relay. Layer by
  layer, only what the last layer's compute cannot hide is exposed:
  ``max(T / L, T - S (L - 1) / L)``; after the prefill, all of ``T``.
- **Decode**: the existing decode step (:func:`~topomodel.analysis.serving.decode.
  decode_step`) on the decode pool's ranks, at the batch the load gives (Little's law:
  ``rate x (output - 1) x TPOT`` sequences over the decode replicas, found by fixed
  point) and the mean context ``input + (output - 1) / 2``.

TTFT is queue + prefill + exposed hand-off; TPOT the decode step; a request lasts TTFT
+ (output - 1) x TPOT. The network's share of it is the exposed communication of the
three parts over that time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from topomodel.analysis.assumptions import CostAssumptions, StepAssumptions, TimeModel
from topomodel.analysis.collectives.timing import TrafficTime, time_traffic
from topomodel.analysis.cost import TokenCost, cost_warnings, fabric_cost
from topomodel.analysis.serving.decode import (
    DecodeComm,
    DecodeResult,
    decode_step,
    serving_collectives,
    weights_held_bytes,
)
from topomodel.analysis.serving.decode_assumptions import DecodeAssumptions
from topomodel.analysis.serving.kvcache import (
    check_tp,
    kv_bytes_per_token,
    kv_bytes_per_token_per_rank,
    kv_units,
    transfer_pairs,
)
from topomodel.analysis.serving.scheduling import (
    MixedStep,
    batch_for_rate,
    mixed_step,
    pk_wait_s,
)
from topomodel.analysis.serving.serve_assumptions import ServeAssumptions
from topomodel.analysis.training.compute import Device, Gemm, device_model, layer_times
from topomodel.analysis.training.model import BYTES
from topomodel.errors import UsageError
from topomodel.fabric.tables import Fabric
from topomodel.inputs.measured.requests import RequestTrace
from topomodel.inputs.parts import Accelerator, Model, System
from topomodel.traffic.layout import Layout, rank_groups
from topomodel.traffic.phases import Traffic, phase

PREFILL_POINTS = 8
"""Prompt lengths of a trace at which the prefill is timed (quantiles, from the shortest
to the longest; the others interpolated): each is a forward pass's GEMMs and a routing of
its collectives."""


@dataclass(frozen=True)
class Pool:
    """A pool of identical instances, each ``tp x ep`` accelerators (``ep`` replicas of
    ``tp`` ranks), from accelerator ``first`` (an index into ``fabric.accelerators``)."""

    name: str
    tp: int
    ep: int
    instances: int
    first: int

    @property
    def replicas(self) -> int:
        """Replicas (TP groups, each serving its own requests)."""
        return self.instances * self.ep

    @property
    def size(self) -> int:
        """Accelerators of the pool."""
        return self.replicas * self.tp

    @property
    def layout(self) -> Layout:
        """The pool as a parallel layout (DP = replicas, EP inside an instance)."""
        return Layout(tp=self.tp, dp=self.replicas, ep=self.ep, sequence_parallel=False,
                      dropout=False, flash_attention=True)


@dataclass(frozen=True)
class TierLoad:
    """One link tier under the KV hand-offs in flight: bytes, loaded links, the busiest
    link's seconds per snapshot and its busy share at the arrival rate."""

    tier: str
    bytes: float
    links: int
    busiest_s: float
    utilization: float


@dataclass(frozen=True)
class KvTransfer:
    """The KV hand-offs in flight at once: seconds, bytes, where they load the fabric."""

    bytes_per_request: float  # every byte one request's hand-off moves (replicas counted)
    flows_per_request: int
    concurrent: int  # hand-offs routed together
    time_s: float  # all of them at once: slowest link + path latency
    bandwidth_s: float
    latency_s: float
    exposed_s: float  # of one request's time to first token
    bottleneck_tier: str
    tiers: tuple[TierLoad, ...]
    unroutable_flows: int


@dataclass(frozen=True)
class ServeResult:
    """A serving job: the request's times, throughput, memory, the network's part."""

    model: str
    accelerator: str
    accelerators_per_system: int
    prefill_pool: Pool
    decode_pool: Pool
    input_tokens: float  # per request (a trace's mean)
    output_tokens: float
    rate_rps: float
    prefill_load: float  # busy share of a prefill replica
    queue_s: float
    prefill_compute_s: float
    prefill_comm: tuple[DecodeComm, ...]
    prefill_comm_exposed_s: float
    kv_dtype: str
    kv_bytes_per_token: int  # one copy, all layers
    kv_bytes_per_token_per_rank: tuple[int, int]  # prefill, decode
    kv: KvTransfer
    transfer: str
    decode: DecodeResult  # the step at the batch the load gives
    prefill_memory_bytes: float  # per rank
    decode_memory_bytes: float  # per rank, at the longest context
    hbm_capacity_bytes: float
    warnings: tuple[str, ...]
    trace: str = ""  # the request trace's file, if one gave the mix
    trace_requests: int = 0
    cost: TokenCost | None = None  # per output token: the pools' share of the design
    unpriced: tuple[str, ...] = ()  # parts the cost's capex leaves out (no price)
    placement: str = "separate"  # aggregated: one pool (decode_pool) runs both
    chunked: MixedStep | None = None  # aggregated: its steps with prefill chunks
    chunk_tokens: int = 0  # aggregated: the token budget per step

    @property
    def prefill_s(self) -> float:
        """One prompt's prefill, seconds (compute + exposed collectives)."""
        return self.prefill_compute_s + self.prefill_comm_exposed_s

    @property
    def ttft_s(self) -> float:
        """Time to first token: queue, prefill, exposed KV hand-off."""
        return self.queue_s + self.prefill_s + self.kv.exposed_s

    @property
    def tpot_s(self) -> float:
        """Time per output token after the first (one decode step)."""
        return self.decode.step_time_s

    @property
    def request_s(self) -> float:
        """A request from arrival to its last token."""
        return self.ttft_s + (self.output_tokens - 1) * self.tpot_s

    @property
    def aggregated(self) -> bool:
        """Prefill and decode on the same instances (no KV hand-off)."""
        return self.placement == "aggregated"

    @property
    def accelerators(self) -> int:
        """Accelerators of both pools (of the one pool, aggregated)."""
        if self.aggregated:
            return self.decode_pool.size
        return self.prefill_pool.size + self.decode_pool.size

    @property
    def output_tokens_per_s(self) -> float:
        """Generated tokens/s of the whole job at the arrival rate."""
        return self.rate_rps * self.output_tokens

    @property
    def tokens_per_s_per_accelerator(self) -> float:
        """Generated tokens/s per accelerator of the two pools."""
        return self.output_tokens_per_s / self.accelerators

    @property
    def tokens_per_s_per_system(self) -> float:
        """Generated tokens/s per system (server, node or rack) of the design."""
        return self.tokens_per_s_per_accelerator * self.accelerators_per_system

    def network_parts(self) -> list[tuple[str, float, str]]:
        """(part, exposed seconds per request, the tier bounding it) of the network."""
        def tier(comm: tuple[DecodeComm, ...]) -> str:
            return max(comm, key=lambda c: c.time_s).tier if comm else ""

        return [("prefill collectives", self.prefill_comm_exposed_s, tier(self.prefill_comm)),
                ("KV hand-off", self.kv.exposed_s, self.kv.bottleneck_tier),
                ("decode collectives", (self.output_tokens - 1) * self.decode.comm_exposed_s,
                 tier(self.decode.comm))]

    @property
    def network_s(self) -> float:
        """Exposed network seconds of one request."""
        return sum(t for _, t, _ in self.network_parts())

    @property
    def network_share(self) -> float:
        """The network's share of a request's time, 0-1."""
        return self.network_s / self.request_s if self.request_s else 0.0

    @property
    def limiting(self) -> tuple[str, str]:
        """The network part that takes longest and the link tier that bounds it."""
        part, _, tier = max(self.network_parts(), key=lambda p: p[1])
        return part, tier


@dataclass(frozen=True, eq=False)
class ServingJob:
    """A serving job's own inputs, to run on a fabric later (the review's ``--serve``)."""

    serving: ServeAssumptions
    decode: DecodeAssumptions
    trace: RequestTrace | None = None
    cost: CostAssumptions | None = None

    def run(self, fabric: Fabric, model: Model, assumptions: StepAssumptions, *,
            routing: str = "ecmp", seed: int = 0) -> ServeResult:
        """:func:`serve` of this job on ``fabric``."""
        return serve(fabric, model, serving=self.serving, decode=self.decode,
                     assumptions=assumptions, trace=self.trace, cost=self.cost,
                     routing=routing, seed=seed)


def place_pools(fabric: Fabric, a: ServeAssumptions) -> tuple[Pool, Pool]:
    """The two pools on the fabric's accelerators, as ``a.placement`` says.

    Raises
    ------
    UsageError
        When the pools need more accelerators than the design has.
    """
    if a.placement == "aggregated":  # one pool, shaped by the decode options
        pool = Pool("decode", a.decode_tp, a.decode_ep, a.decode_instances, 0)
        if pool.size > fabric.accelerator_count:
            raise UsageError(f"--decode-instances: the instances need {pool.size}"
                             f" accelerators; the design has {fabric.accelerator_count}")
        return pool, pool
    prefill = Pool("prefill", a.prefill_tp, a.prefill_ep, a.prefill_instances, 0)
    start = prefill.size
    n = fabric.accelerator_count
    if a.placement == "separate" and start < n:
        domain = fabric.node_arrays["domain"][fabric.accelerators]
        if domain[start] >= 0 and domain[start] == domain[start - 1]:
            later = np.flatnonzero(domain[start:] != domain[start - 1])
            start = start + int(later[0]) if len(later) else n
    decode = Pool("decode", a.decode_tp, a.decode_ep, a.decode_instances, start)
    if decode.first + decode.size > n:
        aligned = " (the decode pool from a domain boundary)" if start > prefill.size else ""
        raise UsageError(
            f"--prefill-instances/--decode-instances: the pools need {prefill.size} +"
            f" {decode.size} accelerators{aligned}, up to accelerator"
            f" {decode.first + decode.size}; the design has {n}")
    return prefill, decode


def pool_ranks(fabric: Fabric, pool: Pool) -> np.ndarray:
    """The accelerator node numbers of ``pool``, instance by instance."""
    return np.asarray(fabric.accelerators[pool.first:pool.first + pool.size])


def prefill_compute_s(device: Device, model: Model, pool: Pool, tokens: int) -> float:
    """Seconds of one prompt's forward pass on one replica: every layer's GEMMs,
    attention core and memory-bound passes (the training step's forward), and the
    output layer for the last token (the embedding lookup is left out)."""
    layout = pool.layout
    moe_layers = model.layers - model.dense_layers if model.is_moe else 0
    dense = layer_times(device, model, layout, tokens, moe=False).forward_s
    total = (model.layers - moe_layers) * dense
    if moe_layers:
        total += moe_layers * layer_times(device, model, layout, tokens, moe=True).forward_s
    return total + device.gemm_s(Gemm(1, model.vocab / pool.tp, model.hidden))


# PLR0913: the two pools' ranks and the job's figures, one computation's inputs
def kv_transfer(fabric: Fabric, model: Model, pools: tuple[Pool, Pool],  # noqa: PLR0913
                tokens: int, kv_bytes: int, concurrent: int, *, time_model: TimeModel,
                routing: str, seed: int) -> tuple[KvTransfer, TrafficTime]:
    """``concurrent`` hand-offs of a ``tokens``-token cache, routed and timed at once
    (``exposed_s`` and the utilizations are left for the caller: 0 here)."""
    prefill, decode = pools
    src_rank, dst_rank, units = transfer_pairs(model, prefill.tp, decode.tp)
    _, elements = kv_units(model)
    pair_bytes = units * elements * kv_bytes * tokens
    p_groups = rank_groups(pool_ranks(fabric, prefill), prefill.layout, "tp")
    d_groups = rank_groups(pool_ranks(fabric, decode), decode.layout, "tp")
    i = np.arange(concurrent)
    src_rep = i * prefill.replicas // concurrent
    dst_rep = i * decode.replicas // concurrent
    pairs = len(src_rank)
    src = p_groups[np.repeat(src_rep, pairs), np.tile(src_rank, concurrent)]
    dst = d_groups[np.repeat(dst_rep, pairs), np.tile(dst_rank, concurrent)]
    flows = phase(src, dst, np.tile(pair_bytes, concurrent),
                  group=np.repeat(i, pairs), label="KV hand-off")
    timed = time_traffic(fabric, Traffic((flows,)), routing=routing, seed=seed,
                         time_model=replace(time_model, pxn=False))
    ph = timed.phases[0]
    tiers = fabric.links["tier"].to_numpy()
    bottleneck = str(tiers[ph.bottleneck]) if ph.bandwidth_s > 0 else ""
    link_bytes, busy = timed.link_bytes, timed.link_busy_s
    loads = []
    for tier in dict.fromkeys(str(t) for t in tiers[link_bytes > 0]):
        rows = (tiers == tier) & (link_bytes > 0)
        loads.append(TierLoad(tier, float(link_bytes[rows].sum()), int(rows.sum()),
                              float(busy[rows].max()), 0.0))
    return KvTransfer(float(pair_bytes.sum()), pairs, concurrent, timed.time_s,
                      ph.bandwidth_s * ph.steps, ph.latency_s * ph.steps, 0.0, bottleneck,
                      tuple(loads), timed.unroutable_flows), timed


@dataclass(frozen=True, eq=False)
class _Job:
    """What every timing of one serving job shares."""

    fabric: Fabric
    model: Model
    device: Device
    time_model: TimeModel
    routing: str
    seed: int
    abytes: int
    overlap: float


@dataclass(frozen=True)
class PrefillTimes:
    """The prefill of the job's prompts: means over the requests, seconds."""

    compute_s: float
    comm_exposed_s: float
    comm: tuple[DecodeComm, ...]  # at the prompt length nearest the mean
    second_moment_s2: float  # E[S^2] of the service time, for the queue

    @property
    def service_s(self) -> float:
        """Mean prefill time of a request (its service time)."""
        return self.compute_s + self.comm_exposed_s


def prefill_times(job: _Job, pool: Pool, inputs: np.ndarray) -> PrefillTimes:
    """The prefill of prompts of ``inputs`` tokens (one per request): timed at each
    distinct length, or at :data:`PREFILL_POINTS` quantiles of them and interpolated
    linearly between (attention grows faster than linearly: a slight overestimate)."""
    lengths = np.unique(inputs)
    if len(lengths) > PREFILL_POINTS:
        lengths = np.unique(np.quantile(inputs, np.linspace(0, 1, PREFILL_POINTS),
                                        method="nearest"))
    ranks = pool_ranks(job.fabric, pool)
    computes, exposed, comms = [], [], []
    for tokens in lengths.tolist():
        comm = serving_collectives(job.fabric, job.model, pool.layout, ranks, tokens, 1,
                                   job.abytes, job.time_model, job.routing, job.seed)
        computes.append(prefill_compute_s(job.device, job.model, pool, tokens))
        exposed.append(sum(c.time_s for c in comm) * (1 - job.overlap))
        comms.append(tuple(comm))
    compute = np.interp(inputs, lengths, computes)
    comm_s = np.interp(inputs, lengths, exposed)
    service = compute + comm_s
    nearest = int(np.argmin(np.abs(lengths - inputs.mean())))
    return PrefillTimes(float(compute.mean()), float(comm_s.mean()), comms[nearest],
                        float((service ** 2).mean()))


# PLR0913: the fabric, the model, the job's option groups (serving, decode, step, cost),
# its trace, and the routing and its seed: each a keyword with a default
def serve(fabric: Fabric, model: Model, *,  # noqa: PLR0913
          serving: ServeAssumptions | None = None, decode: DecodeAssumptions | None = None,
          assumptions: StepAssumptions | None = None, trace: RequestTrace | None = None,
          cost: CostAssumptions | None = None, routing: str = "ecmp", seed: int = 0
          ) -> ServeResult:
    """A serving job of ``model`` on ``fabric``: the module docstring's model.

    ``serving`` holds the pools, request mix, load and hand-off; ``decode`` the data
    types and the communication overlap (decode's options: ``batch`` and ``context``
    are set by the load and the mix); ``assumptions`` the step's compute and time
    model (``compute_efficiency``, ``hbm_efficiency``, ``time``). A ``trace`` gives the
    requests' lengths (instead of ``input_tokens`` and ``output_tokens``) and, unless
    ``serving.rate`` is given, the rate: the queue is then M/G/1 over its prompts'
    prefill times, and decode runs at the mean lengths. ``cost`` prices the output
    tokens (:func:`~topomodel.analysis.cost.fabric_cost`: the pools' accelerators' share
    of the design's capex and power, always busy).

    Raises
    ------
    UsageError
        For pools that do not fit the design or do not divide the model, a model that
        does not fit a pool's memory, or a rate the pools cannot sustain.
    """
    a = serving or ServeAssumptions()
    d = decode or DecodeAssumptions()
    s = assumptions or StepAssumptions()
    if a.rate is not None and a.concurrency is not None:
        raise UsageError("--rate and --concurrency: give one (each sets the other)")
    system = fabric.catalog.get(fabric.design.system, System)
    accelerator = fabric.catalog.get(system.accelerator, Accelerator)
    prefill, dec = place_pools(fabric, a)
    kv_dtype = d.kv_dtype or d.dtype
    wbytes, kvbytes, abytes = BYTES[d.dtype], BYTES[kv_dtype], BYTES[d.activation_dtype]
    _check_pool(model, prefill)
    _check_pool(model, dec)
    per_rank = (kv_bytes_per_token_per_rank(model, prefill.tp, kvbytes),
                kv_bytes_per_token_per_rank(model, dec.tp, kvbytes))
    inputs = trace.input_tokens if trace else np.array([a.input_tokens])
    outputs = trace.output_tokens if trace else np.array([a.output_tokens])
    mean_in, mean_out = float(inputs.mean()), float(outputs.mean())
    hbm = accelerator.hbm_bytes
    p_memory = weights_held_bytes(model, prefill.tp, prefill.ep, wbytes) + per_rank[0] * (
        float(inputs.max()))
    held = weights_held_bytes(model, dec.tp, dec.ep, wbytes)
    longest = mean_in + mean_out  # a sequence's context when it ends, on average
    _fits(p_memory, hbm, accelerator.id, "prefill", "--prefill-tp/--prefill-ep")
    max_batch = int((hbm - held) // (longest * per_rank[1])) if hbm > held else 0
    if max_batch < 1:
        _fits(held + longest * per_rank[1], hbm, accelerator.id, "decode",
              "--decode-tp/--decode-ep")

    device = device_model(accelerator, d.dtype, override=s.compute_efficiency,
                          hbm_efficiency=s.hbm_efficiency)
    job = _Job(fabric, model, device, s.time, routing, seed, abytes, d.comm_overlap)
    pre = prefill_times(job, prefill, inputs)
    capacity = prefill.replicas / pre.service_s  # requests/s the prefill pool sustains

    context = round(mean_in + (mean_out - 1) / 2)
    steps: dict[int, DecodeResult] = {}
    mixed: dict[int, MixedStep] = {}  # aggregated: the steps with chunked prefill
    aggregated = a.placement == "aggregated"
    rate = 0.0  # set below, before a step is timed

    def step(batch: int) -> DecodeResult:
        if batch not in steps:
            steps[batch] = decode_step(
                fabric, model, tp=dec.tp, ep=dec.ep, dp=dec.replicas, batch=batch,
                context=context, dtype=d.dtype, kv_dtype=kv_dtype,
                compute_efficiency=s.compute_efficiency, hbm_efficiency=s.hbm_efficiency,
                comm_overlap=d.comm_overlap, activation_dtype=d.activation_dtype,
                time_model=s.time, routing=routing, seed=seed,
                ranks=pool_ranks(fabric, dec))
            if aggregated:  # prefill chunks ride in the decode steps
                r = steps[batch]
                mixed[batch] = mixed_step(
                    batch=batch, hbm_s=r.hbm_s, compute_s=r.compute_s,
                    comm_exposed_s=r.comm_exposed_s, prompt_tokens=mean_in,
                    prefill_compute_s=pre.compute_s, prefill_comm_s=pre.comm_exposed_s,
                    rate_rps=rate / dec.replicas, budget_tokens=a.chunk_tokens)
                steps[batch] = replace(r, step_time_s=mixed[batch].tpot_s)
        return steps[batch]

    decoding = max(1.0, mean_out - 1)
    if a.concurrency is not None:
        if aggregated:
            raise UsageError("--concurrency: not with --placement aggregated, whose steps"
                             " depend on the rate; give --rate")
        if a.concurrency > max_batch:
            raise UsageError(f"--concurrency: {a.concurrency} sequences of {longest:,.0f}"
                             f" tokens do not fit a decode rank's memory (at most"
                             f" {max_batch})")
        result = step(a.concurrency)
        rate = a.concurrency * dec.replicas / (decoding * result.step_time_s)
        _check_load(rate, capacity, pre.service_s, prefill, "--concurrency")
    else:
        given = a.rate if a.rate is not None else trace.rate_rps if trace else None
        rate = given if given is not None else a.prefill_load * capacity
        _check_load(rate, capacity, pre.service_s, prefill,
                    "--trace" if trace and a.rate is None else "--rate")
        result = batch_for_rate(step, rate * decoding / dec.replicas, max_batch)
    if aggregated:
        m = mixed[result.batch]
        load, service = m.load, m.prefill_s  # a prompt over its mixed steps
        spread = pre.second_moment_s2 / pre.service_s ** 2  # E[S^2] / E[S]^2 of the trace
        queue = pk_wait_s(rate / dec.replicas, service, service ** 2 * spread)
        kv = KvTransfer(0.0, 0, 0, 0.0, 0.0, 0.0, 0.0, "", (), 0)
    else:
        load, service = rate / capacity, pre.service_s
        queue = pk_wait_s(rate / prefill.replicas, pre.service_s, pre.second_moment_s2)
        kv = _handoff(fabric, model, (prefill, dec), a, load, rate, service,
                      (round(mean_in), kvbytes), time_model=s.time, routing=routing,
                      seed=seed)
    warnings = list(result.warnings)
    if kv.unroutable_flows:
        warnings.append(f"{kv.unroutable_flows} KV hand-off flows have no path")
    used = dec.size if aggregated else prefill.size + dec.size
    priced, power = fabric_cost(fabric, used, rate * mean_out, cost)
    warnings += cost_warnings(power)
    return ServeResult(
        model.id, accelerator.id, system.accelerators, prefill, dec, mean_in, mean_out,
        rate, load, queue, service - pre.comm_exposed_s, pre.comm, pre.comm_exposed_s,
        kv_dtype, kv_bytes_per_token(model, kvbytes), per_rank, kv,
        "none" if aggregated else a.transfer, result, p_memory,
        held + result.batch * longest * per_rank[1], hbm, tuple(dict.fromkeys(warnings)),
        trace.file if trace else "", trace.requests if trace else 0, priced, power.unpriced,
        a.placement, mixed.get(result.batch), a.chunk_tokens if aggregated else 0)


# PLR0913: the pools, the job's options, its load, and the routing's settings
def _handoff(fabric: Fabric, model: Model, pools: tuple[Pool, Pool],  # noqa: PLR0913
             a: ServeAssumptions, load: float, rate: float, service_s: float,
             cache: tuple[int, int], *, time_model: TimeModel, routing: str, seed: int
             ) -> KvTransfer:
    """The KV hand-offs in flight at ``load`` (one per busy prefill replica), routed
    together, with the part of one request's TTFT they expose and each tier's busy
    share at ``rate``; ``cache`` is (prompt tokens, KV dtype bytes)."""
    prefill = pools[0]
    concurrent = min(prefill.replicas, max(1, math.ceil(load * prefill.replicas)))
    kv, _ = kv_transfer(fabric, model, pools, cache[0], cache[1], concurrent,
                        time_model=time_model, routing=routing, seed=seed)
    layers = model.layers
    exposed = kv.time_s if a.transfer == "after" else max(
        kv.time_s / layers, kv.time_s - service_s * (layers - 1) / layers)
    per_s = rate / concurrent  # snapshots per second each loaded link sees
    return replace(kv, exposed_s=exposed, tiers=tuple(
        replace(t, utilization=t.busiest_s * per_s) for t in kv.tiers))


def _check_load(rate: float, capacity: float, service: float, prefill: Pool, flag: str
                ) -> None:
    if rate >= capacity:
        raise UsageError(f"{flag}: {rate:.3g} requests/s keeps the prefill pool busy beyond"
                         f" its {capacity:.3g} requests/s (prefill {service * 1e3:.1f} ms on"
                         f" {prefill.replicas} replicas); add prefill instances")


def _check_pool(model: Model, pool: Pool) -> None:
    flag = f"--{pool.name}"
    if model.heads % pool.tp:
        raise UsageError(f"{flag}-tp: {pool.tp} must divide the {model.heads} heads of"
                         f" {model.id}")
    if pool.ep > 1 and not model.is_moe:
        raise UsageError(f"{flag}-ep: {model.id} has no experts; it must be 1")
    if model.is_moe and model.experts % pool.ep:
        raise UsageError(f"{flag}-ep: {pool.ep} must divide the {model.experts} experts of"
                         f" {model.id}")
    check_tp(model, pool.tp, f"{pool.name}_tp")  # the KV heads split evenly


def _fits(need: float, hbm: float, accelerator: str, pool: str, flags: str) -> None:
    if need > hbm:
        raise UsageError(f"{flags}: the {pool} pool needs {need / 1e9:.1f} GB per"
                         f" accelerator (weights and one request's KV cache); {accelerator}"
                         f" has {hbm / 1e9:.0f} GB")
