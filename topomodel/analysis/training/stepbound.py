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
  earlier on a faster timeline with faster buckets), plus the wait, *less* two
  deficits the step's accounting allows:
  the pipeline sends it counts as exposed are at most the slowest stage's own sends
  (``2 m v`` of them) while the critical path may cross up to ``K`` (the most sends on
  any path of the schedule), and the ZeRO weight gathers it counts are the slowest
  stage's while the stage that starts the critical path may hold more buckets.

Each deficit is at most a multiple of a collective's time, which also adds to the
busy bound as soon as the deficit is there; the worst split of an unknown send and
gather time between the two bounds leaves (for any figure of the pipeline bound that
the step's last end cannot be below: the comm-free one, or one with collective times,
each no more than the step's, that starts each stage after its ZeRO gathers as the step
does, :func:`gather_ready_s`, and each operation after its input's pipeline send,
:func:`per_send_s`)

    bound = busy + max(0, pipeline - busy) x min(1, 2 m v / K, n_min / n_max) + wait

with ``n_min / n_max`` the fewest over the most weight-gather buckets of a stage. The
wait is the step's (jitter and stragglers on compute) on the least compute of any
stage.

Where that share is below 1 (paths that cross more sends than a stage's own ``2 m v``
of them, or a stage without buckets of a kind: share 0), a second pipeline bound keeps
the bubble. The step's last end is its critical path's start plus the path: its
operations and the ``h`` sends that hold it up (inputs crossing a stage boundary and,
with blocking sends, a sender's wait), each taking the step's send time ``x``. The
step counts at most ``2 m v x`` of them as exposed, and what it counts as gathers is
no more than the wait of the stage the path starts at for its gathers, which the path
starts after. So the step is at least that path's operations plus
``min(h, 2 m v) x``, plus the least optimizer step and the wait. Its operations take no
less than in a run with each collective at most the step's, and ``x`` is no less than
that run's send ``s``. With ``P[h]`` the longest path of that run crossing ``h`` sends
(:func:`stage_paths`; from one start stage with gathers, where the path may begin at
any stage, else from any), the critical path's ``h`` has the most ``P[h] + h x``; with
``h`` no more than the most sends ``K`` of any such path,

    bound = least over x >= s of (most over h of P[h] + (h - (K - 2 m v)) x)
            + least optimizer step + wait

(:func:`least_path_end`; the least over start stages with gathers). The bound is the
larger of the two (the second tried where the share is below :data:`PATH_SHARE`).

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

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from topomodel.analysis.assumptions import StepAssumptions, gradient_bucket_bytes
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
    cached_dependencies,
    rounds,
    timeline,
)
from topomodel.analysis.training.stagework import Call, OpWork, op_durations, op_sums
from topomodel.analysis.training.step import param_gather_calls, step_ops
from topomodel.analysis.training.stepshape import Shape, cached_schedule
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
    its gradient reduction (at least of its last operation), seconds, and the most
    pipeline sends any path of the schedule crosses."""

    busy_s: np.ndarray
    compute_s: np.ndarray
    finish_s: np.ndarray
    most_sends: int
    dualpipe: bool
    timeline: Timeline | None = None  # the comm-free run (None: a bound's own figures)
    per_send_s: float = 0.0  # each pipeline send in that run
    blocking: bool = False  # a sender waits for its own send

    @functools.cached_property
    def paths(self) -> np.ndarray:
        """:func:`stage_paths` of the run, made on first use (only a bound whose share
        is below :data:`PATH_SHARE` reads it)."""
        assert self.timeline is not None
        return stage_paths(self.timeline, self.blocking)


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
    bucket's ready time are no later than the step's with its own sends; and the
    bound's pipeline term, ``busy + (end - busy) x share`` with ``share <= 1``, only
    grows with that end (see the module: the share already allows for the sends the
    step counts as bubble rather than exposed)."""
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
                            most_sends(shape.schedule.name, p, shape.microbatches,
                                       layout.interleave, layout.pp_blocking),
                            layout.ep_overlap == "dualpipe", tl, per_send_s(calls),
                            layout.pp_blocking)


def stage_paths(tl: Timeline, blocking: bool) -> np.ndarray:
    """Per stage ``i`` and count ``h`` (p, K + 1, ``K`` the most any path crosses), the
    longest path of the run ``tl`` from stage ``i``'s first operation to a stage's last
    one on which ``h`` pipeline sends hold an operation up (an input that crosses a
    stage boundary and, with ``blocking``, a sender's wait for its own send before its
    stage's next operation), seconds of its operations alone (read back as end less
    start; -inf: no such path): the timeline's rounds walked backwards, each
    operation's paths the longer, count by count, of its stage's next operation's and
    its dependents'."""
    s = tl.schedule
    p, n = s.p, s.ops
    dep_stage, dep_pos, boundary = cached_dependencies(s)
    crossing = (boundary >= 0).ravel()
    sends = np.zeros(p * n, dtype=bool)
    if blocking:
        sends[dep_stage.ravel()[crossing] * n + dep_pos.ravel()[crossing]] = True
    dur = (tl.end_s - tl.start_s).ravel()
    width = most_sends(s.name, p, s.m, s.v, blocking) + 1
    # counts 0 .. width - 1 in columns 1 .. width, column 0 -inf: a row read from
    # column 0 is the same paths one count up
    firsts = np.full((p, width), -np.inf)  # from each stage's first operation
    via = np.full((p * n, width + 1), -np.inf)  # through the operation's dependents
    after = np.full((p, width + 1), -np.inf)  # through the stage's next operation
    after[:, 1] = 0.0  # a stage's last operation ends a path
    same, one_more = via[:, 1:], via[:, 2:]  # a dependent's paths as its input's
    for go, at, dep, has in reversed(rounds(s)):
        # a sender's next operation waits for its send (a stage's last has none)
        wait = (sends[at] & (at % n < n - 1))[:, None]
        next_ = np.where(wait, after[go, :-1], after[go, 1:])
        found = dur[at, None] + np.maximum(next_, via[at, 1:])
        after[go, 1:] = found
        starts = at % n == 0
        firsts[go[starts]] = found[starts]
        # an operation's dependents are one on another stage and one on its own at most,
        # so neither assignment writes an input twice
        crosses = crossing[at] & has
        stays = has & ~crossing[at]
        to = dep[stays]
        same[to] = np.maximum(same[to], found[stays])
        to = dep[crosses]
        one_more[to] = np.maximum(one_more[to], found[crosses, :-1])
    return firsts


def least_path_end(paths: np.ndarray, send_s: float, own_sends: int) -> float:
    """The least a run's critical path can take, less the sends it crosses beyond a
    stage's own ``own_sends`` (at most ``D = K - own_sends`` of them, ``K`` the most
    sends of a path), seconds, when every send takes some ``x >= send_s`` and the
    path's operations no less than in ``paths`` (``paths[h]``: the longest crossing
    ``h`` sends, :func:`stage_paths`): the least over ``x`` of the most over ``h`` of
    ``paths[h] + (h - D) x``, a convex polyline whose least is at a corner: on the
    stretch where line ``h`` is the most (from where it overtakes every line of
    fewer sends to where one of more sends overtakes it), at its left end if it
    rises, else at its right."""
    h = np.flatnonzero(paths > -np.inf)
    length = paths[h]
    slope = h - max(0, int(h.max()) - own_sends)
    more = h[None, :] - h[:, None]  # [k, j]: how many more sends line j crosses than k
    with np.errstate(divide="ignore", invalid="ignore"):
        overtakes = (length[:, None] - length[None, :]) / more  # where j passes k
    start = np.maximum(send_s, np.where(more > 0, overtakes, -np.inf).max(axis=0))
    end = np.where(more > 0, overtakes, np.inf).min(axis=1)
    held = start <= end
    at = np.where(slope >= 0, start, end)
    return float((length + slope * at)[held].min())


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
    all): of the :class:`BoundFrame`, ZeRO changes only the optimizer step and the share
    of the pipeline excess, and this bound sets the share to 0, so the excess
    (``max(0, ends - busy) x 0``, with the optimizer step in ``ends``) adds exactly 0
    for any finite step; the busy time, the least compute, the wait per compute, the
    tokens, the model FLOPs and the peak do not read ZeRO. So its frame is made
    without the optimizer step (zeros in its place: the excess times 0 is 0 either
    way, the optimizer step being finite on an HBM of any bandwidth) nor the share,
    and kept by what it reads (:func:`_busy_frame`): a search bounds every layout of
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
        return CommFreePipeline(busy, ops.compute_s.sum(axis=1), busy, 0, True)
    busy, compute = _op_figures(model, layout, assumptions, shape,
                                _idle_calls(model, layout, None), summed=True)
    return CommFreePipeline(busy, compute, busy, 0, False)


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


@functools.lru_cache(maxsize=1024)
def most_sends(name: str, p: int, m: int, v: int, blocking: bool) -> int:
    """The most pipeline sends (and, with ``blocking``, waits on a send) any path of the
    schedule crosses: its timeline with operations taking no time and every send one."""
    sched = cached_schedule(name, p, m, v)
    if p < 2:
        return 0
    tl = timeline(sched, np.zeros((p, sched.ops)), np.ones((p, 2)), blocking_sends=blocking)
    return round(tl.makespan_s)


def step_bound(model: Model, layout: Layout, assumptions: StepAssumptions, shape: Shape,
               pipeline: CommFreePipeline, *, paths: bool = False) -> StepBound:
    """The bound of ``layout`` (any rank order) from its comm-free ``pipeline`` (which
    may come from the layout with another ZeRO stage); with ``paths``, its run's paths
    too (:meth:`BoundFrame.bound`)."""
    return bound_frame(model, layout, assumptions, shape, pipeline).bound(pipeline,
                                                                          paths=paths)


PATH_SHARE = 0.9
"""Shares of the pipeline excess below which :meth:`BoundFrame.bound` tries its second
pipeline term (:meth:`BoundFrame.path_body`): above, the first keeps nine tenths of the
bubble or more, and the paths' cost (a few timeline runs) would buy little."""

PATH_SENDS = 256
"""The most sends of a path (``K``) up to which :meth:`BoundFrame.bound` tries its second
pipeline term: its paths hold a count per send for every operation (p x ops x (K + 1)
floats), and with blocking sends on many micro-batches ``K`` grows with them (1,027
for 512 micro-batches on 4 stages: 33 MB and 0.18 CPU s). Both limits change how much a
bound keeps, never whether it holds."""


@dataclass(frozen=True, eq=False)
class BoundFrame:
    """What :func:`step_bound` takes from a layout besides its pipeline's figures: per
    stage the optimizer step, seconds; the wait per second of the least compute; the
    share of the pipeline excess over the busy time the bound keeps (0-1); the tokens
    of a step and the model FLOPs and peak FLOP/s behind MFU."""

    optimizer_s: np.ndarray
    wait_per_compute: float
    share: float
    tokens: float
    model_flops: float
    peak_flops: float
    own_sends: int = 0  # a stage's own pipeline sends, 2 m v
    gathers: bool = False  # ZeRO 1-2 weight gathers before the first forward

    def bound(self, pipeline: CommFreePipeline, *, paths: bool = False) -> StepBound:
        """The bound for ``pipeline``'s busy, compute and finish times (seconds), and,
        with ``paths`` where its share is below :data:`PATH_SHARE`, its run's paths
        (:meth:`path_body`, up to :data:`PATH_SENDS`): some milliseconds a run, so a
        search asks for them only where the rest cannot drop a layout."""
        least_compute = float(pipeline.compute_s.min())
        wait = least_compute * self.wait_per_compute
        if pipeline.dualpipe:
            body = least_compute
        else:
            busy = float(pipeline.busy_s.max())
            ends = float((pipeline.finish_s + self.optimizer_s).max())
            body = busy + max(0.0, ends - busy) * self.share
            if (paths and self.share < PATH_SHARE and pipeline.timeline is not None
                    and pipeline.most_sends <= PATH_SENDS):
                body = max(body, self.path_body(pipeline))
        step = (body + wait) * (1 - ROUNDING_MARGIN)
        return StepBound(step, self.tokens * self.model_flops / (step * self.peak_flops),
                         self.tokens / step)

    def path_body(self, pipeline: CommFreePipeline) -> float:
        """The step less its wait no rank order can beat by the paths of ``pipeline``'s
        run (the module's second pipeline bound), seconds."""
        paths = pipeline.paths
        if not self.gathers:  # no stage waits to start: the critical path is the longest
            paths = paths.max(axis=0, keepdims=True)
        return min(least_path_end(row, pipeline.per_send_s, self.own_sends)
                   for row in paths) + float(self.optimizer_s.min())


def bound_frame(model: Model, layout: Layout, assumptions: StepAssumptions, shape: Shape,
                pipeline: CommFreePipeline) -> BoundFrame:
    """The :class:`BoundFrame` of ``layout`` (its ZeRO stage included), with the most
    sends on a path of ``pipeline``'s schedule; kept by what it reads (the model, the
    assumptions, the shape, the most sends and :func:`frame_key`'s fields of the
    layout), as a search bounds every order of a layout, and the layouts of a shape
    that differ in what the frame does not read, with the same frame."""
    key = (id(model), id(assumptions), id(shape), pipeline.most_sends, *frame_key(layout))
    return _FRAMES.get(key, (model, assumptions, shape),
                       lambda: _bound_frame(model, layout, assumptions, shape, pipeline))


KEPT_FRAMES = 32_768
"""Bound frames :func:`bound_frame` keeps (all dropped when full; a few hundred bytes
each, so about 10 MB when full). The 98k plan (Llama 3 70B, default space) asks 86k
times for 24k distinct frames: 44k made at 4,096, 24k at 32,768 (benchmarks/README.md,
plan60)."""

_FRAMES: Kept[BoundFrame] = Kept(KEPT_FRAMES)


def frame_key(layout: Layout) -> tuple[Any, ...]:
    """The fields of ``layout`` :func:`_bound_frame` reads: the sizes (the stages'
    parameters, the replicas, the world), the interleave (the pipeline share),
    recomputation (the model FLOPs), the gradients' overlap (the ZeRO buckets) and the
    ZeRO stage as it reads it: 0 (no sharding), 1-2 (sharded, the buckets' share) or 3
    (sharded)."""
    zero = layout.zero
    return (layout.tp, layout.cp, layout.dp, layout.pp, layout.ep, layout.interleave,
            layout.recompute, layout.dp_overlap, 0 if not zero else 1 if zero in (1, 2)
            else 3)


def forget_frames() -> None:
    """Drop every frame :func:`bound_frame` and :func:`busy_bound` keep (the next call
    finds its frame afresh)."""
    _FRAMES.clear()
    _BUSY_FRAMES.clear()


def _bound_frame(model: Model, layout: Layout, assumptions: StepAssumptions, shape: Shape,
                 pipeline: CommFreePipeline) -> BoundFrame:
    """:func:`bound_frame`, found."""
    a = assumptions
    p, world = layout.pp, layout.world
    device = shared_device_model(shape.accelerator, a.compute_dtype,
                                 override=a.compute_efficiency,
                                 hbm_efficiency=a.hbm_efficiency)
    layers, moe_layers = shape.sizes.sum(axis=1), shape.moe_sizes.sum(axis=1)
    dense, experts = stage_parameters(model, layout, layers, moe_layers)
    replicas = layout.dp * layout.cp
    sharded = (dense / replicas + experts / max(1, replicas // layout.ep)) if layout.zero \
        else dense + experts
    optimizer = device.memory_s(optimizer_bytes_per_param()) * sharded
    wait = sync_wait(a, world).share
    share = 1.0
    if p > 1 and pipeline.most_sends > 0:
        share = min(share, 2 * shape.microbatches * layout.interleave / pipeline.most_sends)
    if layout.zero in (1, 2) and replicas > 1:
        share = min(share, _bucket_share(a, dense, experts, layout))
    model_flops, _ = flops_per_token(model, shape.seq, recompute=layout.recompute)
    return BoundFrame(optimizer, wait, share, shape.global_batch * shape.seq, model_flops,
                      world * device.peak_flops,
                      2 * shape.microbatches * layout.interleave if p > 1 else 0,
                      layout.zero in (1, 2) and replicas > 1)


def _bucket_share(a: StepAssumptions, dense: np.ndarray, experts: np.ndarray,
                  layout: Layout) -> float:
    """The fewest over the most ZeRO weight-gather buckets of a stage, over the bucket
    kinds the step gathers (dense over DP x CP, experts over their replicas)."""
    grad = BYTES[a.grad_dtype]
    share = 1.0
    kinds = [(dense, layout.dp * layout.cp)]
    if (layout.dp * layout.cp // layout.ep > 1) and float(experts.max()) > 0:
        kinds.append((experts, layout.dp * layout.cp // layout.ep))
    for params, ranks in kinds:
        bucket = min(gradient_bucket_bytes(a, ranks, grad, overlapped=layout.dp_overlap),
                     float(params.max()) * grad)
        if bucket <= 0:
            continue
        counts = np.ceil(params * grad / bucket)
        share = min(share, float(counts.min() / counts.max()))
    return share


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
    return CommFreePipeline(busy, compute, busy, 0, False)
