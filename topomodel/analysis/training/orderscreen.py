"""A bound of one rank order's step from its collective times by arithmetic alone: the
layout's comm-free pipeline, plus what each operation's exposed communication adds.

The rank orders of a layout issue the same collectives with the same sizes; only their
times differ. Of ``t`` seconds per call, an operation that issues ``count`` calls behind
``behind_s`` seconds of compute exposes ``max(t count - behind_s, share x t count)``
(:class:`~topomodel.analysis.training.stagework.Work`), where the compute behind a collective is
fixed, or, for one that hides behind what the collective before it left free, at most
what it is with every call taking no time. So each operation's duration is at least its
comm-free duration plus those terms with the comm-free ``behind_s``
(:meth:`OrderScreen.bound` sums them with array arithmetic, the terms recorded once per
layout by :func:`order_screen`). With them, three figures of the step with these times
are bounded from below (every start time of the timeline only grows with the
operations' durations):

- a stage's busy time: the sum of its operations' durations;
- a stage's end: its busy time, its comm-free end, and for the stage where the
  comm-free timeline ends, the durations along that timeline's critical path (a chain
  of operations each waiting for the one before, whatever the times);
- a stage's gradient reduction: its buckets go out one after the other, none before it
  is ready, and each is ready no earlier than on the comm-free timeline, so the
  reduction ends no earlier than any bucket's comm-free ready time plus the time of
  every bucket ready no earlier than it (after the stage's end without ``dp_overlap``).

:func:`~topomodel.analysis.training.stepbound.step_bound` only grows with all three, so on them
it gives a bound no greater than
:func:`~topomodel.analysis.training.stepbound.bound_with_calls` with the same times: a screen
that drops most orders which cannot win without a timeline of their own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from topomodel.analysis.assumptions import StepAssumptions
from topomodel.analysis.training.buckets import ready_times_s, stage_buckets
from topomodel.analysis.training.compute import device_model
from topomodel.analysis.training.memory import stage_parameters
from topomodel.analysis.training.pipeline import cached_dependencies
from topomodel.analysis.training.stagework import Call
from topomodel.analysis.training.step import step_works
from topomodel.analysis.training.stepbound import (
    BoundFrame,
    CommFreePipeline,
    StepBound,
    bound_frame,
)
from topomodel.analysis.training.stepshape import Shape
from topomodel.inputs.parts import Model
from topomodel.traffic.layout import Layout


@dataclass(frozen=True, eq=False)
class OrderScreen:
    """The bound of a layout's rank orders as arithmetic on their collective times
    (see the module): the comm-free ``pipeline`` and ``frame``; every recorded
    exposure term (``term_*``: the call it times, count, compute behind it in seconds,
    SM share, weight, the work unit it belongs to); per stage the operations of each
    unit; the units on the comm-free critical path, the stage it ends on and its
    comm-free length in seconds; the gradient buckets (flat, stage by stage: stage,
    comm-free ready time in seconds, the dp and edp buckets ready no earlier)."""

    names: tuple[str, ...]
    term_call: np.ndarray
    term_count: np.ndarray
    term_behind_s: np.ndarray
    term_share: np.ndarray
    term_weight: np.ndarray
    term_unit: np.ndarray
    stage_units: np.ndarray  # (p, units)
    path_units: np.ndarray  # (units,)
    path_stage: int
    path_s: float
    bucket_stage: np.ndarray
    bucket_ready_s: np.ndarray
    bucket_dp_after: np.ndarray
    bucket_edp_after: np.ndarray
    dp_overlap: bool
    pipeline: CommFreePipeline
    frame: BoundFrame

    def bound(self, calls: dict[str, Call]) -> StepBound:
        """The bound of the order whose collectives are ``calls`` (the layout's names,
        each no slower than in the order's step)."""
        pipe = self.pipeline
        if pipe.dualpipe or pipe.timeline is None:
            return self.frame.bound(pipe)
        t = np.array([calls[n].time_s for n in self.names])
        issued = t[self.term_call] * self.term_count
        exposed = self.term_weight * np.maximum(issued - self.term_behind_s,
                                                self.term_share * issued)
        per_unit = np.bincount(self.term_unit, exposed, minlength=len(self.path_units))
        busy = pipe.busy_s + self.stage_units @ per_unit
        end = np.maximum(pipe.timeline.stage_end_s, busy)
        end[self.path_stage] = max(float(end[self.path_stage]),
                                   self.path_s + float(self.path_units @ per_unit))
        finish = end
        if len(self.bucket_stage):
            t_dp = calls["dp"].time_s if "dp" in calls else 0.0
            t_edp = calls["edp"].time_s if "edp" in calls else 0.0
            tail = (self.bucket_dp_after * t_dp + self.bucket_edp_after * t_edp
                    + (self.bucket_ready_s if self.dp_overlap else end[self.bucket_stage]))
            reduced = np.full(len(end), -np.inf)
            np.maximum.at(reduced, self.bucket_stage, tail)
            finish = np.maximum(end, reduced)
        return self.frame.bound(CommFreePipeline(busy, pipe.compute_s, finish,
                                                 pipe.most_sends, pipe.dualpipe))


def order_screen(model: Model, layout: Layout, assumptions: StepAssumptions, shape: Shape,
                 pipeline: CommFreePipeline, calls: dict[str, Call]) -> OrderScreen:
    """The :class:`OrderScreen` of ``layout``'s rank orders, from its comm-free
    ``pipeline`` (:func:`~topomodel.analysis.training.stepbound.comm_free_pipeline`, no calls)
    and the collectives ``calls`` of any one of its orders (their names and sizes)."""
    a = assumptions
    names = tuple(calls)
    index = {(c.kind, c.collective): i for i, c in enumerate(calls.values())}
    idle = {n: replace(c, time_s=0.0) for n, c in calls.items()}
    device = device_model(shape.accelerator, a.compute_dtype, override=a.compute_efficiency,
                          hbm_efficiency=a.hbm_efficiency)
    works = step_works(device, model, layout, a, shape.seq, idle,
                       shape.sizes - shape.moe_sizes, shape.moe_sizes, record=True)
    units: dict[int, int] = {}
    terms: list[tuple[int, float, float, float, float, int]] = []
    s = shape.schedule
    p, v = s.p, s.v
    unit_of = np.zeros((3, p, v), dtype=np.int64)
    for kind, rows in enumerate(works):
        for st, row in enumerate(rows):
            for c, work in enumerate(row):
                if id(work) not in units:
                    units[id(work)] = u = len(units)
                    terms += [(index[key], count, max(0.0, behind), share, weight, u)
                              for key, count, behind, share, weight in work.terms or ()]
                unit_of[kind, st, c] = units[id(work)]
    term = np.array(terms, dtype=float).reshape(-1, 6)
    op_units = unit_of[s.kind, np.arange(p)[:, None], s.chunk]  # (p, n)
    stage_units = np.zeros((p, len(units)))
    np.add.at(stage_units, (np.repeat(np.arange(p), s.ops), op_units.ravel()), 1.0)
    path_units, path_stage, path_s = _critical_path(pipeline, op_units, len(units))
    layers, moe_layers = shape.sizes.sum(axis=1), shape.moe_sizes.sum(axis=1)
    dense, experts = stage_parameters(model, layout, layers, moe_layers)
    buckets = _bucket_bounds(pipeline, stage_buckets(s, calls, layout, a, dense, experts,
                                                     shape.sizes, shape.moe_sizes))
    return OrderScreen(names, term[:, 0].astype(np.int64), term[:, 1], term[:, 2],
                       term[:, 3], term[:, 4], term[:, 5].astype(np.int64), stage_units,
                       path_units, path_stage, path_s, *buckets, layout.dp_overlap,
                       pipeline, bound_frame(model, layout, a, shape, pipeline))


def _critical_path(pipeline: CommFreePipeline, op_units: np.ndarray, count: int
                   ) -> tuple[np.ndarray, int, float]:
    """The comm-free timeline's critical path, walked back from the last operation to
    end: the operations of each unit on it, the stage it ends on, its length in
    seconds. Each step goes to the operation's input when that ended later than the
    stage's previous operation, else to the previous operation: a chain of operations
    each starting after the one before, whatever their durations."""
    tl = pipeline.timeline
    on_path = np.zeros(count)
    if tl is None:
        return on_path, 0, 0.0
    dep_stage, dep_pos, _ = cached_dependencies(tl.schedule)
    end, start = tl.end_s, tl.start_s
    stage = last = int(np.argmax(tl.stage_end_s))
    j = tl.schedule.ops - 1
    length = 0.0
    while j >= 0:
        on_path[op_units[stage, j]] += 1
        length += float(end[stage, j] - start[stage, j])
        ds, dp = int(dep_stage[stage, j]), int(dep_pos[stage, j])
        before = float(end[stage, j - 1]) if j > 0 else 0.0
        if dp >= 0 and float(end[ds, dp]) > before:
            stage, j = ds, dp
        else:
            j -= 1
    return on_path, last, length


def _bucket_bounds(pipeline: CommFreePipeline, buckets: list[list[tuple[str, int, int]]]
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every gradient bucket, stage by stage: its stage, comm-free ready time (seconds)
    and how many dp and edp buckets are ready no earlier than it (itself included)."""
    stages, ready, after_dp, after_edp = [], [], [], []
    tl = pipeline.timeline
    for st, runs in enumerate(buckets):
        if not runs or tl is None:
            continue
        r = np.concatenate([ready_times_s(tl, st, n, pos) for _, n, pos in runs])
        dp = np.concatenate([np.full(n, key == "dp") for key, n, _ in runs])
        order = np.argsort(r, kind="stable")
        r, dp = r[order], dp[order]
        first = np.searchsorted(r, r, side="left")  # ties: every equal one counts
        dp_suffix = np.cumsum(dp[::-1])[::-1]
        edp_suffix = np.cumsum(~dp[::-1])[::-1]
        stages.append(np.full(len(r), st))
        ready.append(r)
        after_dp.append(dp_suffix[first].astype(float))
        after_edp.append(edp_suffix[first].astype(float))
    if not stages:
        empty = np.zeros(0)
        return empty.astype(np.int64), empty, empty, empty
    return (np.concatenate(stages), np.concatenate(ready), np.concatenate(after_dp),
            np.concatenate(after_edp))
