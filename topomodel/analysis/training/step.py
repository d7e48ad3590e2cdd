"""One training step as a schedule: per-op compute, a pipeline timeline, the overlap the
timeline allows, and the memory of every stage.

    step = compute + imbalance + bubble + exposed communication + synchronisation wait

1. **Collectives.** Every collective the step issues (TP gathers, scatters or
   all-reduces; the CP K/V ring; EP all-to-alls; pipeline sends; DP/EP gradient buckets;
   ZeRO gathers) is routed on the fabric once, with all groups of its kind at once, and
   timed per call (:func:`~topomodel.analysis.collectives.collective.fastest`). A gather and a
   scatter are separate calls, run one after the other.
2. **Operations.** Each F, B (and, for a zero-bubble schedule, W) pass of a microbatch
   through a model chunk is its layers' compute on the accelerator's measured GEMM and
   HBM rates (:mod:`~topomodel.analysis.training.compute`), plus the collectives it issues,
   hidden only behind the compute the schedule runs beside them
   (:mod:`~topomodel.analysis.training.stagework`). The first stage adds the embedding, the last
   the logits and loss; recomputation repeats work inside B.
3. **Timeline.** The schedule (1F1B, interleaved, ZB-H1) runs every microbatch on every
   stage (:mod:`~topomodel.analysis.training.pipeline`); pipeline sends delay the receiving
   operation. The slowest stage sets the pace, and the bubble (its idle time) includes
   the other stages' communication: of the sends and ZeRO weight gathers on the
   critical path, what the slowest stage's own (``2 m v`` sends, its own gathers) cover
   is exposed communication, the rest bubble, so the parts add up to the timeline's
   end.
4. **Gradients.** Each stage's gradient buckets are reduced over DP (and expert DP) as
   they fill during its last backward passes (``dp_overlap``: behind the backward
   compute still to run; otherwise after it), then the optimizer steps on HBM; ZeRO's
   weight gathers of the next step hide only behind the first forward they feed.
5. **Wait.** A synchronous step waits for its slowest rank (jitter, stragglers:
   :mod:`~topomodel.analysis.training.syncwait`), a wait that grows with the ranks; the
   hot-expert compute imbalance is its own term, not part of the sync wall.

The exposed communication and the wait split into the four walls: bandwidth, latency,
topology (from each collective's time split) and synchronisation (the wait). MFU and HFU
count the FLOPs the operations are timed on, from one count
(:func:`~topomodel.analysis.training.model.flops_per_token`: PaLM's accounting with causal
attention counted as causal), so neither passes 1 at a compute efficiency of 1.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import cast

import numpy as np

from topomodel.analysis.assumptions import StepAssumptions as StepAssumptions
from topomodel.analysis.training.buckets import gradient_tail, stage_buckets
from topomodel.analysis.training.compute import (
    Device,
    optimizer_bytes_per_param,
    shared_device_model,
    shared_layer_times,
)
from topomodel.analysis.training.memory import StageMemory, stage_memory, stage_parameters
from topomodel.analysis.training.model import BYTES, flops_per_token
from topomodel.analysis.training.pipeline import (
    Schedule,
    in_flight,
    timeline,
)
from topomodel.analysis.training.stagework import Call, OpWork, Work, chunk_work, op_work
from topomodel.analysis.training.stepcalls import issued_calls, placed_calls
from topomodel.analysis.training.stepshape import (
    UNORDERED,
    LayoutMemory,
    Shape,
    ranks_of,
    recall_step,
    remember_step,
    shape_of,
)
from topomodel.analysis.training.stepshape import collective_times as collective_times
from topomodel.analysis.training.syncwait import sync_wait
from topomodel.fabric.tables import Fabric
from topomodel.inputs.parts import Model
from topomodel.traffic.layout import Layout


@dataclass(frozen=True)
class CommKind:
    """One collective of the step on the slowest stage: per step and per accelerator."""

    kind: str
    collective: str
    algorithm: str  # the fastest that applies (NCCL picks per size and scale too)
    size_bytes: float  # per call, nccl-tests convention
    calls: int  # per step
    time_s: float  # all calls
    latency_s: float
    bandwidth_s: float
    topology_s: float
    exposed_s: float  # the part the schedule does not hide behind compute
    spills: bool  # groups leave the scale-up domain
    measured: str = ""  # the measured curve that timed it (empty: the model)

    @property
    def overlap(self) -> float:
        """The hidden share of the time, 0-1."""
        return 1 - self.exposed_s / self.time_s if self.time_s else 0.0


@dataclass(frozen=True)
class StepResult:
    """A training step on a fabric: times in seconds, rates, memory and walls.

    ``step_time_s = compute_s + imbalance_s + bubble_s + exposed_comm_s + wait_s``:
    compute on the slowest pipeline stage (and its optimizer step), the hot-expert
    compute imbalance, that stage's idle time in the pipeline not explained by sends on
    the critical path, communication not hidden behind compute (in-stage collectives,
    pipeline sends on the critical path, gradient reduction after the backward), and the
    synchronisation wait (jitter, stragglers: waiting only). ``memory`` is the worst
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
    stage_busy_s: tuple[float, ...] = ()
    slowest_stage: int = 0
    pipeline_s: float = 0.0
    hbm_bytes: float = 0.0  # the accelerator's memory that ``fits`` is judged against

    @property
    def comm_share(self) -> float:
        """Exposed communication and wait as a share of the step."""
        return (self.exposed_comm_s + self.wait_s) / self.step_time_s


def layout_memory(fabric: Fabric, model: Model, layout: Layout,
                  assumptions: StepAssumptions | None = None) -> LayoutMemory:
    """The memory :func:`step_time` finds for ``layout``, bytes per accelerator, with
    its checks and schedule, without timing anything (a search discards layouts by it).

    Raises
    ------
    UsageError
        Where :func:`step_time` raises it for the layout's sizes or schedule.
    """
    return shape_memory(model, layout, assumptions or StepAssumptions(),
                        shape_of(fabric, model, layout))


def shape_memory(model: Model, layout: Layout, assumptions: StepAssumptions, shape: Shape
                 ) -> LayoutMemory:
    """:func:`layout_memory` of ``layout`` from its :func:`shape_of` (whose checks it
    passed), bytes per accelerator: for a caller that needs the shape too."""
    return LayoutMemory(_stage_memory(model, layout, assumptions, shape.seq,
                                      shape.schedule, shape.sizes, shape.moe_sizes),
                        shape.accelerator.hbm_bytes)


def step_time(fabric: Fabric, model: Model, layout: Layout,
              assumptions: StepAssumptions | None = None, *, routing: str = "ecmp",
              seed: int = 0) -> StepResult:
    """Model one training step of ``model`` with ``layout`` on ``fabric``.

    Raises
    ------
    UsageError
        If the layout does not fit the fabric or the model (sizes that do not divide),
        the schedule cannot run it, or the accelerator has no compute figures.
    """
    a = assumptions or StepAssumptions()
    shape = shape_of(fabric, model, layout)
    accelerator, seq, global_batch, m = (shape.accelerator, shape.seq, shape.global_batch,
                                         shape.microbatches)
    sched, sizes, moe_sizes = shape.schedule, shape.sizes, shape.moe_sizes
    tokens = global_batch * seq
    device = shared_device_model(accelerator, a.compute_dtype,
                                 override=a.compute_efficiency,
                                 hbm_efficiency=a.hbm_efficiency)
    p = layout.pp
    ranks = ranks_of(fabric)[:layout.world]
    calls = placed_calls(fabric, layout, a, ranks, issued_calls(
        fabric, model, layout, a, seq, sizes, moe_sizes), routing=routing, seed=seed)
    # the rank order reaches the step only through the collectives: same times, same step
    same = (*(getattr(layout, f) for f in UNORDERED), tuple(sorted(calls.items())))
    hit = recall_step(fabric, model, a, same)
    if hit is not None:
        return cast(StepResult, replace(hit, layout=layout))
    ops = step_ops(device, model, layout, a, seq, sched, calls, sizes - moe_sizes, moe_sizes)
    send = calls.get("pp")
    per_send = (send.time_s if send else 0.0) + (calls["pp_sg"].time_s if "pp_sg" in calls
                                                 else 0.0)
    layers, moe_layers = sizes.sum(axis=1), moe_sizes.sum(axis=1)
    dense, experts = stage_parameters(model, layout, layers, moe_layers)
    gathers = _param_gather_s(calls, layout, a, dense, experts)
    param_gather = sum(gathers.values(), np.zeros(p))
    first_f = ops.duration_s[np.arange(p), np.argmax(sched.kind == 0, axis=1)]
    ready = np.maximum(0.0, param_gather - (first_f if layout.dp_overlap else 0.0))
    tl = timeline(sched, ops.duration_s, np.full((p, 2), per_send), stage_ready_s=ready,
                  blocking_sends=layout.pp_blocking)
    finish, bucket_issued = gradient_tail(tl, calls, layout, stage_buckets(
        sched, calls, layout, a, dense, experts, sizes, moe_sizes))
    optimizer = optimizer_s(device, layout, dense, experts)
    ends = finish + optimizer
    step_end = float(ends.max())
    last = int(np.argmax(ends))
    r = int(np.argmax(tl.busy_s))  # the slowest stage sets the pace
    pipe_end = tl.makespan_s
    idle = max(0.0, pipe_end - float(tl.busy_s[r]))
    # the critical path's sends and its start's gathers, as far as the slowest stage's
    # own sends and gathers go; what they leave of its idle time (other stages' sends
    # and gathers it waits for) is bubble, so the parts add up to the timeline's end
    own_sends_s = 2 * sched.m * sched.v * per_send
    pp_exposed = min(tl.critical_send_s, idle, own_sends_s)
    start_stage = int(tl.critical_stages[0]) if len(tl.critical_stages) else 0
    gather_exposed = min(float(ready[start_stage]), idle - pp_exposed,
                         float(param_gather[r]))
    bubble = idle - pp_exposed - gather_exposed
    tail = step_end - pipe_end
    opt_part = min(tail, float(optimizer[last]))
    dp_exposed = tail - opt_part
    compute = float(ops.compute_s[r].sum()) + opt_part
    imbalance = float(ops.imbalance_s[r].sum())
    comm = _comm_kinds(calls, ops, r, sched, pp_exposed, gather_exposed, gathers,
                       dp_exposed, bucket_issued[last])
    exposed = sum(c.exposed_s for c in comm)
    world = layout.world
    wait = compute * sync_wait(a, world).share  # every rank waits for the slowest
    step = compute + imbalance + bubble + exposed + wait
    walls = {"bandwidth_s": 0.0, "latency_s": 0.0, "topology_s": 0.0, "sync_s": wait}
    for c in comm:
        share = c.exposed_s / c.time_s if c.time_s else 0.0
        walls["bandwidth_s"] += c.bandwidth_s * share
        walls["latency_s"] += c.latency_s * share
        walls["topology_s"] += c.topology_s * share
    held = LayoutMemory(_stage_memory(model, layout, a, seq, sched, sizes, moe_sizes),
                        accelerator.hbm_bytes)
    mem, hbm = held.stages, held.hbm_bytes
    memory = mem.as_dict()
    warnings = [f"{c.kind.upper()} groups leave the scale-up domain" for c in comm
                if c.spills and c.kind in ("tp", "ep")]
    warnings = list(dict.fromkeys(warnings)) + list(device.notes)
    fits = held.fits()
    if not fits:
        warnings.append(f"needs {memory['total_bytes'] / 1e9:.1f} GB per accelerator on"
                        f" pipeline stage {mem.worst_stage}; {accelerator.id} has"
                        f" {hbm / 1e9:.0f} GB")
    model_flops, hw_flops = flops_per_token(model, seq, recompute=layout.recompute,
                                            flash_attention=layout.flash_attention)
    total_peak = step * world * device.peak_flops
    result = StepResult(layout, model.id, step, compute, bubble, exposed, wait,
                        tokens * model_flops / total_peak, tokens * hw_flops / total_peak,
                        tokens / step, tuple(comm), walls, memory, fits, tuple(warnings),
                        imbalance, global_batch, m, tuple(float(x) for x in mem.total),
                        tuple(float(x) for x in tl.busy_s), r, pipe_end, float(hbm))
    remember_step(fabric, model, a, same, result)
    return result


# PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
def step_ops(device: Device, model: Model, layout: Layout, a: StepAssumptions, seq: int,  # noqa: PLR0913
         sched: Schedule, calls: dict[str, Call], dense_layers: np.ndarray,
         moe_layers: np.ndarray) -> OpWork:
    """Every operation of the schedule: its work and duration, seconds, with the
    collectives ``calls`` (the step's, or a bound's)."""
    works = step_works(device, model, layout, a, seq, calls, dense_layers, moe_layers)
    return op_work(sched, works, dualpipe=layout.ep_overlap == "dualpipe",
                   comm_sm_share=a.comm_sm_share)


# PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
def step_works(device: Device, model: Model, layout: Layout, a: StepAssumptions, seq: int,  # noqa: PLR0913
               calls: dict[str, Call], dense_layers: np.ndarray, moe_layers: np.ndarray,
               *, record: bool = False) -> list[list[list[Work]]]:
    """The F, B and W work of every model chunk (``works[kind][stage][chunk]``, see
    :func:`~topomodel.analysis.training.stagework.chunk_work`), seconds, with ``calls``."""
    lt_dense, lt_moe, edges = shared_layer_times(device, model, layout, seq,
                                                 main_grad_bytes=BYTES[a.main_grad_dtype])
    return chunk_work(lt_dense, lt_moe, edges, calls, layout, dense_layers, moe_layers,
                      hot=a.hot_expert_factor if model.is_moe else 1.0,
                      split_w=layout.schedule == "zb-h1", share=a.comm_sm_share,
                      record=record)


def optimizer_s(device: Device, layout: Layout, dense: np.ndarray, experts: np.ndarray
                ) -> np.ndarray:
    """Per stage, the optimizer step on HBM, seconds, for ``dense`` and ``experts``
    parameters per stage (sharded over the data-parallel ranks under ZeRO)."""
    replicas = layout.dp * layout.cp
    sharded = (dense / replicas + experts / max(1, replicas // layout.ep)) if layout.zero \
        else dense + experts
    return cast(np.ndarray, device.memory_s(optimizer_bytes_per_param()) * sharded)


def param_gather_calls(calls: dict[str, Call], layout: Layout, a: StepAssumptions,
                       dense: np.ndarray, experts: np.ndarray) -> dict[str, np.ndarray]:
    """Per call name (``dp_ag``, ``edp_ag``) and stage, how many ZeRO (stage 1-2) gathers
    of the updated weights run before the next forward (ZeRO-3 gathers layer by layer
    inside the operations)."""
    out: dict[str, np.ndarray] = {}
    if layout.zero not in (1, 2):
        return out
    for key, params in (("dp_ag", dense), ("edp_ag", experts)):
        call = calls.get(key)
        if call is not None:
            out[key] = np.ceil(params * BYTES[a.grad_dtype] / call.size_bytes)
    return out


def _param_gather_s(calls: dict[str, Call], layout: Layout, a: StepAssumptions,
                    dense: np.ndarray, experts: np.ndarray) -> dict[str, np.ndarray]:
    """Per stage and bucket kind, the ZeRO (stage 1-2) gather of the updated weights
    before the next forward, seconds."""
    return {key: count * calls[key].time_s
            for key, count in param_gather_calls(calls, layout, a, dense, experts).items()}


# PLR0913: one computation's arrays and options passed on as they are
def _comm_kinds(calls: dict[str, Call], ops: OpWork, r: int, sched: Schedule,  # noqa: PLR0913
                pp_exposed: float, gather_exposed: float, gathers: dict[str, np.ndarray],
                dp_exposed: float, buckets: dict[str, float]) -> list[CommKind]:
    """The step's collectives as seen from the slowest stage ``r``: time per step, the
    exposed part and its split. Pipeline sends are exposed where the critical path
    crosses them, gradient buckets where the reduction outlasts the backward, ZeRO's
    weight gathers where they hold up the first forward."""
    out: list[CommKind] = []
    by_key = {(c.kind, c.collective): c for c in calls.values()}

    def add(call: Call, count: float, time_s: float, exposed: float) -> None:
        if time_s <= 0:
            return
        scale = time_s / call.time_s if call.time_s else 0.0
        out.append(CommKind(call.kind, call.collective, call.algorithm, call.size_bytes,
                            round(count), time_s, call.latency_s * scale,
                            call.bandwidth_s * scale, call.topology_s * scale,
                            min(time_s, max(0.0, exposed)), call.spills,
                            call.measured))

    for key, issued in ops.issued_s.items():
        call = by_key[key]
        add(call, float(ops.calls[key][r].sum()), float(issued[r].sum()),
            float(ops.exposed_s[key][r].sum()))
    if "pp" in calls:
        sends = 2 * sched.m * sched.v  # one forward and one backward send per chunk
        call = calls["pp"]
        sg = calls.get("pp_sg")
        per = call.time_s + (sg.time_s if sg else 0.0)
        add(call, sends, sends * call.time_s, pp_exposed * call.time_s / per if per else 0)
        if sg:
            add(sg, sends, sends * sg.time_s, pp_exposed * sg.time_s / per if per else 0)
    total_buckets = sum(buckets.values())
    for name in ("dp", "edp"):
        if name in buckets and name in calls:
            call = calls[name]
            share = buckets[name] / total_buckets if total_buckets else 0.0
            add(call, buckets[name] / call.time_s, buckets[name], dp_exposed * share)
    gathered = sum(float(g[r]) for g in gathers.values())
    for name, per_stage in gathers.items():
        call = calls[name]
        time_s = float(per_stage[r])
        share = time_s / gathered if gathered else 0.0
        add(call, time_s / call.time_s, time_s, gather_exposed * share)
    return out


def _stage_memory(model: Model, layout: Layout, a: StepAssumptions, seq: int,
                  sched: Schedule, sizes: np.ndarray, moe_sizes: np.ndarray
                  ) -> StageMemory:
    """Memory of every pipeline stage, with the in-flight microbatches of the schedule."""
    held = in_flight(sched, sizes)
    held_micro = in_flight(sched, np.ones_like(sizes))
    return stage_memory(model, layout, seq, layers=sizes.sum(axis=1),
                        moe_layers=moe_sizes.sum(axis=1), in_flight=held.astype(float),
                        in_flight_micro=held_micro.astype(float),
                        weight_bytes=BYTES[a.compute_dtype],
                        optimizer_bytes_per_param=a.optimizer_bytes_per_param,
                        main_grad_bytes=BYTES[a.main_grad_dtype],
                        hot_expert_factor=a.hot_expert_factor)
