"""A floor for a set of a cell's layouts, one per (EP, micro-batch): what lets a search
leave a whole set of families out of its first pass and its frontier.

The planner bounds every family (a layout without its rank order) of a cell with its
cheap bound (:func:`~topomodel.analysis.training.stepbound.busy_bound`, no collective
taking time) before anything else, and decides them best bound first
(:mod:`~topomodel.plan.search`). On a large MoE job (DeepSeek-V3 on 16k accelerators:
1.2 M families) that bound sits at about 0.9 of the best step for nearly every family,
so the first pass is spent on bounds that prune nothing, and the search then has to
drop the families one by one. A *set*
here is a cell's families with one EP and one micro-batch size (every schedule,
interleave, recomputation, ZeRO stage and sequence parallelism of them): its floor
puts the in-stage collectives at their unplaced lower bounds, and holds for every
family of the set, so a set whose floor cannot reach the top is pruned whole, its
families never bounded one by one.

**The floor.** For each (sequence parallelism, schedule, interleave) of the set's
families, its *representative*: that layout at ZeRO 0 without recomputation; its
in-stage collectives (:data:`IN_STAGE`: TP, CP and the experts' All-to-All) at what
none of the cell's rank orders beats (:func:`~topomodel.plan.orderbounds.unplaced_floor_calls`
over them: the unplaced floors raised by the latency of the spans their communicators
take in those orders, :func:`~topomodel.plan.callfloors.spanned_calls`), no other
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
each collective at its floor (no more than its time in any of the cell's orders, the
only ones searched) it is still at least that. Then, operation by operation
(:func:`~topomodel.analysis.training.stagework.layer_work`, ``edge_work``):

- the collectives left out only lower the durations: the operations read ZeRO 3's
  gathers and scatters (each adds non-negative exposed time and no compute) and no
  other collective outside :data:`IN_STAGE` (the gradients' and the weights' over DP,
  the pipeline's sends, which the busy time does not hold);
- :data:`IN_STAGE`'s collectives are the same in ``f`` and ``r``, with the same sizes
  and communicators (:func:`~topomodel.analysis.training.stepcalls.issued_calls` reads
  for them the micro-batch, the sequence, TP, CP, EP and sequence parallelism, never the
  schedule, interleave, recomputation nor ZeRO), so the same floors;
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

**Making the sets** costs no work per family (:func:`cell_sets`, :func:`search_sets`):
a cell's families are the product of a few lists (:class:`~topomodel.plan.space.
FamilyAxes`), and validity, the router's limit and the tops holding a family are
decided per (set, schedule, interleave) where they cannot differ within it; a set's
families are made only if it is expanded (:attr:`Coarse.members`). At 98k accelerators
the whole space of DeepSeek-V3 holds 2.0 M families in 15,189 sets.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from topomodel.analysis.training.stagework import Call
from topomodel.analysis.training.stepbound import busy_bound, calls_busy_sums
from topomodel.analysis.training.stepshape import Shape
from topomodel.errors import UsageError
from topomodel.fabric.tables import Fabric
from topomodel.inputs.records import check_values
from topomodel.plan.groups import UNSHAPED, CellMemo, valid_family
from topomodel.plan.orderbounds import OrderMemo, PlanJob, rank_score, unplaced_floor_calls
from topomodel.plan.space import Cell, FamilyAxes, PlanSpace, cell_axes, cell_orders
from topomodel.plan.tally import Tally, over_limit
from topomodel.plan.tops import Tops
from topomodel.traffic.layout import Layout, evolve


class SearchJob(PlanJob, Protocol):
    """What :func:`search_sets` reads of a plan's job: the bounds' and the space."""

    @property
    def space(self) -> PlanSpace: ...


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


@dataclass(frozen=True)
class Block:
    """A set's valid, timeable families with one schedule and interleave: the cell's
    index of the first family with them (:func:`~topomodel.plan.space.cell_families`),
    the (schedule, interleave), the kept families' places after that first (in the
    product of the cell's recomputations, ZeRO stages and sequence parallelism,
    :class:`~topomodel.plan.space.FamilyAxes`) and the tops that hold each."""

    first: int
    pipe: tuple[str, int]
    kept: tuple[int, ...]
    holders: tuple[tuple[int, ...], ...]


@dataclass(frozen=True, eq=False)
class Coarse:
    """A set of a cell's families (one EP, one micro-batch) in a search's frontier: the
    best score any of its layouts can reach (:func:`set_score`), the place of its first
    family, its families (valid, timeable, in listing order: ``blocks`` of the cell's
    ``axes``, each family's orders ``orders``) and what the search keeps for the cell
    (``cell``: decided when the set is expanded). Its families are made only when it is
    expanded (:attr:`members`)."""

    bound: float
    place: tuple[int, int]
    axes: FamilyAxes
    key: tuple[int, int]  # (EP, micro-batch)
    blocks: tuple[Block, ...]
    orders: int
    cell: Any

    @functools.cached_property
    def holders(self) -> tuple[int, ...]:
        """The tops that hold any of its families."""
        return tuple(sorted({h for b in self.blocks for hs in b.holders for h in hs}))

    def counts(self) -> list[tuple[tuple[int, ...], int]]:
        """(holders, layouts) of its families, for counting them pruned."""
        return [(hs, self.orders) for b in self.blocks for hs in b.holders]

    @property
    def members(self) -> Iterator[Member]:
        """Its families, in listing order."""
        unshaped = _unshaped(self.axes)
        ep, mb = self.key
        for b in self.blocks:
            for w, hs in zip(b.kept, b.holders, strict=True):
                yield Member((self.place[0], (b.first + w) * self.orders),
                             self.axes.family(ep, mb, b.pipe, unshaped[w]), hs,
                             self.orders)


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
              power_W: float, memo: OrderMemo, orders: Sequence[str] = ()) -> float:
    """The best score any rank order of any of ``layouts`` (one set's valid families,
    each with its shape) can reach (of ``orders``, where given: the in-stage
    collectives then at what none of those beats), see the module: inf where a floor
    is not a number (no power: never pruned) or a layout runs DualPipe."""
    best = -float("inf")
    seen: set[tuple[Any, ...]] = set()
    calls: dict[bool, dict[str, Call]] = {}
    for layout, shape in layouts:
        if layout.ep_overlap == "dualpipe":
            return float("inf")
        key = (layout.sequence_parallel, layout.schedule, layout.interleave)
        if key in seen:  # the representative keeps them
            continue
        seen.add(key)
        rep = representative(layout)
        found = calls.get(rep.sequence_parallel)
        if found is None:
            found = calls[rep.sequence_parallel] = in_stage_floors(fabric, job, rep, shape,
                                                                   memo, orders)
        floor = busy_bound(job.model, rep, job.assumptions, shape,
                           calls_busy_sums(job.model, rep, job.assumptions, shape, found))
        score = rank_score(floor, job, power_W)
        if score != score:  # NaN (no power)
            return float("inf")
        best = max(best, score)
    return best


def in_stage_floors(fabric: Fabric, job: PlanJob, layout: Layout, shape: Shape,
                    memo: OrderMemo, orders: Sequence[str] = ()) -> dict[str, Call]:
    """``layout``'s :data:`IN_STAGE` collectives each at its unplaced floor (with
    ``orders``, at what none of those rank orders beats; kept in ``memo`` with the
    rest of its collectives' floors, as its order bounds keep them)."""
    return {name: call for name, call in
            unplaced_floor_calls(fabric, job, layout, shape, memo, orders,
                                 IN_STAGE).items()
            if name in IN_STAGE}


def _unshaped(axes: FamilyAxes) -> list[tuple[str, int, bool]]:
    """The (recomputation, ZeRO, sequence parallelism) of a cell's families with one
    schedule and interleave, in listing order."""
    return list(itertools.product(axes.recomputes, axes.zeros, axes.sps))


@functools.lru_cache(maxsize=64)
def _unshaped_pass(recompute: str, zero: int, sequence_parallel: bool) -> bool:
    """Whether those values pass :class:`~topomodel.traffic.layout.Layout`'s checks of
    each field: then setting them on a valid layout gives a valid one (the rules across
    fields read none of them: :func:`~topomodel.traffic.layout.evolve`)."""
    try:
        check_values(Layout, {"recompute": recompute, "zero": zero,
                              "sequence_parallel": sequence_parallel}, UsageError)
    except UsageError:
        return False
    return True


def cell_sets(fabric: Fabric, job: PlanJob, ci: int, axes: FamilyAxes, cell: CellMemo,
              tops: Tops, power_W: float, memo: OrderMemo) -> tuple[list[Coarse], int]:
    """The frontier entries of cell ``ci``'s sets (its families ``axes``), each at its
    floor, and the layouts decided here: every family counted searched, and invalid or
    over the router's limit, in each top that holds it (``tops``), as a search without
    sets counts it.

    A set's families are decided one (schedule, interleave) at a time, not one by one:
    those differing only in the :data:`~topomodel.plan.groups.UNSHAPED` fields share
    their shaped stem (:func:`~topomodel.plan.groups.valid_family`), so where those
    values pass the layout's field checks (:func:`_unshaped_pass`, no rule across fields
    reading them) they are valid or invalid together, for the same reason (the one-step
    ``evolve`` checks the fields in the layout's order, and none of theirs refuses);
    where not, each is decided alone. The router's limit reads the layout's EP and
    world only (:func:`~topomodel.plan.tally.over_limit`), the same for the whole set.
    The tops holding each family are found once per (schedule, interleave) where no
    family reads those fields (:meth:`~topomodel.plan.tops.Tops.alike_without`)."""
    n = len(cell.orders)
    unshaped = _unshaped(axes)
    alike = tops.alike_without(UNSHAPED)
    together = all(_unshaped_pass(*u) for u in unshaped)
    out: list[Coarse] = []
    first = decided = 0
    if not unshaped:  # a field with no value left: no family
        return out, decided
    for ep in axes.eps:
        for mb in axes.micro:
            blocks: list[Block] = []
            reps: list[tuple[Layout, Shape]] = []
            refused: str | None = None
            limit_read = False
            for pipe in axes.pipes:
                families = [axes.family(ep, mb, pipe, u) for u in (
                    unshaped[:1] if alike and together else unshaped)]
                holders = ((tops.holders(families[0]),) * len(unshaped) if alike
                           else tuple(tops.holders(f) for f in families))
                _count(tops, holders, "searched", n)
                if together:
                    reason, layout, shape = valid_family(fabric, job, families[0], cell)
                    found = [(reason, layout, shape)] * len(unshaped)
                else:
                    found = [valid_family(fabric, job, f, cell) for f in families]
                kept: list[int] = []
                for w, (reason, layout, shape) in enumerate(found):
                    if layout is None or shape is None:
                        tops.count(holders[w], "invalid", n, reason)
                        decided += n
                        continue
                    if not limit_read:
                        refused = over_limit(fabric, job.model, layout, job.routing)
                        limit_read = True
                    if refused:
                        tops.count(holders[w], "over_limit", n)
                        decided += n
                        continue
                    kept.append(w)
                    if together and w == 0:
                        reps.extend((evolve(layout, zero=0, recompute="none",
                                            sequence_parallel=sp), shape)
                                    for sp in axes.sps)
                    elif not together:
                        reps.append((layout, shape))
                if kept:
                    if together:
                        kept = list(range(len(unshaped)))
                    blocks.append(Block(first, pipe, tuple(kept),
                                        tuple(holders[w] for w in kept)))
                first += len(unshaped)
            if blocks:
                b = blocks[0]
                out.append(Coarse(set_score(fabric, job, reps, power_W, memo,
                                            cell.orders),
                                  (ci, (b.first + b.kept[0]) * n), axes, (ep, mb),
                                  tuple(blocks), n, cell))
    return out, decided


def search_sets(fabric: Fabric, job: SearchJob, cells: Sequence[Cell], indices: Iterable[int],
                tops: Tops, power_W: float, memo: OrderMemo) -> tuple[list[Coarse], int]:
    """The frontier entries of the sets of the cells ``indices`` (places in ``cells``),
    in their order, and the layouts decided making them (:func:`cell_sets`, counted in
    ``tops``).

    The cells are taken by pipeline depth and DP degree, and the schedules their shapes
    read are held until the depth changes: every micro-batch of one cell runs a schedule
    that cells of the same depth with another TP x CP split run again (DP x micro-batch
    sets the microbatches), and a schedule no longer held is built again, its operations'
    row sums numbered again (:func:`~topomodel.analysis.training.stepshape.
    cached_schedule`). Each cell is counted apart and the counts added in the cells'
    order, so a top's counts, and the order of its reasons, are those of the cells taken
    in order; the entries are returned in that order too."""
    order = list(indices)
    at = {ci: k for k, ci in enumerate(order)}
    counted: dict[int, list[Tally]] = {}
    entries: list[Coarse] = []
    decided = 0
    held: dict[int, Any] = {}  # the schedules of the current depth, by id
    depth = 0
    for ci in sorted(order, key=lambda i: (cells[i].pp, cells[i].dp, at[i])):
        c = cells[ci]
        if c.pp != depth:
            held, depth = {}, c.pp
        cell = CellMemo(cell_orders(c, job.space))
        axes = cell_axes(job.model, c, job.base, job.space)
        if axes is not None:
            own = Tops(tops.top, tops.families)
            made, done = cell_sets(fabric, job, ci, axes, cell, own, power_W, memo)
            entries.extend(made)
            decided += done
            counted[ci] = own.tallies
        for _, shape, _ in cell.shaped.values():
            if shape is not None:
                schedule = shape.schedule
                held[id(schedule)] = schedule
        # made again for the few sets expanded (groups hold their own shapes)
        cell.valid.clear()
        cell.shaped.clear()
    for ci in order:
        for total, part in zip(tops.tallies, counted.get(ci, ()), strict=False):
            total.add(part)
    entries.sort(key=lambda e: (at[e.place[0]], e.place))
    return entries, decided


def _count(tops: Tops, holders: Sequence[tuple[int, ...]], what: str, orders: int) -> None:
    """Count each family's ``orders`` layouts as ``what`` in its holders, those with the
    same holders together."""
    by: dict[tuple[int, ...], int] = {}
    for hs in holders:
        by[hs] = by.get(hs, 0) + orders
    for hs, layouts in by.items():
        tops.count(hs, what, layouts)
