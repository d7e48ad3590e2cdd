"""One training step: compute, pipeline bubble, exposed communication and wait.

    step = compute + bubble + exposed communication + synchronisation wait

Compute is model FLOPs over (peak x ``compute_efficiency``); the 1F1B bubble is
``(pp - 1) / (interleave x microbatches)`` of compute; every collective of the step is
routed on the fabric with all groups of its kind at once (TP, CP, EP, PP, DP), timed,
multiplied by how often it runs per step, and counted as exposed except for its named
overlap fraction; the wait is the expected slowest of the ranks under a jitter model
plus the hot-expert imbalance of MoE layers. The exposed communication and the wait
split into the four walls: bandwidth, latency, topology (from each collective's time
split) and synchronisation (the wait).

Every assumption is a field of :class:`StepAssumptions` with its default and reason.
Where a kind issues a gather and a scatter of the same size (sequence-parallel TP,
context parallelism, ZeRO), the pair is timed as one phase: their bytes share the links,
their latency is counted once.
FLOPs follow the PaLM accounting: ``6 N + 12 L H Q T`` per token (N active non-embedding
plus output-layer parameters, L layers, H heads, Q head size, T sequence); with
activation recomputation the hardware FLOPs add one more forward pass (HFU).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from topomodel.analysis.collective import fastest
from topomodel.analysis.memory import StageMemory, stage_memory
from topomodel.analysis.model import BYTES, flops_per_token, parameter_counts
from topomodel.analysis.pipeline import chunk_first_layer, chunk_layers, in_flight, schedule
from topomodel.analysis.timing import TimeModel, time_traffic
from topomodel.catalog import Accelerator, Model, System
from topomodel.errors import UsageError
from topomodel.fabric.tables import Fabric
from topomodel.records import (
    Invalid,
    Reading,
    check_fields,
    choice,
    mapping_of,
    number,
    quantity,
    spec,
)
from topomodel.traffic.collectives import collective_traffic
from topomodel.traffic.layout import Layout, rank_groups
from topomodel.traffic.phases import Traffic, concurrent
from topomodel.yamlsource import KeyPath

OVERLAP_REASONS = {
    "tp": (0.0, "TP collectives sit on the critical path of each layer"),
    "cp": (0.5, "ring attention overlaps K/V passing with attention compute"),
    "ep": (0.0, "dispatch/combine all-to-alls block the expert computation"),
    "pp": (0.0, "1F1B stage-to-stage sends are on the critical path"),
    "dp": (0.8, "bucketed gradient reduction overlaps the backward pass"),
    "edp": (0.8, "expert gradients: the same bucketed reduction"),
}
"""Default overlapped share of each communication kind, and why (assumed)."""
OVERLAP_KINDS = tuple(OVERLAP_REASONS)
_DTYPE = choice(*BYTES)


def _time_model(_: Reading, __: KeyPath, value: Any) -> TimeModel:
    if not isinstance(value, TimeModel):
        raise Invalid(f"expected a TimeModel, got {type(value).__name__}")
    return value


@dataclass(frozen=True)
class StepAssumptions:
    """Named assumptions of the step model, each with its default and reason (the
    field's ``doc``); checked on creation.

    Examples
    --------
    >>> StepAssumptions().overlap["dp"]
    0.8
    >>> StepAssumptions(compute_efficiency=5)
    Traceback (most recent call last):
    ...
    topomodel.errors.UsageError: StepAssumptions.compute_efficiency: must be in (0, 1], got 5
    """

    compute_efficiency: float = spec(
        number(0, 1, low_open=True), default=0.6,
        doc="achieved / peak FLOP/s on compute: a large-GEMM efficiency (assumed)")
    compute_dtype: str = spec(_DTYPE, default="bf16", doc="precision of the matmuls")
    activation_dtype: str = spec(_DTYPE, default="bf16", doc="precision of activations"
                                 " sent between ranks")
    grad_dtype: str = spec(_DTYPE, default="bf16", doc="gradient communication precision")
    dp_bucket_bytes: float = spec(
        quantity("size"), default=40e6, check=number(0, low_open=True),
        doc="DP gradient bucket, bytes (Megatron-class default, ~40 MB)")
    overlap: dict[str, float] = spec(
        mapping_of(OVERLAP_KINDS, number(0, 1)),
        default={kind: share for kind, (share, _) in OVERLAP_REASONS.items()},
        doc="overlapped share of each communication kind, 0-1 (see OVERLAP_REASONS)")
    jitter_cv: float = spec(number(0), default=0.01, doc="per-rank compute time,"
                            " coefficient of variation per step (assumed)")
    hot_expert_factor: float = spec(number(1), default=1.1, doc="busiest expert's load /"
                                    " mean in an MoE layer (assumed)")
    straggler_share: float = spec(number(0, 1), default=0.0, doc="share of accelerators"
                                  " that run slow (none by default)")
    straggler_slowdown: float = spec(number(0), default=0.0, doc="a slow accelerator's"
                                     " extra compute time (0.1: 10 % slower)")
    optimizer_bytes_per_param: float = spec(number(0), default=12.0, doc="optimizer state,"
                                            " bytes per parameter (Adam: fp32 master, m, v)")
    main_grad_dtype: str = spec(_DTYPE, default="fp32", doc="precision gradients are"
                                " accumulated and kept in (Megatron-LM's fp32 main grads:"
                                " 18 bytes per parameter with Adam, as Korthikanti et al."
                                " 2022, Figure 1 shows)")
    time: TimeModel = spec(_time_model, default=TimeModel(), doc="the collective time model")

    def __post_init__(self) -> None:
        check_fields(self, UsageError)
        missing = set(OVERLAP_KINDS) - set(self.overlap)
        if missing:  # a partial mapping keeps the defaults of the others
            object.__setattr__(self, "overlap", {
                **{k: share for k, (share, _) in OVERLAP_REASONS.items()}, **self.overlap})


@dataclass(frozen=True)
class CommKind:
    """One kind of communication in the step, per step and per accelerator."""

    kind: str
    collective: str
    algorithm: str  # the fastest that applies (NCCL picks per size and scale too)
    size_bytes: float  # per call, nccl-tests convention
    calls: int  # per step
    time_s: float  # all calls
    latency_s: float
    bandwidth_s: float
    topology_s: float
    overlap: float
    spills: bool  # groups leave the scale-up domain

    @property
    def exposed_s(self) -> float:
        """The part not hidden behind compute, seconds."""
        return self.time_s * (1 - self.overlap)


@dataclass(frozen=True)
class StepResult:
    """A training step on a fabric: times in seconds, rates, memory and walls.

    ``step_time_s = compute_s + imbalance_s + bubble_s + exposed_comm_s + wait_s``:
    compute on the slowest rank, the hot-expert compute imbalance of MoE layers, the
    pipeline bubble, communication not hidden behind compute, and the synchronisation
    wait (jitter and stragglers: waiting only). ``memory`` is the worst pipeline
    stage's, by part; ``fits`` says whether every stage fits the accelerator.
    """

    layout: Layout
    model: str
    step_time_s: float
    compute_s: float
    bubble_s: float
    exposed_comm_s: float
    wait_s: float
    mfu: float
    hfu: float
    tokens_per_s: float
    comm: tuple[CommKind, ...]
    walls: dict[str, float]
    memory: dict[str, float]
    fits: bool
    warnings: tuple[str, ...]
    imbalance_s: float = 0.0
    global_batch: int = 0
    microbatches: int = 0
    stage_memory_bytes: tuple[float, ...] = ()

    @property
    def comm_share(self) -> float:
        """Exposed communication and wait as a share of the step."""
        return (self.exposed_comm_s + self.wait_s) / self.step_time_s


def step_time(fabric: Fabric, model: Model, layout: Layout,
              assumptions: StepAssumptions | None = None, *, routing: str = "ecmp",
              seed: int = 0) -> StepResult:
    """Model one training step of ``model`` with ``layout`` on ``fabric``.

    Raises
    ------
    UsageError
        If the layout does not fit the fabric or the model (sizes that do not divide).
    """
    a = assumptions or StepAssumptions()
    system = fabric.catalog.get(fabric.design.system, System)
    accelerator = fabric.catalog.get(system.accelerator, Accelerator)
    _check(layout, model, fabric)
    seq = layout.seq or model.sequence
    global_batch = layout.sequences(seq)
    m = global_batch // (layout.dp * layout.micro_batch)
    tokens = global_batch * seq
    peak = accelerator.peak_flops.get(a.compute_dtype)
    if peak is None:
        raise UsageError(f"{accelerator.id} has no {a.compute_dtype} peak in the catalog;"
                         f" it has {', '.join(accelerator.peak_flops)}")
    model_flops, hw_flops = flops_per_token(model, seq, recompute=layout.recompute)
    world = layout.world
    compute = tokens * hw_flops / (world * peak * a.compute_efficiency)
    bubble = compute * (layout.pp - 1) / (layout.interleave * m)
    ranks = fabric.accelerators[:world]
    comm = _communication(fabric, model, layout, a, ranks, seq, m, routing, seed)
    exposed = sum(c.exposed_s for c in comm)
    counts = parameter_counts(model)
    moe_share = 0.0
    if model.is_moe:
        mats = 3 if model.gated_ffn else 2
        expert_flops = 6 * counts["moe_layers"] * model.top_k * mats * model.hidden * (
            model.expert_ffn_hidden)
        moe_share = expert_flops / model_flops
    jitter = compute * a.jitter_cv * math.sqrt(2 * math.log(max(world, 2)))
    ep_exposed = sum(c.exposed_s for c in comm if c.kind == "ep")
    # the busiest expert's rank computes (and receives) hot_expert_factor times the mean:
    # compute imbalance, not waiting, so it is named apart from the sync wall
    imbalance = (a.hot_expert_factor - 1) * (compute * moe_share + ep_exposed) if (
        model.is_moe) else 0.0
    # A synchronous step waits for its slowest rank: with any slow accelerator among the
    # world (probability 1 - (1 - share)^world), every step takes its longer compute.
    stragglers = compute * a.straggler_slowdown * (1 - (1 - a.straggler_share) ** world)
    wait = jitter + stragglers
    step = compute + bubble + exposed + wait + imbalance
    walls = {"bandwidth_s": sum(c.bandwidth_s * (1 - c.overlap) for c in comm),
             "latency_s": sum(c.latency_s * (1 - c.overlap) for c in comm),
             "topology_s": sum(c.topology_s * (1 - c.overlap) for c in comm),
             "sync_s": wait}
    mem = _stage_memory(model, layout, a, seq, m)
    memory = mem.as_dict()
    hbm = accelerator.hbm_bytes
    warnings = [f"{c.kind.upper()} groups leave the scale-up domain" for c in comm
                if c.spills and c.kind in ("tp", "ep")]
    fits = bool((mem.total <= hbm).all())
    if not fits:
        warnings.append(f"needs {memory['total_bytes'] / 1e9:.1f} GB per accelerator on"
                        f" pipeline stage {mem.worst_stage}; {accelerator.id} has"
                        f" {hbm / 1e9:.0f} GB")
    total_peak = step * world * peak
    return StepResult(layout, model.id, step, compute, bubble, exposed, wait,
                      tokens * model_flops / total_peak, tokens * hw_flops / total_peak,
                      tokens / step, tuple(comm), walls, memory, fits, tuple(warnings),
                      imbalance, global_batch, m, tuple(float(x) for x in mem.total))


def _stage_memory(model: Model, layout: Layout, a: StepAssumptions, seq: int,
                  m: int) -> StageMemory:
    """Memory of every pipeline stage, with the in-flight microbatches of the layout's
    schedule."""
    p, v = layout.pp, layout.interleave
    sizes = chunk_layers(model.layers, p, v)
    first = chunk_first_layer(model.layers, p, v)
    dense_leading = model.dense_layers if model.is_moe else model.layers
    moe_sizes = np.clip(first + sizes - np.maximum(first, dense_leading), 0, None)
    sched = schedule(layout.schedule, p, m, v)
    held = in_flight(sched, sizes)
    held_micro = in_flight(sched, np.ones_like(sizes))
    layers, moe_layers = sizes.sum(axis=1), moe_sizes.sum(axis=1)
    # in-flight layers are spread over dense and MoE layers in the stage's proportion
    return stage_memory(model, layout, seq, layers=layers, moe_layers=moe_layers,
                        in_flight=held.astype(float), in_flight_micro=held_micro.astype(float),
                        weight_bytes=BYTES[a.compute_dtype],
                        optimizer_bytes_per_param=a.optimizer_bytes_per_param,
                        main_grad_bytes=BYTES[a.main_grad_dtype],
                        hot_expert_factor=a.hot_expert_factor)


def _check(layout: Layout, model: Model, fabric: Fabric) -> None:
    world = layout.world
    if world > fabric.accelerator_count:
        raise UsageError(f"the layout needs {world} accelerators (tp x pp x dp x cp); the"
                         f" fabric has {fabric.accelerator_count}")
    if layout.dp % layout.ep:
        raise UsageError(f"ep={layout.ep} must divide dp={layout.dp}")
    if layout.pp * layout.interleave > model.layers:
        raise UsageError(f"pp={layout.pp} x interleave={layout.interleave} is more stages"
                         f" than the {model.layers} layers")
    if model.heads % layout.tp:
        raise UsageError(f"tp={layout.tp} must divide the {model.heads} heads")
    if model.is_moe and model.experts % layout.ep:
        raise UsageError(f"ep={layout.ep} must divide the {model.experts} experts")
    if not model.is_moe and layout.ep > 1:
        raise UsageError(f"{model.id} has no experts; ep must be 1")
    if layout.global_batch and layout.global_batch < layout.dp * layout.micro_batch:
        raise UsageError(f"a global batch of {layout.global_batch} sequences is less than"
                         f" one microbatch per DP rank ({layout.dp} x {layout.micro_batch})")


def _communication(fabric: Fabric, model: Model, layout: Layout, a: StepAssumptions,
                   ranks: np.ndarray, seq: int, m: int, routing: str,
                   seed: int) -> list[CommKind]:
    act = BYTES[a.activation_dtype]
    layers = -(-model.layers // layout.pp)  # the fullest stage sets the pace
    sp = layout.tp if layout.sequence_parallel else 1
    tokens_mb = layout.micro_batch * seq // layout.cp  # tokens per microbatch per CP rank
    hidden_bytes = tokens_mb * model.hidden * act  # one activation tensor per TP group
    domain = fabric.nodes["domain"].to_numpy()
    counts = parameter_counts(model)
    full = layout.recompute == "full"
    out: list[CommKind] = []

    def add(kind: str, collective: str, groups: list[np.ndarray], size: float, calls: int,
            algorithm: str) -> None:
        if calls <= 0 or size <= 0 or len(groups[0]) < 2:
            return
        def build(alg: str) -> Traffic:
            return collective_traffic(fabric, collective, groups, size, algorithm=alg)

        alg, _, t, _ = fastest(fabric, build, _candidates(collective, algorithm,
                                                           len(groups[0])),
                               routing=routing, seed=seed, model=a.time)
        doms = domain[np.stack(groups)]
        spills = bool(((doms != doms[:, :1]) | (doms < 0)).any())
        out.append(CommKind(kind, collective, alg, size, calls,
                            t.time_s * calls, t.latency_s * calls, t.bandwidth_s * calls,
                            t.topology_s * calls, a.overlap.get(kind, 0.0), spills))

    if layout.tp > 1:
        groups = rank_groups(ranks, layout, "tp")
        # attention and MLP, forward and backward, and the forward again when recomputing
        calls = (6 if full else 4) * layers * m
        if layout.sequence_parallel:
            # a gather and a scatter per call site, one after the other on the same links
            add("tp", "allgather", groups, hidden_bytes, calls, "auto")
            add("tp", "reducescatter", groups, hidden_bytes, calls, "auto")
        else:
            add("tp", "allreduce", groups, hidden_bytes, calls, "auto")
    if layout.cp > 1:
        hd = model.head_dim or model.hidden // model.heads
        kv = model.kv_heads or model.heads
        # ring attention: the K/V of every CP rank, forward; backward K/V again and the
        # K/V gradients back (three volumes per layer), and K/V once more per forward
        # recomputed (full, or selective: the attention core needs them again)
        kv_bytes = layout.micro_batch * seq * 2 * kv * hd * act // layout.tp
        groups = rank_groups(ranks, layout, "cp")
        gathers = 2 + (layout.recompute != "none")
        add("cp", "allgather", groups, kv_bytes, gathers * layers * m, "auto")
        add("cp", "reducescatter", groups, kv_bytes, layers * m, "auto")
    if layout.ep > 1 and model.is_moe:
        moe_layers = -(-int(counts["moe_layers"]) // layout.pp)
        per_rank = tokens_mb // sp * model.top_k * model.hidden * act
        # dispatch and combine, forward and backward; a full recomputation repeats the
        # forward pair
        add("ep", "alltoall", rank_groups(ranks, layout, "ep"), per_rank,
            (6 if full else 4) * moe_layers * m, "direct")
    if layout.pp > 1:
        groups = rank_groups(ranks, layout, "pp")
        stages = np.stack(groups)
        pairs = [np.array(pair) for row in stages for pair in itertools.pairwise(row)]
        if layout.interleave > 1:  # the last stage hands the next model chunk to the first
            pairs += [np.array([row[-1], row[0]]) for row in stages]
        back = [p[::-1] for p in pairs]
        size = hidden_bytes / sp
        traffic = concurrent([collective_traffic(fabric, "sendrecv", pairs, size,
                                                 algorithm="p2p"),
                              collective_traffic(fabric, "sendrecv", back, size,
                                                 algorithm="p2p")])
        calls = m * layout.interleave
        t = time_traffic(fabric, traffic, routing=routing, seed=seed, model=a.time)
        doms = domain[np.stack(pairs)]
        out.append(CommKind("pp", "sendrecv", "p2p", size, calls, t.time_s * calls,
                            t.latency_s * calls, t.bandwidth_s * calls, t.topology_s * calls,
                            a.overlap["pp"], bool((doms[:, 0] != doms[:, 1]).any())))
    if layout.dp * layout.cp > 1:
        dense = (counts["total"] - counts["experts"]) / (layout.tp * layout.pp)
        _gradients(add, "dp", rank_groups(ranks, layout, "grad"), dense, layout, a)
    if layout.dp * layout.cp // layout.ep > 1 and model.is_moe:
        # each expert's gradients are reduced over the ranks holding the same experts
        experts = counts["experts"] / (layout.tp * layout.pp * layout.ep)
        _gradients(add, "edp", rank_groups(ranks, layout, "expert_grad"), experts, layout,
                   a)
    return out


def _gradients(add: Any, kind: str, groups: list[np.ndarray], params: float, layout: Layout,
               a: StepAssumptions) -> None:
    """Bucketed gradient reduction of ``params`` per rank over ``groups``."""
    grads = params * BYTES[a.grad_dtype]
    buckets = max(1, math.ceil(grads / a.dp_bucket_bytes))
    if layout.zero:
        add(kind, "reducescatter", groups, grads / buckets, buckets, "auto")
        add(kind, "allgather", groups, grads / buckets, buckets, "auto")
    else:
        add(kind, "allreduce", groups, grads / buckets, buckets, "auto")


def _candidates(collective: str, requested: str, ranks: int) -> tuple[str, ...]:
    """Algorithms to try for a collective of the step (the fastest is kept)."""
    if requested != "auto":
        return (requested,)
    return {"allreduce": ("ring", "tree", "hierarchical"),
            "allgather": ("ring", "hierarchical"),
            "reducescatter": ("ring", "hierarchical"),
            "alltoall": ("direct",)}.get(collective, ("ring",)) if ranks > 2 else ("ring",)
