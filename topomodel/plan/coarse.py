"""A floor for a set of a cell's layouts, one per (EP, micro-batch): what lets a search
leave a whole set of families out of its first pass and its frontier.

The planner bounds every family (a layout without its rank order) of a cell with its
cheap bound (:func:`~topomodel.analysis.training.stepbound.busy_bound`, no collective
taking time) before anything else, and decides them best bound first
(:mod:`~topomodel.plan.search`). On a large MoE job (DeepSeek-V3 on 16k accelerators:
1.2 M families) that bound sits at about 0.9 of the best step for nearly every family,
so the first pass is spent on bounds that prune nothing, and the group floor
(:mod:`~topomodel.plan.groupfloor`) then has to drop the families one by one. A *set*
here is a cell's families with one EP and one micro-batch size (every schedule,
interleave, recomputation, ZeRO stage and sequence parallelism of them): its floor
puts the in-stage collectives at their unplaced lower bounds, and holds for every
family of the set, so a set whose floor cannot reach the top is pruned whole, its
families never bounded one by one.

**The floor.** For each (sequence parallelism, schedule, interleave) of the set's
families, its *representative*: that layout at ZeRO 0 without recomputation; its
in-stage collectives (:data:`IN_STAGE`: TP, CP and the experts' All-to-All) at their
unplaced floors (:func:`~topomodel.plan.groupfloor.unplaced_floor_calls`), no other
collective; the busiest stage's operations with them plus the wait
(:func:`~topomodel.analysis.training.stepbound.busy_bound`). The set's floor is the
lowest step (the best score) of its representatives.

**Proof.** Take a family ``f`` of the set, in any rank order, and ``r`` its
representative. The step of ``f`` is at least its busiest stage's busy time with its
collectives at their times in that order, plus the wait on its least compute
(:mod:`~topomodel.analysis.training.stepbound`: the busy bound); every operation's
duration and compute only grow with a collective's time (a call of ``t`` seconds adds
``max(t - behind, share x t) >= 0`` exposed seconds, at most ``t``, and its imbalance
term grows with ``t``: :class:`~topomodel.analysis.training.stagework.Work`), so with
each collective at its unplaced floor (no more than its time in any order) it is still
at least that. Then, operation by operation
(:func:`~topomodel.analysis.training.stagework.layer_work`, ``edge_work``):

- the collectives left out only lower the durations: the operations read ZeRO 3's
  gathers and scatters (each adds non-negative exposed time and no compute) and no
  other collective outside :data:`IN_STAGE` (the gradients' and the weights' over DP,
  the pipeline's sends, which the busy time does not hold);
- :data:`IN_STAGE`'s collectives are the same in ``f`` and ``r``, with the same sizes
  and communicators (:func:`~topomodel.analysis.training.stepcalls.issued_calls` reads
  for them the micro-batch, the sequence, TP, CP, EP and sequence parallelism, never the
  schedule, interleave, recomputation nor ZeRO), so the same unplaced floors;
- ZeRO is read by the operations only through ZeRO 3's collectives, left out; nor by
  the stages' split (:func:`~topomodel.analysis.training.stepshape.shape_of`);
- selective recomputation adds compute (the attention core's forward) and a CP gather
  to the backward pass and changes nothing else against none;
- full recomputation adds the layer's forward to its backward pass (its compute
  ``forward_s``, the sum of its GEMMs and more, and its collectives, none of which
  takes less than 0) and, with sequence parallelism, drops the backward's two
  all-gathers of the inputs (each adding at most ``t``, the TP all-gather's time): the
  forward's two all-gathers of the same call hide behind the QKV and first MLP GEMMs
  ``F1``, ``F2`` at most, so add at least ``t - F1`` and ``t - F2``, and with the
  compute ``forward_s >= F1 + F2`` the backward pass grows by at least ``2 t``, no
  less than what is dropped; its compute only grows;
- the wait is the same share (:func:`~topomodel.analysis.training.syncwait.sync_wait`
  reads the world) of the least compute of a stage, no less in ``f``.

So every stage's busy time and compute in ``r`` are no more than in ``f``, and the
floor of ``r`` no more than the step of ``f``; the set's floor, the least over its
representatives, no more than any of its families' steps. The scores the search ranks
by only fall as the step grows (:func:`~topomodel.plan.orderbounds.rank_score`; the
model FLOPs behind MFU do not read recomputation, nor the tokens, peak or power), so the
set's score is at least any of its layouts'. Floating point sums the stages in
another order than the step does: :data:`~topomodel.analysis.training.stepbound.
ROUNDING_MARGIN` covers it, as for every bound of the search.

With ``ep_overlap="dualpipe"`` an All-to-All's exposed time is clipped apart from the
operations' durations: no set floor is made there (the search bounds each family).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from topomodel.analysis.training.stagework import Call
from topomodel.analysis.training.stepbound import busy_bound, calls_busy_sums
from topomodel.analysis.training.stepshape import Shape
from topomodel.fabric.tables import Fabric
from topomodel.plan.groupfloor import unplaced_floor_calls
from topomodel.plan.orderbounds import OrderMemo, PlanJob, rank_score
from topomodel.traffic.layout import Layout, evolve

IN_STAGE = frozenset({"tp_ag", "tp_rs", "tp_ar", "cp_ag", "cp_rs", "ep"})
"""The step's collectives every family of a set issues alike (TP, CP, the experts'
All-to-All: :func:`~topomodel.analysis.training.stepcalls.issued_calls`) and its
operations' durations read; the floor times only these."""


@dataclass(frozen=True)
class Member:
    """A family of a set: its place (cell, layout of its first order), its fields but
    the order, the tops that hold it and its orders' count."""

    place: tuple[int, int]
    family: dict[str, Any]
    holders: tuple[int, ...]
    orders: int


@dataclass(frozen=True, eq=False)
class Coarse:
    """A set of a cell's families (one EP, one micro-batch) in a search's frontier: the
    best score any of its layouts can reach (:func:`set_score`), the place of its first
    family, its families (valid, timeable, in listing order) and what the search keeps
    for the cell (``cell``: decided when the set is expanded)."""

    bound: float
    place: tuple[int, int]
    members: tuple[Member, ...]
    cell: Any

    @property
    def holders(self) -> tuple[int, ...]:
        """The tops that hold any of its families."""
        return tuple(sorted({h for m in self.members for h in m.holders}))

    def counts(self) -> list[tuple[tuple[int, ...], int]]:
        """(holders, layouts) of each family, for counting them pruned."""
        return [(m.holders, m.orders) for m in self.members]


def set_key(family: dict[str, Any]) -> tuple[Any, ...]:
    """The set of a cell a family belongs to: its EP and micro-batch size."""
    return (family["ep"], family["micro_batch"])


def representative(layout: Layout) -> Layout:
    """The layout whose floor stands for ``layout`` in its set: at ZeRO 0 without
    recomputation (see the module)."""
    if layout.zero == 0 and layout.recompute == "none":
        return layout
    return evolve(layout, zero=0, recompute="none")


def set_score(fabric: Fabric, job: PlanJob, layouts: Iterable[tuple[Layout, Shape]],
              power_W: float, memo: OrderMemo) -> float:
    """The best score any rank order of any of ``layouts`` (one set's valid families,
    each with its shape) can reach (see the module): inf where a floor is not a number
    (no power: never pruned) or a layout runs DualPipe."""
    best = -float("inf")
    seen: set[tuple[Any, ...]] = set()
    calls: dict[bool, dict[str, Call]] = {}
    for layout, shape in layouts:
        if layout.ep_overlap == "dualpipe":
            return float("inf")
        rep = representative(layout)
        key = (rep.sequence_parallel, rep.schedule, rep.interleave)
        if key in seen:
            continue
        seen.add(key)
        found = calls.get(rep.sequence_parallel)
        if found is None:
            found = calls[rep.sequence_parallel] = in_stage_floors(fabric, job, rep, shape,
                                                                   memo)
        floor = busy_bound(job.model, rep, job.assumptions, shape,
                           calls_busy_sums(job.model, rep, job.assumptions, shape, found))
        score = rank_score(floor, job, power_W)
        if score != score:  # NaN (no power)
            return float("inf")
        best = max(best, score)
    return best


def in_stage_floors(fabric: Fabric, job: PlanJob, layout: Layout, shape: Shape,
                    memo: OrderMemo) -> dict[str, Call]:
    """``layout``'s :data:`IN_STAGE` collectives each at its unplaced floor (kept in
    ``memo`` with the rest of its collectives' floors, as the group floor keeps them)."""
    return {name: call for name, call in
            unplaced_floor_calls(fabric, job, layout, shape, memo).items()
            if name in IN_STAGE}


def set_entries(fabric: Fabric, job: PlanJob,
                sets: Iterable[Sequence[tuple[Member, Layout, Shape]]], power_W: float,
                memo: OrderMemo, cell: Any) -> list[Coarse]:
    """The frontier entries of a cell's ``sets``, each its members (in listing order)
    with the layouts and shapes they were found valid as, at the set's score."""
    return [Coarse(set_score(fabric, job, [(layout, shape) for _, layout, shape in members],
                             power_W, memo), members[0][0].place,
                   tuple(m for m, _, _ in members), cell)
            for members in sets]
