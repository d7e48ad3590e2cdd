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
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from topomodel.catalog import Accelerator, Model, System
from topomodel.collectives import collective_traffic
from topomodel.errors import UsageError
from topomodel.fabric import Fabric
from topomodel.output import Report, Table
from topomodel.timing import TimeModel, time_traffic
from topomodel.traffic import concurrent

BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}
DIMENSIONS = ("tp", "cp", "dp", "pp")


@dataclass(frozen=True)
class Layout:
    """A parallel layout. ``order`` lists the dimensions innermost first (ranks that
    differ in the innermost dimension are neighbours in rank order); EP groups are the
    innermost ``ep`` ranks of the DP dimension."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    cp: int = 1
    micro_batch: int = 1  # sequences per microbatch
    global_batch: int = 0  # sequences per step; 0: dp x micro_batch x 4 x pp
    seq: int = 0  # tokens per sequence; 0: the model's
    sequence_parallel: bool = True
    dp_mode: str = "allreduce"  # or "zero" (reduce-scatter + all-gather)
    interleave: int = 1  # virtual pipeline stages per rank
    recompute: bool = False
    order: str = "tp,cp,dp,pp"

    @property
    def world(self) -> int:
        """Accelerators the layout uses."""
        return self.tp * self.pp * self.dp * self.cp


@dataclass(frozen=True)
class StepAssumptions:
    """Named assumptions of the step model (defaults are assumed, not measured)."""

    compute_efficiency: float = 0.6  # achieved / peak on matmuls: large-GEMM efficiency
    compute_dtype: str = "bf16"
    activation_dtype: str = "bf16"
    grad_dtype: str = "bf16"  # gradient / communication precision
    dp_bucket_bytes: float = 40e6  # DDP gradient bucket (Megatron-class default, ~40 MB)
    overlap: dict[str, float] = field(default_factory=lambda: {
        "tp": 0.0,  # TP collectives sit on the critical path of each layer
        "cp": 0.5,  # ring attention overlaps K/V passing with attention compute
        "ep": 0.0,  # dispatch/combine all-to-alls block the expert computation
        "pp": 0.0,  # 1F1B stage-to-stage sends are on the critical path
        "dp": 0.8,  # bucketed gradient reduction overlaps the backward pass
        "edp": 0.8,  # expert gradients: the same bucketed reduction
    })
    jitter_cv: float = 0.01  # per-rank compute time, coefficient of variation per step
    hot_expert_factor: float = 1.1  # busiest expert's load / mean in an MoE layer
    straggler_share: float = 0.0  # share of accelerators that run slow (none by default)
    straggler_slowdown: float = 0.0  # a slow one's extra compute time (0.1: 10 % slower)
    optimizer_bytes_per_param: float = 12.0  # Adam: fp32 master, m and v
    flash_attention: bool = True  # attention scores are not kept (FlashAttention-style)
    time: TimeModel = field(default_factory=TimeModel)


def parameter_counts(model: Model) -> dict[str, float]:
    """Parameters: ``total``, ``active``, ``embedding``, ``experts`` (routed), and the
    number of ``moe_layers``.

    ``active`` counts the parameters each token multiplies through (what its FLOPs
    scale with): the input embedding, a lookup, is left out; the output layer is in.
    Norms and biases are ignored (well under 0.1 % of a large model).
    """
    d, hd = model.hidden, model.head_dim or model.hidden // model.heads
    kv = model.kv_heads or model.heads
    attention = d * model.heads * hd * 2 + 2 * d * kv * hd
    mats = 3 if model.gated_ffn else 2
    dense_ffn = mats * d * model.ffn_hidden
    moe_layers = model.layers - model.dense_layers if model.is_moe else 0
    dense_layers = model.layers - moe_layers
    expert = mats * d * model.expert_ffn_hidden
    routed = moe_layers * model.experts * expert
    shared = moe_layers * (model.shared_experts * expert + d * model.experts)
    embedding = model.vocab * d * (1 if model.tied_embeddings else 2)
    body = model.layers * attention + dense_layers * dense_ffn + shared
    return {"total": body + routed + embedding,
            "active": body + moe_layers * model.top_k * expert + model.vocab * d,
            "embedding": embedding, "experts": routed, "moe_layers": moe_layers}


def flops_per_token(model: Model, seq: int, *, recompute: bool = False) -> tuple[float, float]:
    """Training FLOPs per token: (model FLOPs, hardware FLOPs with recomputation)."""
    counts = parameter_counts(model)
    hd = model.head_dim or model.hidden // model.heads
    attention = 12 * model.layers * model.heads * hd * seq
    model_flops = 6 * counts["active"] + attention
    hardware = model_flops * (4 / 3 if recompute else 1)
    return model_flops, hardware


def rank_groups(ranks: np.ndarray, layout: Layout, kind: str) -> list[np.ndarray]:
    """The communicators of one kind: ``tp``, ``cp``, ``dp``, ``pp``, ``ep``, ``edp``
    (the ranks holding the same experts: one of every EP group in a DP group), ``grad``
    (DP x CP: where dense gradients are reduced) and ``expert_grad`` (EDP x CP)."""
    order = [d.strip() for d in layout.order.split(",")]
    if sorted(order) != sorted(DIMENSIONS):
        raise UsageError(f"--order must list {', '.join(DIMENSIONS)} once each, innermost"
                         f" first; got {layout.order!r}")
    sizes = {"tp": layout.tp, "cp": layout.cp, "dp": layout.dp, "pp": layout.pp}
    # outermost first; dp split into (dp / ep, ep) so EP groups are its innermost ranks
    axes: list[tuple[str, int]] = []
    for dim in reversed(order):
        if dim == "dp":
            axes += [("edp", layout.dp // layout.ep), ("ep", layout.ep)]
        else:
            axes.append((dim, sizes[dim]))
    grid = ranks.reshape([size for _, size in axes])
    names = [name for name, _ in axes]
    if kind in ("dp", "grad", "expert_grad"):
        # gradients are reduced over DP and CP together (CP ranks hold the same weights);
        # expert gradients only over the ranks holding the same experts
        keep = {"dp": ["edp", "ep"], "grad": ["cp", "edp", "ep"],
                "expert_grad": ["cp", "edp"]}[kind]
        moved = np.moveaxis(grid, [names.index(k) for k in keep],
                            list(range(-len(keep), 0)))
        size = math.prod(grid.shape[names.index(k)] for k in keep)
        return list(moved.reshape(-1, size))
    axis = names.index(kind)
    return list(np.moveaxis(grid, axis, -1).reshape(-1, grid.shape[axis]))


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
    """A training step on a fabric: times in seconds, rates, memory and walls."""

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
    m = (layout.global_batch or layout.dp * layout.micro_batch * 4 * layout.pp) // (
        layout.dp * layout.micro_batch)
    global_batch = m * layout.dp * layout.micro_batch
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
    imbalance = (a.hot_expert_factor - 1) * (compute * moe_share + ep_exposed) if (
        model.is_moe) else 0.0
    # A synchronous step waits for its slowest rank: with any slow accelerator among the
    # world (probability 1 - (1 - share)^world), every step takes its longer compute.
    stragglers = compute * a.straggler_slowdown * (1 - (1 - a.straggler_share) ** world)
    wait = jitter + imbalance + stragglers
    step = compute + bubble + exposed + wait
    walls = {"bandwidth_s": sum(c.bandwidth_s * (1 - c.overlap) for c in comm),
             "latency_s": sum(c.latency_s * (1 - c.overlap) for c in comm),
             "topology_s": sum(c.topology_s * (1 - c.overlap) for c in comm),
             "sync_s": wait}
    memory = _memory(model, layout, a, seq, counts)
    hbm = accelerator.hbm_bytes
    warnings = [f"{c.kind.upper()} groups leave the scale-up domain" for c in comm
                if c.spills and c.kind in ("tp", "ep")]
    fits = memory["total_bytes"] <= hbm
    if not fits:
        warnings.append(f"needs {memory['total_bytes'] / 1e9:.1f} GB per accelerator;"
                        f" {accelerator.id} has {hbm / 1e9:.0f} GB")
    total_peak = step * world * peak
    return StepResult(layout, model.id, step, compute, bubble, exposed, wait,
                      tokens * model_flops / total_peak, tokens * hw_flops / total_peak,
                      tokens / step, tuple(comm), walls, memory, fits, tuple(warnings))


def _check(layout: Layout, model: Model, fabric: Fabric) -> None:
    world = layout.world
    if world > fabric.accelerator_count:
        raise UsageError(f"the layout needs {world} accelerators (tp x pp x dp x cp); the"
                         f" fabric has {fabric.accelerator_count}")
    if layout.dp % layout.ep:
        raise UsageError(f"ep={layout.ep} must divide dp={layout.dp}")
    if layout.pp > model.layers:
        raise UsageError(f"pp={layout.pp} is more stages than the {model.layers} layers")
    if model.heads % layout.tp:
        raise UsageError(f"tp={layout.tp} must divide the {model.heads} heads")
    if model.is_moe and model.experts % layout.ep:
        raise UsageError(f"ep={layout.ep} must divide the {model.experts} experts")
    if not model.is_moe and layout.ep > 1:
        raise UsageError(f"{model.id} has no experts; ep must be 1")
    if layout.global_batch and layout.global_batch < layout.dp * layout.micro_batch:
        raise UsageError(f"a global batch of {layout.global_batch} sequences is less than"
                         f" one microbatch per DP rank ({layout.dp} x {layout.micro_batch})")
    if layout.dp_mode not in ("allreduce", "zero"):
        raise UsageError("dp_mode is 'allreduce' or 'zero'")


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
    out: list[CommKind] = []

    def add(kind: str, collective: str, groups: list[np.ndarray], size: float, calls: int,
            algorithm: str, pair: str | None = None) -> None:
        if calls <= 0 or size <= 0 or len(groups[0]) < 2:
            return
        best = None
        for alg in _candidates(collective, algorithm, len(groups[0])):
            try:
                traffic = collective_traffic(fabric, collective, groups, size, algorithm=alg)
                if pair:
                    traffic = concurrent([traffic, collective_traffic(
                        fabric, pair, groups, size, algorithm=alg)])
            except ValueError:
                continue  # not applicable to these groups
            t = time_traffic(fabric, traffic, routing=routing, seed=seed, model=a.time)
            if best is None or t.time_s < best[1].time_s:
                best = (alg, t)
        assert best is not None  # ring always applies
        alg, t = best
        doms = domain[np.stack(groups)]
        spills = bool(((doms != doms[:, :1]) | (doms < 0)).any())
        out.append(CommKind(kind, collective + (f"+{pair}" if pair else ""), alg, size, calls,
                            t.time_s * calls, t.latency_s * calls, t.bandwidth_s * calls,
                            t.topology_s * calls, a.overlap.get(kind, 0.0), spills))

    if layout.tp > 1:
        groups = rank_groups(ranks, layout, "tp")
        # attention and MLP, forward and backward, and the forward again when recomputing
        calls = (6 if layout.recompute else 4) * layers * m
        if layout.sequence_parallel:
            add("tp", "allgather", groups, hidden_bytes, calls, "auto", pair="reducescatter")
        else:
            add("tp", "allreduce", groups, hidden_bytes, calls, "auto")
    if layout.cp > 1:
        hd = model.head_dim or model.hidden // model.heads
        kv = model.kv_heads or model.heads
        kv_bytes = layout.micro_batch * seq * 2 * kv * hd * act // layout.tp
        groups = rank_groups(ranks, layout, "cp")
        add("cp", "allgather", groups, kv_bytes, layers * m, "auto", pair="reducescatter")
    if layout.ep > 1 and model.is_moe:
        moe_layers = -(-int(counts["moe_layers"]) // layout.pp)
        per_rank = tokens_mb // sp * model.top_k * model.hidden * act
        add("ep", "alltoall", rank_groups(ranks, layout, "ep"), per_rank, 4 * moe_layers * m,
            "direct")
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
    if layout.dp_mode == "zero":
        add(kind, "reducescatter", groups, grads / buckets, buckets, "auto", pair="allgather")
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


def _memory(model: Model, layout: Layout, a: StepAssumptions, seq: int,
            counts: dict[str, float]) -> dict[str, float]:
    """Bytes per accelerator: weights, gradients, optimizer state, activations."""
    dense = (counts["total"] - counts["experts"]) / (layout.tp * layout.pp)
    experts = counts["experts"] / (layout.tp * layout.pp * layout.ep)
    params = dense + experts
    weights = params * BYTES[a.compute_dtype]
    grads = params * BYTES[a.grad_dtype]
    zero = layout.dp_mode == "zero"
    replicas = layout.dp * layout.cp  # ranks holding the same dense weights
    optimizer = a.optimizer_bytes_per_param * (
        dense / (replicas if zero else 1) + experts / (replicas // layout.ep if zero else 1))
    layers = -(-model.layers // layout.pp)
    tokens = layout.micro_batch * seq / layout.cp
    d = model.hidden
    if layout.recompute:
        per_layer = 2 * tokens * d  # only each layer's input is kept
    else:  # Korthikanti et al. 2022: s b h (34 + 5 a s / h) bytes, split by TP with SP;
        # the 5 a s / h term is the attention scores, which FlashAttention does not keep
        scores = 0.0 if a.flash_attention else 5 * model.heads * seq / d
        per_layer = tokens * d * (34 + scores) / layout.tp
    in_flight = layout.pp  # 1F1B: the first stage holds pp microbatches
    activations = per_layer * layers * in_flight
    total = weights + grads + optimizer + activations
    return {"weights_bytes": weights, "gradients_bytes": grads, "optimizer_bytes": optimizer,
            "activations_bytes": activations, "total_bytes": total}


def step_json(result: StepResult, assumptions: StepAssumptions) -> dict[str, Any]:
    """Plain-type JSON of a step result (``schema: topomodel.step``)."""
    return {
        "model": result.model, "layout": asdict(result.layout),
        "step_time_s": result.step_time_s, "compute_s": result.compute_s,
        "bubble_s": result.bubble_s, "exposed_comm_s": result.exposed_comm_s,
        "wait_s": result.wait_s, "mfu": result.mfu, "hfu": result.hfu,
        "tokens_per_s": result.tokens_per_s, "comm_share": result.comm_share,
        "walls": result.walls,
        "comm": [{**asdict(c), "exposed_s": c.exposed_s} for c in result.comm],
        "memory": result.memory, "fits": result.fits,
        "assumptions": asdict(assumptions),
    }


def step_report(result: StepResult, assumptions: StepAssumptions, *,
                design_name: str) -> Report:
    """The ``topomodel step`` report: summary, walls, communication, memory."""
    from topomodel.units import format_si, format_size

    lay = result.layout
    shape = (f"TP {lay.tp} x PP {lay.pp} x DP {lay.dp} x CP {lay.cp}"
             + (f", EP {lay.ep}" if lay.ep > 1 else ""))
    rows = [
        {"item": "design / model", "value": f"{design_name} / {result.model}"},
        {"item": "layout", "value": f"{shape} ({lay.world} accelerators, order {lay.order})"},
        {"item": "step time", "value": format_si(result.step_time_s, "s")},
        {"item": "  compute", "value": format_si(result.compute_s, "s")},
        {"item": "  pipeline bubble", "value": format_si(result.bubble_s, "s")},
        {"item": "  exposed communication", "value": format_si(result.exposed_comm_s, "s")},
        {"item": "  synchronisation wait", "value": format_si(result.wait_s, "s")},
        {"item": "tokens/s", "value": f"{result.tokens_per_s:,.0f}"},
        {"item": "MFU" + (" / HFU" if lay.recompute else ""),
         "value": f"{result.mfu:.1%}" + (f" / {result.hfu:.1%}" if lay.recompute else "")},
        {"item": "communication share (exposed + wait)", "value": f"{result.comm_share:.1%}"},
    ]
    walls = [{"wall": k.removesuffix("_s"), "time": format_si(v, "s"),
              "share of step": f"{v / result.step_time_s:.1%}"}
             for k, v in result.walls.items()]
    comm = [{"kind": c.kind, "collective": f"{c.collective} ({c.algorithm})",
             "size": format_size(c.size_bytes),
             "calls/step": c.calls, "time": format_si(c.time_s, "s"),
             "overlap": f"{c.overlap:.0%}", "exposed": format_si(c.exposed_s, "s"),
             "leaves scale-up": "yes" if c.spills else "no"} for c in result.comm]
    memory = [{"part": k.removesuffix("_bytes"), "per accelerator": format_size(v)}
              for k, v in result.memory.items()]
    data = step_json(result, assumptions)
    data["design"] = design_name
    return Report("step", data, [Table("Step", rows), Table("Walls", walls),
                                 Table("Communication", comm), Table("Memory", memory)],
                  list(result.warnings))
