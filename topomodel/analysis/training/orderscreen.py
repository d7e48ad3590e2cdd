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
- a stage's end: its comm-free end; its busy time plus the delay ZeRO 1-2's gathers of
  the updated weights put on its start (the step starts a stage at
  ``max(0, G - F1)``, its gathers ``G`` less its first forward ``F1``, or at ``G``
  without ``dp_overlap``, so the stage's first operation ends at ``max(F1, G)`` and the
  stage at least its busy time plus ``max(0, G - F1)``, each part at least its figure
  here: :meth:`Gathers.delay_s`); and for the stage where the comm-free timeline ends,
  the durations along that timeline's critical path (a chain of operations each
  waiting for the one before, whatever the times) plus, for every pipeline send the
  chain crosses, the send's time (the input arrives its send after it ended);
- a stage's gradient reduction: its buckets go out one after the other, none before it
  is ready, and each is ready no earlier than on the comm-free timeline nor before its
  pass has started (the stage's operations before it one after another, each at least
  comm-free plus its exposure, after the gathers' delay) and run its share (at least
  comm-free plus its exposure): :meth:`Passes.ready_s`. Ready times only grow along the
  order a stage fills its buckets (the place of the pass, then the share of it), on any
  timeline, so the reduction ends no earlier than any bucket's bound plus the time of
  every bucket filled no earlier than it (after the stage's end without
  ``dp_overlap``).

:func:`~topomodel.analysis.training.stepbound.step_bound` only grows with all three, so on them
it gives a bound no greater than
:func:`~topomodel.analysis.training.stepbound.bound_with_calls` with the same times: a screen
that drops most orders which cannot win without a timeline of their own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topomodel.analysis.assumptions import StepAssumptions
from topomodel.analysis.training.buckets import stage_buckets
from topomodel.analysis.training.compute import (
    EdgeTimes,
    shared_device_model,
    shared_layer_times,
)
from topomodel.analysis.training.memory import stage_parameters
from topomodel.analysis.training.model import BYTES
from topomodel.analysis.training.pipeline import Timeline, cached_dependencies
from topomodel.analysis.training.stagework import Call, Chunks, Term, chunk_ends, kept_chunks
from topomodel.analysis.training.step import param_gather_calls
from topomodel.analysis.training.stepbound import (
    BoundFrame,
    CommFreePipeline,
    StepBound,
    bound_frame,
    per_send_s,
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
    unit; the units on the comm-free critical path, the stage it ends on, its
    comm-free length in seconds and the pipeline sends it crosses; the gradient
    buckets (flat, stage by stage: stage, comm-free ready time in seconds, the dp and
    edp buckets ready no earlier); the stages with buckets and where each one's start
    in the flat buckets."""

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
    path_sends: int
    bucket_stage: np.ndarray
    bucket_ready_s: np.ndarray
    bucket_dp_after: np.ndarray
    bucket_edp_after: np.ndarray
    dp_overlap: bool
    pipeline: CommFreePipeline
    frame: BoundFrame
    gathers: Gathers
    passes: Passes
    bucket_stages: np.ndarray
    bucket_starts: np.ndarray

    def bound(self, calls: dict[str, Call]) -> StepBound:
        """The bound of the order whose collectives are ``calls`` (the layout's names,
        each no slower than in the order's step)."""
        pipe = self.pipeline
        if pipe.dualpipe or pipe.timeline is None:
            return self.frame.bound(pipe)
        t = np.array([calls[n].time_s for n in self.names])
        per_unit = _per_unit(t[self.term_call], self.term_count, self.term_behind_s,
                             self.term_share, self.term_weight, self.term_unit,
                             len(self.path_units))
        busy = pipe.busy_s + self.stage_units @ per_unit
        delay = self.gathers.delay_s(t, per_unit, self.dp_overlap)
        end = np.maximum(pipe.timeline.stage_end_s, busy + delay)
        end[self.path_stage] = max(float(end[self.path_stage]),
                                   self.path_s + float(self.path_units @ per_unit)
                                   + self.path_sends * per_send_s(calls))
        finish = end
        if len(self.bucket_stage):
            t_dp = calls["dp"].time_s if "dp" in calls else 0.0
            t_edp = calls["edp"].time_s if "edp" in calls else 0.0
            ready = (self.passes.ready_s(self.bucket_ready_s, per_unit, delay)
                     if self.dp_overlap else end[self.bucket_stage])
            tail = self.bucket_dp_after * t_dp + self.bucket_edp_after * t_edp + ready
            finish = end.copy()  # each stage's last bucket, at least its end
            stages = self.bucket_stages
            finish[stages] = np.maximum(end[stages],
                                        np.maximum.reduceat(tail, self.bucket_starts))
        return self.frame.bound(CommFreePipeline(busy, pipe.compute_s, finish,
                                                 pipe.dualpipe))


@dataclass(frozen=True, eq=False)
class ScreenWorks:
    """What an :class:`OrderScreen` takes from the step's operations, which read of a
    layout's collectives only those inside them (TP, CP, EP and ZeRO-3's; never the
    gradients' nor ZeRO 1-2's gathers): each exposure term's call (kind, collective)
    and its count, compute behind it, SM share, weight and unit; the units of every
    operation (p, n) and per stage; the comm-free critical path (its units, the stage
    it ends on, its length in seconds and its sends). So the layouts with ZeRO 0, 1
    and 2 and the same other fields share one (:func:`screen_works`)."""

    term_keys: tuple[tuple[str, str], ...]
    term: np.ndarray  # (terms, 5)
    op_units: np.ndarray
    stage_units: np.ndarray
    path: tuple[np.ndarray, int, float, int]


def works_bound(works: ScreenWorks, pipeline: CommFreePipeline, frame: BoundFrame,
                calls: dict[str, Call]) -> StepBound:
    """The bound of the order whose collectives are ``calls`` from the operations' part
    of its screen alone (``works``, with the layout's comm-free ``pipeline`` and bound
    ``frame``): :meth:`OrderScreen.bound` with no gathers' delay and no gradient tail,
    each of which only adds to a stage's end, so never above it (the same figure where
    the screen has neither), and found without the buckets, the gathers and the
    passes :func:`order_screen` adds to the works: a search drops most groups on it."""
    pipe = pipeline
    if pipe.dualpipe or pipe.timeline is None:
        return frame.bound(pipe)
    times = {(c.kind, c.collective): c.time_s for c in calls.values()}
    term = works.term
    units = works.stage_units.shape[1]
    per_unit = _per_unit(np.array([times[k] for k in works.term_keys], dtype=float),
                         term[:, 0], term[:, 1], term[:, 2], term[:, 3],
                         term[:, 4].astype(np.int64), units)
    busy = pipe.busy_s + works.stage_units @ per_unit
    end = np.maximum(pipe.timeline.stage_end_s, busy)
    path_units, path_stage, path_s, path_sends = works.path
    end[path_stage] = max(float(end[path_stage]), path_s + float(path_units @ per_unit)
                          + path_sends * per_send_s(calls))
    return frame.bound(CommFreePipeline(busy, pipe.compute_s, end, pipe.dualpipe))


def _per_unit(t: np.ndarray, count: np.ndarray, behind_s: np.ndarray,
              share: np.ndarray, weight: np.ndarray, unit: np.ndarray, units: int
              ) -> np.ndarray:
    """Each work unit's exposed seconds, its terms' (see the module) summed, for each
    term's call taking ``t`` seconds."""
    issued = t * count
    exposed = weight * np.maximum(issued - behind_s, share * issued)
    return np.bincount(unit, exposed, minlength=units)


def screen_works(model: Model, layout: Layout, assumptions: StepAssumptions, shape: Shape,
                 pipeline: CommFreePipeline, calls: dict[str, Call]) -> ScreenWorks:
    """The :class:`ScreenWorks` of ``layout`` (any rank order) with the collectives
    ``calls`` (their names and sizes): the terms :func:`~topomodel.analysis.training.
    step.step_works` records with every call taking no time, read from the layers'
    and ends' recorded works without adding up the chunks' (:func:`_chunk_terms`).
    A unit is a distinct chunk's F, B or W work, numbered as the step's works list
    them (kind, then stage, then chunk, each work at its first place)."""
    a = assumptions
    idle = {n: c.timed(0.0, c.latency_s, c.bandwidth_s, c.topology_s)
            for n, c in calls.items()}
    device = shared_device_model(shape.accelerator, a.compute_dtype,
                                 override=a.compute_efficiency,
                                 hbm_efficiency=a.hbm_efficiency)
    lt_dense, lt_moe, edges = shared_layer_times(device, model, layout, shape.seq,
                                                 main_grad_bytes=BYTES[a.main_grad_dtype])
    kept = kept_chunks(lt_dense, lt_moe, edges, idle, layout,
                       hot=a.hot_expert_factor if model.is_moe else 1.0,
                       split_w=layout.schedule == "zb-h1", share=a.comm_sm_share,
                       record=True)
    codes, chunks = _chunk_terms(kept, edges, idle, layout, shape.sizes - shape.moe_sizes,
                                 shape.moe_sizes)
    count = len(chunks)  # unit of (kind, chunk): kind x count + the chunk's code
    keys = [term[0] for kind in range(3) for chunk in chunks for term in chunk[kind]]
    terms = [(c, max(0.0, behind), share, weight, kind * count + code)
             for kind in range(3) for code, chunk in enumerate(chunks)
             for _, c, behind, share, weight in chunk[kind]]
    s = shape.schedule
    p = s.p
    op_units = s.kind * count + codes[np.arange(p)[:, None], s.chunk]  # (p, n)
    stage_units = np.zeros((p, 3 * count))
    np.add.at(stage_units, (np.repeat(np.arange(p), s.ops), op_units.ravel()), 1.0)
    return ScreenWorks(tuple(keys), np.array(terms, dtype=float).reshape(-1, 5), op_units,
                       stage_units, _critical_path(pipeline, op_units, 3 * count))


def _chunk_terms(kept: Chunks, edges: EdgeTimes, calls: dict[str, Call], layout: Layout,
                 dense_layers: np.ndarray, moe_layers: np.ndarray
                 ) -> tuple[np.ndarray, list[tuple[list[Term], ...]]]:
    """Each chunk's code (p, v; int64), numbered in the order they first appear stage
    by stage, chunk by chunk, and per code the F, B and W terms
    :func:`~topomodel.analysis.training.stagework.chunk_work` records in that chunk's
    works (``kept``: its layers' works, recorded): the layers' terms weighted by their
    count, then the ends', in the order and with the floats its :meth:`Work.add` gives
    them."""
    p, v = dense_layers.shape
    dense, moe = dense_layers.tolist(), moe_layers.tolist()
    known: dict[tuple[int, int, bool, bool], int] = {}
    chunks: list[tuple[list[Term], ...]] = []
    codes = np.empty((p, v), dtype=np.int64)
    for st in range(p):
        for c in range(v):
            what = (int(dense[st][c]), int(moe[st][c]), st == 0 and c == 0,
                    st == p - 1 and c == v - 1)
            code = known.get(what)
            if code is None:
                code = known[what] = len(chunks)
                ends = chunk_ends(kept, what, edges, calls, layout,
                                  split_w=layout.schedule == "zb-h1", record=True)
                parts = [(kept.per[False], float(what[0])), (kept.per[True], float(what[1]))
                         if what[1] else (None, 0.0), (ends, 1.0)]
                chunks.append(tuple(
                    [(k, n, b, sh, w * times) for works, times in parts
                     if works is not None and times for k, n, b, sh, w in
                     works[kind].terms or ()] for kind in range(3)))
            codes[st, c] = code
    return codes, chunks


def order_screen(model: Model, layout: Layout, assumptions: StepAssumptions,
                 shape: Shape, pipeline: CommFreePipeline, calls: dict[str, Call],
                 works: ScreenWorks | None = None) -> OrderScreen:
    """The :class:`OrderScreen` of ``layout``'s rank orders, from its comm-free
    ``pipeline`` (:func:`~topomodel.analysis.training.stepbound.comm_free_pipeline`, no calls)
    and the collectives ``calls`` of any one of its orders (their names and sizes);
    ``works``: its :func:`screen_works`, if found (for it at another ZeRO stage of 0-2)."""
    a = assumptions
    names = tuple(calls)
    index = {(c.kind, c.collective): i for i, c in enumerate(calls.values())}
    if works is None:
        works = screen_works(model, layout, a, shape, pipeline, calls)
    term, op_units, stage_units = works.term, works.op_units, works.stage_units
    count = stage_units.shape[1]
    s = shape.schedule
    p = s.p
    layers, moe_layers = shape.sizes.sum(axis=1), shape.moe_sizes.sum(axis=1)
    dense, experts = stage_parameters(model, layout, layers, moe_layers)
    runs = stage_buckets(s, calls, layout, a, dense, experts, shape.sizes, shape.moe_sizes)
    buckets, bucket_pass, passes = _bucket_bounds(pipeline, runs, op_units, count)
    first = np.argmax(s.kind == 0, axis=1)
    counts = param_gather_calls(calls, layout, a, dense, experts)
    tl = pipeline.timeline
    first_s = (np.zeros(p) if tl is None else
               tl.end_s[np.arange(p), first] - tl.start_s[np.arange(p), first])
    gathers = Gathers(np.array([names.index(k) for k in counts], dtype=np.int64),
                      np.array(list(counts.values()), dtype=float).reshape(len(counts), p),
                      op_units[np.arange(p), first], first_s)
    return OrderScreen(names, np.array([index[k] for k in works.term_keys], dtype=np.int64),
                       term[:, 0], term[:, 1], term[:, 2], term[:, 3],
                       term[:, 4].astype(np.int64), stage_units, *works.path,
                       *buckets, layout.dp_overlap, pipeline,
                       bound_frame(model, layout, a, shape), gathers,
                       Passes(*passes, first, bucket_pass[0], bucket_pass[1]),
                       *_runs(buckets[0]))


def _runs(stage: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of ``stage`` (grouped: equal values next to each other) and
    where each one's run starts."""
    starts = np.flatnonzero(np.r_[True, stage[1:] != stage[:-1]]) if len(stage) \
        else np.zeros(0, dtype=np.int64)
    return stage[starts], starts


def _critical_path(pipeline: CommFreePipeline, op_units: np.ndarray, count: int
                   ) -> tuple[np.ndarray, int, float, int]:
    """The comm-free timeline's critical path, walked back from the last operation to
    end: the operations of each unit on it, the stage it ends on, its length in
    seconds and the pipeline sends it crosses. Each step goes to the operation's input
    when that ended later than the stage's previous operation, else to the previous
    operation: a chain of operations each starting after the one before, whatever
    their durations, and, where it goes to an input across a stage boundary, no
    earlier than that input's end plus the send (the timeline's own rule), so on any
    timeline it is at least its operations' durations plus its sends' times."""
    tl = pipeline.timeline
    if tl is None:
        return np.zeros(count), 0, 0.0, 0
    # walked on lists: a step reads a few scalars, each far cheaper from a list
    dep_stage, dep_pos, boundary = (a.tolist() for a in cached_dependencies(tl.schedule))
    end, start, units = tl.end_s.tolist(), tl.start_s.tolist(), op_units.tolist()
    on_path = [0] * count
    sends = 0
    stage = last = int(np.argmax(tl.stage_end_s))
    j = tl.schedule.ops - 1
    length = 0.0
    while j >= 0:
        ends = end[stage]
        on_path[units[stage][j]] += 1
        length += ends[j] - start[stage][j]
        ds, dp = dep_stage[stage][j], dep_pos[stage][j]
        before = ends[j - 1] if j > 0 else 0.0
        if dp >= 0 and end[ds][dp] > before:
            sends += boundary[stage][j] >= 0
            stage, j = ds, dp
        else:
            j -= 1
    return np.array(on_path, dtype=float), last, length, sends


def _bucket_bounds(pipeline: CommFreePipeline, buckets: list[list[tuple[str, int, int]]],
                   op_units: np.ndarray, count: int
                   ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
                              tuple[np.ndarray, np.ndarray],
                              tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                    np.ndarray, np.ndarray]]:
    """Every gradient bucket, stage by stage, in the order its stage fills them (by the
    place of the pass and the share of it done): its stage, comm-free ready time
    (seconds) and how many dp and edp buckets are filled no earlier than it (itself
    and every tie included); each bucket's pass (an index into the passes) and share
    of it; and the passes (:class:`Passes`' first six fields). Along that order the
    ready times only grow, on the comm-free timeline and on any other (a stage runs
    its operations one after another), so every bucket counted after one is ready no
    earlier than it."""
    stages, ready, after_dp, after_edp, of_pass, shares = [], [], [], [], [], []
    places: dict[tuple[int, int], int] = {}
    tl = pipeline.timeline
    for st, runs in enumerate(buckets):
        if not runs or tl is None:
            continue
        r, dp, share, at, filled = _stage_runs(tl, st, runs, places)
        order = np.argsort(filled, kind="stable")
        r, dp, share, at, filled = r[order], dp[order], share[order], at[order], filled[order]
        first = np.searchsorted(filled, filled, side="left")  # ties: every equal one counts
        dp_suffix = np.cumsum(dp[::-1])[::-1]
        edp_suffix = np.cumsum(~dp[::-1])[::-1]
        stages.append(np.full(len(r), st))
        ready.append(r)
        after_dp.append(dp_suffix[first].astype(float))
        after_edp.append(edp_suffix[first].astype(float))
        of_pass.append(at)
        shares.append(share)
    stage, pos = (np.array(list(places), dtype=np.int64).reshape(-1, 2).T if places
                  else (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)))
    before = np.zeros((len(stage), count))  # each unit's operations before the pass
    prefix = np.zeros(len(stage))
    length = np.zeros(len(stage))
    if tl is not None and len(stage):
        span = tl.end_s - tl.start_s
        rows, cols = np.nonzero(np.arange(span.shape[1]) < pos[:, None])
        np.add.at(before, (rows, op_units[stage[rows], cols]), 1.0)
        prefix = np.bincount(rows, span[stage[rows], cols], minlength=len(stage)
                             ).astype(float)
        length = span[stage, pos]
    passes = (stage, pos, prefix, length, op_units[stage, pos] if len(stage) else
              np.zeros(0, dtype=np.int64), before)
    if not stages:
        empty = np.zeros(0)
        return ((empty.astype(np.int64), empty, empty, empty),
                (empty.astype(np.int64), empty), passes)
    return ((np.concatenate(stages), np.concatenate(ready), np.concatenate(after_dp),
             np.concatenate(after_edp)), (np.concatenate(of_pass), np.concatenate(shares)),
            passes)


def _stage_runs(tl: Timeline, st: int, runs: list[tuple[str, int, int]],
                places: dict[tuple[int, int], int]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Stage ``st``'s buckets, run after run in ``runs`` (``(kind, count, pass place)``)
    on the timeline ``tl``: each one's ready time (seconds,
    :func:`~topomodel.analysis.training.buckets.ready_times_s`' float: ``begin + (i + 1)
    / count x (end - begin)``), whether it is a dp bucket, its share of its pass, its
    pass's number in ``places`` (numbered as met) and its place plus share, made for all
    runs at once (element by element the same operations as run by run)."""
    counts = np.array([n for _, n, _ in runs], dtype=np.int64)
    at_pass = np.array([pos for _, _, pos in runs], dtype=np.int64)
    number = np.array([places.setdefault((st, pos), len(places)) for _, _, pos in runs],
                      dtype=np.int64)
    is_dp = np.array([key == "dp" for key, _, _ in runs], dtype=bool)
    within = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    share = (within + 1) / np.repeat(counts, counts)
    begin, end = tl.start_s[st, at_pass], tl.end_s[st, at_pass]
    ready = np.repeat(begin, counts) + share * np.repeat(end - begin, counts)
    filled = np.repeat(at_pass.astype(float), counts) + share
    return (ready, np.repeat(is_dp, counts), share, np.repeat(number, counts), filled)


@dataclass(frozen=True, eq=False)
class Gathers:
    """A layout's ZeRO (stage 1-2) gathers of the updated weights before the next
    forward: the calls they time (indices into the screen's names) and how many of
    each per stage (calls, p); per stage the work unit of its first forward and that
    forward's comm-free duration, seconds."""

    call: np.ndarray
    count: np.ndarray
    first_unit: np.ndarray
    first_s: np.ndarray

    def delay_s(self, t: np.ndarray, per_unit: np.ndarray, overlap: bool) -> np.ndarray:
        """Per stage, how much later than its busy time it can end at least, seconds,
        for the calls' times ``t`` and each unit's exposed time ``per_unit``: the step
        starts a stage at ``ready = max(0, G - F1)`` (``G`` without ``overlap``), ``G``
        its gathers and ``F1`` its first forward, so the stage's first operation ends
        at ``max(F1, G)`` and the stage no earlier than ``max(F1, G)`` plus its other
        operations; each of ``G``, ``F1`` and the others is at least its figure here
        (``F1``: comm-free plus its exposure), so the stage ends at least ``busy +
        max(0, G - F1)`` after its first operation's start."""
        if not len(self.call):
            return np.zeros(len(self.first_s))
        gather = t[self.call] @ self.count
        if not overlap:
            return np.asarray(gather)
        return np.maximum(0.0, gather - (self.first_s + per_unit[self.first_unit]))


@dataclass(frozen=True, eq=False)
class Passes:
    """The passes that fill gradient buckets: stage, place in the stage's order, the
    comm-free durations of the stage's operations before it and its own (seconds), its
    work unit, each unit's operations before it (passes, units); per stage the place of
    its first forward; per bucket its pass and the share of it done when it is ready."""

    stage: np.ndarray
    pos: np.ndarray
    prefix_s: np.ndarray
    length_s: np.ndarray
    unit: np.ndarray
    before: np.ndarray
    first_forward: np.ndarray
    bucket_pass: np.ndarray
    bucket_share: np.ndarray

    def ready_s(self, comm_free_s: np.ndarray, per_unit: np.ndarray, delay_s: np.ndarray
                ) -> np.ndarray:
        """Per bucket, a time it cannot be ready before (with ``dp_overlap``), seconds:
        its comm-free ready time, or its pass's start, at least the stage's operations
        before it one after another (each comm-free plus its exposure ``per_unit``) and,
        after the stage's first forward, the gather's ``delay_s`` (see
        :meth:`Gathers.delay_s`), plus the pass's share done (the pass at least
        comm-free plus its exposure)."""
        start = self.prefix_s + self.before @ per_unit + np.where(
            self.pos > self.first_forward[self.stage], delay_s[self.stage], 0.0)
        length = self.length_s + per_unit[self.unit]
        at = self.bucket_pass
        return np.maximum(comm_free_s, start[at] + self.bucket_share * length[at])
