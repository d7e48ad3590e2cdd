"""A step time no rank order of a layout can beat, found without routing anything: what
lets a search skip layouts that cannot reach its best.

:func:`~topomodel.analysis.training.step.step_time` is ``step = compute + imbalance + bubble +
exposed communication + wait``. Its terms, with every collective taking no time (a
collective takes at least that long, and every operation's duration, the timeline and
the gradient tail only grow with the collective times), give two bounds, each proved
from the step's own formulas:

- **busy**: the step is at least its slowest stage's busy time (compute, imbalance and
  in-stage exposed communication, all of which only grow with the collective times),
  plus the wait;
- **pipeline**: it is at least the end of the last stage's optimizer step on the
  comm-free timeline (after its gradient reduction, where the bound has a time for
  it: the buckets go out one after the other as they fill, so the reduction ends no
  earlier on a faster timeline with faster buckets), plus the wait: the step's parts
  add up to its own timeline's end (what the slowest stage's own pipeline sends and
  ZeRO weight gathers do not cover of its idle time is bubble), and every start of
  the timeline only grows with the collective times.

So, with any figure of the pipeline's end that the step's cannot be below (the
comm-free one, or one with collective times, each no more than the step's, that
starts each stage after its ZeRO gathers as the step does, :func:`gather_ready_s`, and
each operation after its input's pipeline send, :func:`per_send_s`),

    bound = max(busy, pipeline) + wait

The wait is the step's (jitter and stragglers on compute) on the least compute of any
stage.

With no collective time, nothing depends on the rank order, so one bound serves every
order of a layout; the ZeRO stage changes only the optimizer step and the gathers, so
the timeline is shared by the ZeRO stages too (:func:`comm_free_pipeline`).
:func:`~topomodel.plan.callfloors.order_bound` bounds one order, with the collective
times already known and, for the others, what they cannot beat on that placement
(:mod:`~topomodel.analysis.collectives.commbound`).

With ``ep_overlap="dualpipe"`` the step clips an all-to-all's exposed time to its issued
time while the operation's duration is not clipped, so neither bound holds there: the
bound is then the least compute of a stage plus the wait.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from topomodel.analysis.assumptions import StepAssumptions
from topomodel.analysis.training.buckets import gradient_tail, stage_buckets
from topomodel.analysis.training.compute import (
    optimizer_bytes_per_param,
    shared_device_model,
    shared_layer_times,
)
from topomodel.analysis.training.memory import stage_parameters
from topomodel.analysis.training.model import BYTES, flops_per_token
from topomodel.analysis.training.pipeline import (
    Timeline,
    timeline,
)
from topomodel.analysis.training.stagework import Call, OpWork, op_durations, op_sums
from topomodel.analysis.training.step import param_gather_calls, step_ops
from topomodel.analysis.training.stepshape import Shape
from topomodel.analysis.training.syncwait import sync_wait
from topomodel.inputs.parts import Model
from topomodel.kept import Kept
from topomodel.traffic.layout import Layout, evolve

ROUNDING_MARGIN = 1e-9
"""Share taken off every bound before it is compared: the bound and the step add the
same terms in different orders, and floating-point sums differ in their last bits; a
billionth is far above that noise and far below any difference a ranking shows."""


@dataclass(frozen=True)
class StepBound:
    """The best any rank order of a layout can do: its step time at least
    ``step_time_s`` seconds, so its MFU and tokens/s at most ``mfu`` and
    ``tokens_per_s`` (the step's own formulas on the bound)."""

    step_time_s: float
    mfu: float
    tokens_per_s: float


@dataclass(frozen=True, eq=False)
class CommFreePipeline:
    """What the bound of a layout takes from its comm-free step (without collective
    times, shared by its ZeRO stages): per stage the busy time, compute and the end of
    its gradient reduction (at least of its last operation), seconds."""

    busy_s: np.ndarray
    compute_s: np.ndarray
    finish_s: np.ndarray
    dualpipe: bool
    timeline: Timeline | None = None  # the comm-free run (None: a bound's own figures)


def comm_free_pipeline(model: Model, layout: Layout, assumptions: StepAssumptions,
                       shape: Shape, calls: dict[str, Call] | None = None
                       ) -> CommFreePipeline:
    """The step of ``layout`` with every collective taking no time (or the time in
    ``calls``, each no more than the step's, for the collectives there, the pipeline
    sends and ZeRO's weight gathers included): each operation's duration and the
    timeline, seconds. Without ``calls``, no send and no gather holds a stage up, and
    the ZeRO stage and the rank order change nothing.

    With the sends timed the bound stays under the step: every start of the timeline
    only grows with a send's time (an operation starts at the later of its stage's
    previous end and its input's end plus the send), so its last end and every
    bucket's ready time are no later than the step's with its own sends."""
    a = assumptions
    if layout.ep_overlap == "dualpipe":  # its pairs change the operations' durations
        ops, calls = _comm_free_ops(model, layout, a, shape, calls)
        duration, compute = ops.duration_s, ops.compute_s
    else:  # the same floats, without making the chunks' works
        calls = _idle_calls(model, layout, calls)
        duration, compute = _op_figures(model, layout, a, shape, calls)
    p = layout.pp
    layers, moe_layers = shape.sizes.sum(axis=1), shape.moe_sizes.sum(axis=1)
    dense, experts = stage_parameters(model, layout, layers, moe_layers)
    tl = timeline(shape.schedule, duration, np.full((p, 2), per_send_s(calls)),
                  stage_ready_s=gather_ready_s(calls, layout, a, dense, experts, shape,
                                               duration),
                  blocking_sends=layout.pp_blocking)
    finish = tl.stage_end_s
    if "dp" in calls or "edp" in calls:  # the gradient buckets, as the step issues them
        finish, _ = gradient_tail(tl, calls, layout, stage_buckets(
            shape.schedule, calls, layout, a, dense, experts, shape.sizes, shape.moe_sizes))
    return CommFreePipeline(tl.busy_s, compute.sum(axis=1), finish,
                            layout.ep_overlap == "dualpipe", tl)


def per_send_s(calls: dict[str, Call] | None) -> float:
    """The time of one pipeline send in ``calls`` as the step's timeline takes it (the
    activations' send and, with sequence parallelism, the gather after it), seconds;
    0 when there is none."""
    if not calls:
        return 0.0
    return sum(calls[k].time_s for k in ("pp", "pp_sg") if k in calls)


def gather_ready_s(calls: dict[str, Call], layout: Layout, a: StepAssumptions,
                   dense: np.ndarray, experts: np.ndarray, shape: Shape,
                   duration_s: np.ndarray) -> np.ndarray | None:
    """Per stage, when it can start: the step's ZeRO (stage 1-2) gather of the updated
    weights, less the first forward it hides behind with ``dp_overlap``, seconds, for
    the collectives ``calls`` and the operations' durations (p, n) (None: no gather).

    With each time no more than the step's, the timeline it starts is no shorter than
    the step's: a stage's first operation ends at ``max(F1, G)`` (its forward ``F1``
    after ``ready = max(0, G - F1)``; without the overlap at ``G + F1``), which only
    grows with the gather ``G`` and the forward, and nothing of the timeline reads
    when that operation started, only when it ended."""
    counts = param_gather_calls(calls, layout, a, dense, experts)
    if not counts:
        return None
    p = layout.pp
    gather = sum((count * calls[key].time_s for key, count in counts.items()), np.zeros(p))
    first_f = duration_s[np.arange(p), np.argmax(shape.schedule.kind == 0, axis=1)]
    return np.asarray(np.maximum(0.0, gather - (first_f if layout.dp_overlap else 0.0)))


def busy_bound(model: Model, layout: Layout, assumptions: StepAssumptions,
               shape: Shape, busy: CommFreePipeline | None = None) -> StepBound:
    """A cheap bound of ``layout`` (any rank order), never above :func:`step_bound`:
    the busiest stage's busy time (its operations one after another, no collective
    taking time) and the wait, without the pipeline's excess over the busy time, so
    without running the schedule's timeline (about 60 ms for 2,048 microbatches; this
    about 1 ms). The planner ranks and prunes layouts with it before their timelines
    run. ``busy``: :func:`busy_pipeline` of the layout (or of it with another ZeRO
    stage or rank order, which change it not), made here if not given.

    It is the same for every ZeRO stage of a layout (so a search bounds one of them for
    all): of the :class:`BoundFrame`, ZeRO changes only the optimizer step, and this
    bound keeps none of the pipeline excess (share 0), so the excess
    (``max(0, ends - busy) x 0``, with the optimizer step in ``ends``) adds exactly 0
    for any finite step; the busy time, the least compute, the wait per compute, the
    tokens, the model FLOPs and the peak do not read ZeRO. So its frame is made
    without the optimizer step (zeros in its place: the excess times 0 is 0 either
    way, the optimizer step being finite on an HBM of any bandwidth), and kept by what
    it reads (:func:`_busy_frame`): a search bounds every layout of
    its space this way, and the layouts of a cell differing in their micro-batch,
    schedule, EP or sequence parallelism share it."""
    pipeline = busy if busy is not None else busy_pipeline(model, layout, assumptions,
                                                           shape)
    a = assumptions
    key = (id(model), id(a), id(shape.accelerator), shape.seq, shape.global_batch,
           layout.recompute, layout.world, layout.pp)
    return _BUSY_FRAMES.get(key, (model, a, shape.accelerator), lambda: _busy_frame(
        model, layout, a, shape)).bound(pipeline)


def _busy_frame(model: Model, layout: Layout, a: StepAssumptions, shape: Shape
                ) -> BoundFrame:
    """:func:`busy_bound`'s frame, kept by what it reads (the model, the assumptions,
    the accelerator, the tokens, recomputation, the world and the stages)."""
    world = layout.world
    device = shared_device_model(shape.accelerator, a.compute_dtype,
                                 override=a.compute_efficiency,
                                 hbm_efficiency=a.hbm_efficiency)
    model_flops, _ = flops_per_token(model, shape.seq, recompute=layout.recompute)
    no_optimizer = np.zeros(layout.pp)
    no_optimizer.setflags(write=False)
    return BoundFrame(no_optimizer, sync_wait(a, world).share, 0.0,
                      shape.global_batch * shape.seq, model_flops, world * device.peak_flops)


_BUSY_FRAMES: Kept[BoundFrame] = Kept(4096)


def busy_pipeline(model: Model, layout: Layout, assumptions: StepAssumptions,
                  shape: Shape) -> CommFreePipeline:
    """What :func:`busy_bound` reads of ``layout``'s operations: every stage's busy
    time (its operations one after another, every collective taking no time, so the
    stage's end too) and compute, seconds. With no collective timed, the operations
    are the same for every ZeRO stage and rank order (:func:`comm_free_pipeline`), so
    a search makes it once per :func:`unordered` layout."""
    if layout.ep_overlap == "dualpipe":  # its pairs change the operations' durations
        ops, _ = _comm_free_ops(model, layout, assumptions, shape, None)
        busy = np.asarray(ops.duration_s, dtype=float).sum(axis=1)
        return CommFreePipeline(busy, ops.compute_s.sum(axis=1), busy, True)
    busy, compute = _op_figures(model, layout, assumptions, shape,
                                _idle_calls(model, layout, None), summed=True)
    return CommFreePipeline(busy, compute, busy, False)


def _op_figures(model: Model, layout: Layout, a: StepAssumptions, shape: Shape,
                calls: dict[str, Call], *, summed: bool = False
                ) -> tuple[np.ndarray, np.ndarray]:
    """Every operation's duration and compute (p, n), seconds, with the collectives
    ``calls``: the same floats :func:`~topomodel.analysis.training.step.step_ops` gives
    (:func:`~topomodel.analysis.training.stagework.op_durations` reads the chunks'
    figures without making their works; not for ``ep_overlap="dualpipe"``). With
    ``summed``, their sums per stage (p,), bit for bit
    (:func:`~topomodel.analysis.training.stagework.op_sums`)."""
    device = shared_device_model(shape.accelerator, a.compute_dtype,
                                 override=a.compute_efficiency,
                                 hbm_efficiency=a.hbm_efficiency)
    lt_dense, lt_moe, edges = shared_layer_times(device, model, layout, shape.seq,
                                                 main_grad_bytes=BYTES[a.main_grad_dtype])
    return (op_sums if summed else op_durations)(
        lt_dense, lt_moe, edges, calls, layout, shape.sizes - shape.moe_sizes,
        shape.moe_sizes, shape.schedule, hot=a.hot_expert_factor if model.is_moe else 1.0,
        split_w=layout.schedule == "zb-h1", share=a.comm_sm_share)


def _idle_calls(model: Model, layout: Layout, calls: dict[str, Call] | None
                ) -> dict[str, Call]:
    """``calls`` with an MoE layout's All-to-All added, taking no time (its imbalance
    term is there at any speed)."""
    calls = dict(calls or {})
    if layout.ep > 1 and model.is_moe and "ep" not in calls:
        calls["ep"] = Call("ep", "alltoall", "direct", 1.0, 0.0, 0.0, 0.0, 0.0, False)
    return calls


def _comm_free_ops(model: Model, layout: Layout, assumptions: StepAssumptions,
                   shape: Shape, calls: dict[str, Call] | None
                   ) -> tuple[OpWork, dict[str, Call]]:
    """The step's operations with every collective taking no time but those of
    ``calls``, and those calls (an MoE layout's All-to-All added: its imbalance term is
    there at any speed)."""
    a = assumptions
    device = shared_device_model(shape.accelerator, a.compute_dtype,
                                 override=a.compute_efficiency,
                                 hbm_efficiency=a.hbm_efficiency)
    calls = _idle_calls(model, layout, calls)
    return step_ops(device, model, layout, a, shape.seq, shape.schedule, calls,
                    shape.sizes - shape.moe_sizes, shape.moe_sizes), calls


def step_bound(model: Model, layout: Layout, assumptions: StepAssumptions, shape: Shape,
               pipeline: CommFreePipeline) -> StepBound:
    """The bound of ``layout`` (any rank order) from its comm-free ``pipeline`` (which
    may come from the layout with another ZeRO stage)."""
    return bound_frame(model, layout, assumptions, shape).bound(pipeline)


@dataclass(frozen=True, eq=False)
class BoundFrame:
    """What :func:`step_bound` takes from a layout besides its pipeline's figures: per
    stage the optimizer step, seconds; the wait per second of the least compute; the
    share of the pipeline's excess over the busy time the bound keeps (1, or 0 for
    :func:`busy_bound`); the tokens of a step and the model FLOPs and peak FLOP/s
    behind MFU."""

    optimizer_s: np.ndarray
    wait_per_compute: float
    share: float
    tokens: float
    model_flops: float
    peak_flops: float

    def bound(self, pipeline: CommFreePipeline) -> StepBound:
        """The bound for ``pipeline``'s busy, compute and finish times (seconds)."""
        least_compute = float(pipeline.compute_s.min())
        wait = least_compute * self.wait_per_compute
        if pipeline.dualpipe:
            body = least_compute
        else:
            busy = float(pipeline.busy_s.max())
            ends = float((pipeline.finish_s + self.optimizer_s).max())
            body = busy + max(0.0, ends - busy) * self.share
        step = (body + wait) * (1 - ROUNDING_MARGIN)
        return StepBound(step, self.tokens * self.model_flops / (step * self.peak_flops),
                         self.tokens / step)


def bound_frame(model: Model, layout: Layout, assumptions: StepAssumptions, shape: Shape
                ) -> BoundFrame:
    """The :class:`BoundFrame` of ``layout`` (its ZeRO stage included), kept by what it
    reads (the model, the assumptions, the shape and :func:`frame_key`'s fields of the
    layout), as a search bounds every order of a layout, and the layouts of a shape
    that differ in what the frame does not read, with the same frame."""
    key = (id(model), id(assumptions), id(shape), *frame_key(layout))
    return _FRAMES.get(key, (model, assumptions, shape),
                       lambda: _bound_frame(model, layout, assumptions, shape))


KEPT_FRAMES = 32_768
"""Bound frames :func:`bound_frame` keeps (all dropped when full; a few hundred bytes
each, so about 10 MB when full). The 98k plan (Llama 3 70B, default space) asks 86k
times for 24k distinct frames: 44k made at 4,096, 24k at 32,768 (benchmarks/README.md,
plan60)."""

_FRAMES: Kept[BoundFrame] = Kept(KEPT_FRAMES)


def frame_key(layout: Layout) -> tuple[Any, ...]:
    """The fields of ``layout`` :func:`_bound_frame` reads: the sizes (the stages'
    parameters, the replicas, the world), recomputation (the model FLOPs) and whether
    ZeRO shards the optimizer state (any stage above 0)."""
    return (layout.tp, layout.cp, layout.dp, layout.pp, layout.ep, layout.recompute,
            bool(layout.zero))


def forget_frames() -> None:
    """Drop every frame :func:`bound_frame` and :func:`busy_bound` keep (the next call
    finds its frame afresh)."""
    _FRAMES.clear()
    _BUSY_FRAMES.clear()


def _bound_frame(model: Model, layout: Layout, assumptions: StepAssumptions, shape: Shape
                 ) -> BoundFrame:
    """:func:`bound_frame`, found."""
    a = assumptions
    world = layout.world
    device = shared_device_model(shape.accelerator, a.compute_dtype,
                                 override=a.compute_efficiency,
                                 hbm_efficiency=a.hbm_efficiency)
    layers, moe_layers = shape.sizes.sum(axis=1), shape.moe_sizes.sum(axis=1)
    dense, experts = stage_parameters(model, layout, layers, moe_layers)
    replicas = layout.dp * layout.cp
    sharded = (dense / replicas + experts / max(1, replicas // layout.ep)) if layout.zero \
        else dense + experts
    optimizer = device.memory_s(optimizer_bytes_per_param()) * sharded
    model_flops, _ = flops_per_token(model, shape.seq, recompute=layout.recompute)
    return BoundFrame(optimizer, sync_wait(a, world).share, 1.0,
                      shape.global_batch * shape.seq, model_flops, world * device.peak_flops)


def bound_with_calls(model: Model, layout: Layout, assumptions: StepAssumptions,
                     shape: Shape, calls: dict[str, Call]) -> StepBound:
    """The bound of ``layout`` with the collectives ``calls``, each taking no more than
    in the step of its rank order: their operations' durations, the timeline and the
    gradient tail, as :func:`comm_free_pipeline` finds them."""
    pipeline = comm_free_pipeline(model, layout, assumptions, shape, calls)
    return step_bound(model, layout, assumptions, shape, pipeline)


def unordered(layout: Layout) -> Layout:
    """The layout whose comm-free pipeline ``layout`` shares: ZeRO 0, default order."""
    return evolve(layout, zero=0, order=_DEFAULT_ORDER)


_DEFAULT_ORDER = Layout().order


def calls_busy_figures(model: Model, layout: Layout, assumptions: StepAssumptions,
                       shape: Shape, calls: dict[str, Call]) -> tuple[np.ndarray, np.ndarray]:
    """Every operation's duration and compute (p, n), seconds, with the collectives
    ``calls`` (an MoE layout's All-to-All added, taking no time, where missing), as
    :func:`comm_free_pipeline` takes them before its timeline runs (not for
    ``ep_overlap="dualpipe"``)."""
    return _op_figures(model, layout, assumptions, shape, _idle_calls(model, layout, calls))


def calls_busy_sums(model: Model, layout: Layout, assumptions: StepAssumptions,
                    shape: Shape, calls: dict[str, Call]) -> CommFreePipeline:
    """Every stage's busy time (its operations one after another) and compute, seconds,
    with the collectives ``calls`` (an MoE layout's All-to-All added, taking no time,
    where missing): :func:`calls_busy_figures` summed per stage (the sums of
    :func:`busy_pipeline`'s path), as a pipeline :func:`busy_bound` reads (not for
    ``ep_overlap="dualpipe"``)."""
    busy, compute = _op_figures(model, layout, assumptions, shape,
                                _idle_calls(model, layout, calls), summed=True)
    return CommFreePipeline(busy, compute, busy, False)
