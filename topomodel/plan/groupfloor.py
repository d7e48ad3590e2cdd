"""A step time no rank order of a layout can beat, with its collectives at what no
placement beats and no pipeline timeline run: what lets a search drop a group (a layout
without its rank order, :mod:`topomodel.plan.search`) before its comm-free timeline.

The search bounds a group first by its busiest stage with every collective taking no
time (:func:`~topomodel.analysis.training.stepbound.busy_bound`), then by its comm-free
timeline (:func:`~topomodel.analysis.training.stepbound.step_bound`, a pipeline run: about
12 ms at 16k accelerators), and only then puts its collectives at what no placement beats
(:func:`~topomodel.plan.callfloors.unplaced_calls`). On a layout whose
in-stage collectives or gradient reduction are large (a large model without expert
parallelism, say) the first two leave out most of the step, and a search runs thousands of
timelines of groups none of whose orders could enter its top. This floor puts the
collectives at their unplaced times first, and replaces the timeline by one that needs no
run.

**Proof.** Let ``calls`` be the group's collectives each at its unplaced time, no more
than its time in the step of any rank order
(:func:`~topomodel.analysis.collectives.commbound.unplaced_lower_bound_s`).
:func:`~topomodel.analysis.training.stepbound.bound_with_calls` with them is no more than
every order's step (:mod:`~topomodel.analysis.training.stepbound`: every operation's
duration, the timeline and the gradient tail only grow with the collective times). It is
``max(busy, ends) + wait`` (:class:`~topomodel.analysis.training.stepbound.
BoundFrame`), with ``busy`` the most of the stages' summed operation durations, ``ends``
the most of a stage's gradient finish plus its optimizer step, ``wait`` the least
compute of a stage times the frame's wait share; it only grows with ``ends``. This
floor takes the same operations, frame and compute, and a finish no later than that
timeline's, so it is no more than that bound:

- on the timeline a stage runs its operations one after the other from time 0 or later,
  so each starts no earlier than the sum of the durations before it on its stage (the
  *packed* start), and the stage ends no earlier than the sum of all (its busy time);
- a bucket of a pass is ready ``(k + 1) / count`` of the way through it, so no earlier
  than at that share of the pass on the packed starts (the pass lasts its duration on
  both); without ``dp_overlap`` every bucket waits for the stage's end, no earlier than
  its busy time;
- :func:`~topomodel.analysis.training.buckets.gradient_tail`'s finish is the larger of
  the stage's end and ``max_j (r_j + the costs of bucket j and every bucket behind it)``
  with the buckets in the order of their ready times ``r``: the most, over a time ``x``,
  of ``x`` plus the costs of the buckets ready at ``x`` or later, which only grows with
  each ready time and each cost. So on the packed timeline it is no later than on the
  bound's.

With more than one pipeline stage the floor reads only the stages' sums (made without
every operation's duration): each stage ends no earlier than its busy time, so its
finish is taken there, without the gradient tail (no more than the packed one).

With ``ep_overlap="dualpipe"`` the bound is the least compute of a stage plus the wait
(the step clips an all-to-all's exposed time, see :mod:`~topomodel.analysis.training.
stepbound`), which the group's cheap bound already is: no floor is made there.
"""

from __future__ import annotations

import numpy as np

from topomodel.analysis.assumptions import StepAssumptions
from topomodel.analysis.training.buckets import gradient_tail, stage_buckets
from topomodel.analysis.training.memory import stage_parameters
from topomodel.analysis.training.pipeline import Timeline
from topomodel.analysis.training.stagework import Call
from topomodel.analysis.training.stepbound import (
    CommFreePipeline,
    StepBound,
    bound_frame,
    calls_busy_figures,
    calls_busy_sums,
)
from topomodel.analysis.training.stepcalls import issued_calls, step_calls
from topomodel.analysis.training.stepshape import Shape
from topomodel.errors import UsageError
from topomodel.fabric.tables import Fabric
from topomodel.inputs.parts import Model
from topomodel.plan.callfloors import unplaced_calls
from topomodel.plan.orderbounds import (
    TIMED_ORDERS,
    OrderBounds,
    OrderMemo,
    PlanJob,
    kept_in,
    rank_score,
)
from topomodel.traffic.layout import Layout


def group_floor(fabric: Fabric, job: PlanJob, layout: Layout, shape: Shape,
                memo: OrderMemo) -> StepBound | None:
    """A bound no rank order of ``layout`` (any order, its own ZeRO stage) beats, seconds,
    from its collectives at their unplaced times and its operations packed on each stage
    (see the module), without a timeline; None with ``ep_overlap="dualpipe"`` (no floor
    beyond the cheap bound). The collectives and their unplaced times are kept in
    ``memo`` under the keys the group's order bounds read them by
    (:class:`~topomodel.plan.orderbounds.OrderBounds`), so a group that is not dropped
    finds them there."""
    if layout.ep_overlap == "dualpipe":
        return None
    floors = unplaced_floor_calls(fabric, job, layout, shape, memo)
    return packed_bound(job.model, layout, job.assumptions, shape, floors)


def group_score(fabric: Fabric, job: PlanJob, layout: Layout, shape: Shape,
                memo: OrderMemo, power_W: float) -> float:
    """The best score any rank order of ``layout`` can reach by its :func:`group_floor`
    (as the search ranks: :func:`~topomodel.plan.orderbounds.rank_score`), inf where it
    has none."""
    floor = group_floor(fabric, job, layout, shape, memo)
    return float("inf") if floor is None else rank_score(floor, job, power_W)


def unplaced_floor_calls(fabric: Fabric, job: PlanJob, layout: Layout, shape: Shape,
                         memo: OrderMemo) -> dict[str, Call]:
    """``layout``'s collectives (any rank order: they issue the same), each at a time no
    order beats (:func:`~topomodel.plan.callfloors.unplaced_calls`), found
    in ``memo`` or made and kept there as :meth:`~topomodel.plan.orderbounds.OrderBounds.
    unplaced_score` keeps them."""
    key = OrderBounds(fabric, job, layout, shape, _no_pipeline, 0.0, memo).calls_key
    a = job.assumptions

    def issued() -> dict[str, Call]:
        issues = kept_in(memo.issues, key, TIMED_ORDERS, lambda: issued_calls(
            fabric, job.model, layout, a, shape.seq, shape.sizes, shape.moe_sizes))
        return step_calls(fabric, job.model, layout, a, routing=job.routing, seed=job.seed,
                          unrouted=_untimed, shape=shape, issued=issues)[0]

    calls = kept_in(memo.issued, key, TIMED_ORDERS, issued)
    return kept_in(memo.floors, key, TIMED_ORDERS,
                   lambda: unplaced_calls(fabric, layout, a, calls))


def packed_bound(model: Model, layout: Layout, assumptions: StepAssumptions, shape: Shape,
                 calls: dict[str, Call]) -> StepBound:
    """The bound of ``layout`` with the collectives ``calls`` (each no more than in the
    step of any rank order considered), seconds: with one pipeline stage, on its packed
    timeline (its operations back to back from 0, its gradient buckets ready at their
    share of their pass there); with more, each stage's busy time and optimizer step
    (see the module); not for ``ep_overlap="dualpipe"``."""
    a = assumptions
    frame = bound_frame(model, layout, a, shape)
    if layout.pp > 1:  # the stages' sums alone, each stage's finish at its busy time
        return frame.bound(calls_busy_sums(model, layout, a, shape, calls))
    duration, compute = calls_busy_figures(model, layout, a, shape, calls)
    busy = duration.sum(axis=1)
    finish = busy
    if "dp" in calls or "edp" in calls:
        end = np.cumsum(duration, axis=1)
        packed = Timeline(shape.schedule, end - duration, end, busy, busy,
                          float(busy.max()), 0.0, np.zeros(0, dtype=np.int64))
        layers, moe_layers = shape.sizes.sum(axis=1), shape.moe_sizes.sum(axis=1)
        dense, experts = stage_parameters(model, layout, layers, moe_layers)
        try:
            buckets = stage_buckets(shape.schedule, calls, layout, a, dense, experts,
                                    shape.sizes, shape.moe_sizes)
        except UsageError:  # more buckets than the step times: no tail (a lower floor)
            buckets = []
        finish, _ = gradient_tail(packed, calls, layout, buckets)
    return frame.bound(CommFreePipeline(busy, compute.sum(axis=1), finish, False))


def _untimed(*_: object) -> float:
    """No time for a collective the fabric's table does not hold (none is read)."""
    return 0.0


def _no_pipeline() -> CommFreePipeline:
    """Never called: the floor reads only the order bounds' keys."""
    raise AssertionError("the group floor runs no timeline")

