"""The search of a plan: every layout of the space through the step model's own checks,
memory and step time on the fabric, the best kept.

Each layout costs, in order, what it takes to decide it:

1. **valid?** The layout is built and checked as the step model checks it
   (:func:`~topomodel.analysis.training.step.layout_memory`: sizes that divide, a schedule that
   runs); a ``UsageError`` discards it as invalid.
   **can it be timed?** A layout whose traffic is above one of the router's limits
   (a direct All-to-All the router would list beyond ``limits.MAX_FLOWS``) is skipped
   and counted, from counts, before anything of it is built
   (:func:`~topomodel.plan.tally.over_limit`; why skipping and not failing, there):
   the best of a plan is the best the model can time.
2. **fits?** The same call gives every pipeline stage's memory; a layout that needs
   more than the accelerator's HBM, less the headroom, is discarded without timing.
3. **can it win?** Every rank order of a layout shares a bound
   (:func:`~topomodel.analysis.training.stepbound.step_bound`): a step time none of them can
   beat, from the step with every collective taking no time, without routing. The
   layouts that fit are taken best bound first; once the job's ``top`` layouts are
   found and a layout's bound is worse than the last of them, it and every layout
   after it are pruned: none could enter the top, so the top is the unpruned search's.
   A layout's bound is tightened when it comes first (its timeline's, with the
   pipeline's bubble, then every order's at once with each collective at what no
   placement beats: :func:`_best_first`), and it goes back in its place.
   Each rank order then gets its own bound from its collective times, those known and,
   for the rest, what they cannot beat on their placement
   (:func:`~topomodel.plan.callfloors.order_calls`): first the screen, arithmetic on
   the layout's comm-free pipeline (:mod:`~topomodel.analysis.training.orderscreen`), then, if
   that cannot drop it and something is not timed yet, its own timeline
   (:func:`~topomodel.analysis.training.stepbound.bound_with_calls`); it is pruned, neither
   routed nor modelled, when its bound cannot reach the top either, nor beat the
   variant of its layout the top already holds (:func:`entry_bar`).
4. **how fast?** :func:`~topomodel.analysis.training.step.step_time` models its step. Its
   collective times are kept with the fabric
   (:func:`~topomodel.analysis.training.step.collective_times`), keyed by the communicators,
   size and algorithms, so a layout whose collectives an earlier one already timed
   costs arithmetic, not routing: the planner shares work without a model of its own,
   and its numbers are the step's.

Ties keep the layout listed first (the place in the listing, not the order of
evaluation, breaks them), so the result does not depend on how the search was split
over processes.

Before any of that, a cell's families (its layouts without their order) wait in sets,
one per (EP, micro-batch), each at a floor that holds for all of them
(:mod:`~topomodel.plan.coarse`): a set is pruned whole, its families never bounded one
by one, unless it comes first, when its families enter the frontier at their own bounds.

A search can keep, beside the whole space's top, the top of named families within it
(the scorecard's strategy families: :mod:`~topomodel.plan.tops`): one pass, each
layout pruned only where it can enter none of the tops that hold it.
"""

from __future__ import annotations

import functools
import heapq
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from topomodel.analysis.assumptions import CostAssumptions
from topomodel.analysis.training.step import (
    StepAssumptions,
    StepResult,
    layout_memory,
    step_time,
)
from topomodel.analysis.training.stepbound import (
    step_bound,
)
from topomodel.analysis.training.stepcalls import keeping_groups
from topomodel.errors import FlowLimit, ParameterError, UsageError
from topomodel.fabric.tables import Fabric
from topomodel.heap import quiet_collector
from topomodel.inputs.parts import Model
from topomodel.inputs.records import check_share
from topomodel.plan.coarse import Coarse, search_sets
from topomodel.plan.groups import CellMemo, Group, group_of
from topomodel.plan.orderbounds import (
    OrderBounds,
    OrderMemo,
    in_order,
    order_problem,
    rank_score,
)
from topomodel.plan.orderbounds import objective_value as objective_value
from topomodel.plan.power import fabric_power_W, fabric_USD_per_h
from topomodel.plan.space import OBJECTIVES as OBJECTIVES
from topomodel.plan.space import Cell, PlanSpace, cell_families, cell_orders, cells
from topomodel.plan.tally import Tally as Tally
from topomodel.plan.tally import over_limit
from topomodel.plan.tops import VARIANTS as VARIANTS
from topomodel.plan.tops import Family, FamilyTop, Ranked, Tops, keep_distinct
from topomodel.plan.tops import distinct_key as distinct_key
from topomodel.plan.tops import entry_bar as entry_bar
from topomodel.traffic.layout import Layout


@dataclass(frozen=True)
class PlanJob:
    """What a plan needs besides the fabric: the model, the base layout (the fields the
    space does not search), the space, the step assumptions and what to rank by."""

    model: Model
    base: Layout
    space: PlanSpace
    assumptions: StepAssumptions = field(default_factory=StepAssumptions)
    objective: str = "tokens_per_s"
    top: int = 5
    headroom: float = 0.0  # share of the HBM left free, 0-1
    routing: str = "ecmp"
    seed: int = 0
    accelerators: int = 0  # the job's size; 0: every accelerator of the fabric
    cost: CostAssumptions = field(default_factory=CostAssumptions)  # cost_per_token's

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ParameterError("objective", f"choose from {', '.join(OBJECTIVES)}, got"
                                              f" {self.objective!r}")
        check_share(self.headroom, "headroom", high_open=True)
        if self.top < 1:
            raise ParameterError("top", f"at least 1, got {self.top}")
        if self.accelerators < 0:
            raise ParameterError("accelerators", f"at least 1, got {self.accelerators}")


@dataclass(frozen=True)
class PlanPart:
    """The outcome of searching some cells: the counts and the best layouts."""

    tally: Tally
    best: tuple[Ranked, ...]  # best first
    families: tuple[PlanPart, ...] = ()  # each asked family's (search_cells), in order


@dataclass(frozen=True)
class Verdict:
    """How one layout was decided: ``invalid`` (with the reason), ``no_fit``, ``fits``
    (not timed yet) or ``evaluated`` (with its step)."""

    status: str
    reason: str = ""
    result: StepResult | None = None


def check(fabric: Fabric, job: PlanJob, layout_fields: dict[str, Any], *,
          memory: dict[tuple[Any, ...], Any] | None = None) -> Verdict:
    """Whether one layout (``layout_fields`` set on the job's base layout) is valid and
    fits, as the search decides it before timing anything: ``invalid`` (with the
    reason), ``no_fit`` or ``fits``. ``memory`` keeps the last check by every field but
    the order (the rank order changes neither validity nor memory, and the space lists
    orders one after the other)."""
    key = tuple(v for k, v in layout_fields.items() if k != "order")
    checked = memory.get(key) if memory is not None else None
    if checked is None:
        try:
            layout = replace(job.base, **layout_fields)
        except UsageError as exc:
            return Verdict("invalid", str(exc))
        try:
            checked = layout_memory(fabric, job.model, layout, job.assumptions)
        except UsageError as exc:
            checked = str(exc)
        if memory is not None:
            memory.clear()
            memory[key] = checked
    elif "order" in layout_fields:  # the other fields made a layout: only the order is new
        problem = order_problem(str(layout_fields["order"]))
        if problem:
            return Verdict("invalid", problem)
    if isinstance(checked, str):
        return Verdict("invalid", checked)
    if not checked.fits(job.headroom):
        return Verdict("no_fit")
    return Verdict("fits")


def assess(fabric: Fabric, job: PlanJob, layout_fields: dict[str, Any], *,
           memory: dict[tuple[Any, ...], Any] | None = None) -> Verdict:
    """Decide one layout as the search does without a bound: :func:`check`, then, if
    it fits, its step (``evaluated``)."""
    verdict = check(fabric, job, layout_fields, memory=memory)
    if verdict.status != "fits":
        return verdict
    result = step_time(fabric, job.model, replace(job.base, **layout_fields),
                       job.assumptions, routing=job.routing, seed=job.seed)
    return Verdict("evaluated", result=result)


@quiet_collector()  # its caches scanned by fewer full passes of the collector
def search_cells(fabric: Fabric, job: PlanJob, indices: Iterable[int], *,
                 power_W: float = 0.0, progress: Callable[[int], None] | None = None,
                 prune: bool = True, families: Sequence[Family] = (),
                 sets: bool = True) -> PlanPart:
    """:func:`_search`, with the communicators its steps check kept on ``fabric`` while
    it runs (:func:`~topomodel.analysis.training.stepcalls.keeping_groups`)."""
    with keeping_groups(fabric):
        return _search(fabric, job, indices, power_W=power_W, progress=progress,
                       prune=prune, families=families, sets=sets)


def _search(fabric: Fabric, job: PlanJob, indices: Iterable[int], *, power_W: float,
            progress: Callable[[int], None] | None, prune: bool,
            families: Sequence[Family], sets: bool) -> PlanPart:
    """Search every layout of the cells ``indices`` (places in :func:`plan_cells`);
    ``progress(n)`` is told of every n layouts decided. With ``prune`` (default), the
    layouts that fit are modelled best bound first and those whose bound cannot reach
    the top are skipped; without it, every layout that fits is modelled (the same top,
    slower). ``families`` (:class:`~topomodel.plan.tops.Family`, parts of the job's
    space) each get a top and counts of their own in the same pass
    (:mod:`~topomodel.plan.tops`), in the part's ``families``. With ``sets`` (default)
    and ``prune``, a cell's families wait in sets, one per (EP, micro-batch), each at a
    floor for all of them (:mod:`~topomodel.plan.coarse`), bounded one by one only when
    their set comes first (the same top; families of a pruned set that do not fit are
    counted pruned, not ``no_fit``)."""
    all_cells = plan_cells(fabric, job)
    tops = Tops(job.top, families)
    pending = 0

    def decided(n: int) -> None:
        nonlocal pending
        pending += n
        if progress is not None and pending >= 64:
            progress(pending)
            pending = 0

    def evaluate(place: tuple[int, int], layout: Layout, holders: tuple[int, ...]) -> None:
        try:
            result = step_time(fabric, job.model, layout, job.assumptions,
                               routing=job.routing, seed=job.seed)
        except FlowLimit:  # refused before listing: skipped and counted (plan.tally)
            tops.count(holders, "over_limit", 1)
            return
        tops.count(holders, "evaluated", 1)
        # the negated place makes an earlier layout rank above a later one
        tops.keep(holders, Ranked(rank_score(result, job, power_W), (-place[0], -place[1]),
                                  result))

    groups: list[tuple[Group | Coarse, tuple[int, ...]]] = []
    memo = OrderMemo()  # the bounds' shared collectives and screens
    if sets and prune and job.base.ep_overlap != "dualpipe":  # (plan.coarse)
        # valid and timeable families wait in their sets, unbounded
        entries, done = search_sets(fabric, job, all_cells, indices, tops, power_W, memo)
        groups.extend((entry, entry.holders) for entry in entries)
        decided(done)
        indices = ()
    for ci in indices:
        cell = CellMemo(cell_orders(all_cells[ci], job.space))
        n = len(cell.orders)
        for u, family in enumerate(cell_families(job.model, all_cells[ci], job.base,
                                                 job.space)):
            holders = tops.holders(family)
            tops.count(holders, "searched", n)
            reason, group = group_of(fabric, job, (ci, u * n), family, power_W, cell)
            if group is None:
                tops.count(holders, "invalid", n, reason)
            elif over_limit(fabric, job.model, group.stand_in, job.routing):
                # the same traffic for all its orders and ZeRO stages (the limit reads
                # world and EP): none built, and no layout of its own made and kept
                tops.count(holders, "over_limit", n)
            elif prune:
                groups.append((group, holders))
                continue  # decided when reached
            elif not group.fits(job):
                tops.count(holders, "no_fit", n)
            else:
                for k, fields_ in group.members:
                    evaluate((ci, k), replace(job.base, **fields_), holders)
            decided(n)
    _best_first(fabric, job, groups, power_W, tops, decided, evaluate, memo)
    if progress is not None and pending:
        progress(pending)
    return PlanPart(tops.tallies[0], tops.best(0),
                    tuple(PlanPart(tops.tallies[h], tops.best(h))
                          for h in range(1, len(tops.heaps))))


GROUP, ORDERS, SET = range(3)
"""A frontier entry of :func:`_best_first`: a group at its cheap bound; at its
timeline's bound too (its orders bounded and modelled when it comes first); or a
set of a cell's groups at its floor (:mod:`~topomodel.plan.coarse`; its groups bounded
and pushed when it comes first)."""


def _wait(waiting: list[int], holders: tuple[int, ...], change: int) -> None:
    """Count an entry in (``change`` 1) or out of (-1) each of its tops' waiting."""
    for h in holders:
        waiting[h] += change


def _first_stage(item: Group | Coarse) -> int:
    """The stage a frontier entry starts at: a set's, or a group's cheap bound."""
    return SET if isinstance(item, Coarse) else GROUP


def _counts(item: Group | Coarse, holders: tuple[int, ...],
            frontier: Iterable[tuple[Any, ...]] = ()) -> list[tuple[tuple[int, ...], int]]:
    """(holders, layouts) of a frontier entry's families and of every entry of
    ``frontier`` (:func:`_best_first`'s), for counting them pruned."""
    out = item.counts() if isinstance(item, Coarse) else [(holders, len(item.orders))]
    for entry in frontier:
        out.extend(_counts(entry[4], entry[5]))
    return out


def _best_first(fabric: Fabric, job: PlanJob,
                groups: list[tuple[Group | Coarse, tuple[int, ...]]], power_W: float,
                tops: Tops, decided: Callable[[int], None],
                evaluate: Callable[[tuple[int, int], Layout, tuple[int, ...]], None],
                memo: OrderMemo) -> None:
    """Decide ``groups`` (each with the tops that hold it, :class:`~topomodel.plan.
    tops.Tops`) best bound first, tightening a bound only when it comes first:
    a frontier (a max-heap by the best score an entry's bound allows, ties by place)
    holds each group at its cheap bound; popped, a group that fits is pushed back at
    the lower of that and its timeline's bound (the pipeline's bubble included:
    :func:`~topomodel.analysis.training.stepbound.step_bound`); popped again, each of
    its rank orders is bounded against its tops (when full) and modelled unless
    pruned. Each bound holds for every order of the group, so the lower of them does
    too, and a timeline is run only for the groups whose cheap bound comes first.
    A popped entry whose bound is below the last of every top that holds it is
    pruned; once the first entry's bound is below the last of every top with entries
    left (:meth:`~topomodel.plan.tops.Tops.floor`), every
    entry's is, and all are pruned: the same tops as deciding them all (ties rank by
    place, not by when they were modelled). The groups are modelled in the order of
    the tighter bound, so a pipeline whose cheap bound (its busiest stage, no bubble)
    is high but whose timeline is not fills the top only after the layouts that can
    beat it."""
    frontier: list[tuple[float, tuple[int, int], int, int, Any, tuple[int, ...]]] = []
    tie = 0
    waiting = tops.waiting

    def push(score: float, place: tuple[int, int], stage: int, item: Group | Coarse,
             holders: tuple[int, ...]) -> None:
        nonlocal tie
        tie += 1
        heapq.heappush(frontier, (-score, place, tie, stage, item, holders))
        _wait(waiting, holders, 1)

    def pruned(item: Group | Coarse, holders: tuple[int, ...]) -> None:
        decided(tops.prune_all(_counts(item, holders)))

    for group, holders in groups:
        push(group.bound, group.place, _first_stage(group), group, holders)
    while frontier:
        neg, place, _, stage, item, holders = heapq.heappop(frontier)
        if -neg < tops.floor():  # the first has the best bound: none can do better
            decided(tops.prune_all(_counts(item, holders, frontier)))
            return
        _wait(waiting, holders, -1)
        if -neg < tops.bar(holders):  # below the last of every top that holds it
            pruned(item, holders)
            continue
        if stage == SET:  # its groups, each at its cheap bound (as without sets)
            _expand(fabric, job, item, power_W, push)
        elif stage == GROUP:
            if not item.fits(job):  # asked only of the groups the bound cannot prune
                tops.count(holders, "no_fit", len(item.orders))
                decided(len(item.orders))
                continue
            tight = _timeline_score(job, item, power_W)
            if tight < tops.entry_bar(holders, distinct_key(item.layout)):
                pruned(item, holders)  # no order can enter a top
                continue
            push(min(-neg, tight), place, ORDERS, item, holders)  # orders when first
        else:
            bounds = OrderBounds(fabric, job, item.layout, item.shape,
                                 functools.partial(item.pipeline, job), power_W, memo)
            first = in_order(item.layout, item.orders[0])  # its calls kept for its bound
            key = distinct_key(item.layout)  # the same for all its orders
            bar = tops.entry_bar(holders, key)
            if bar > -float("inf") and bounds.unplaced_score(first, bar, item.orders) < bar:
                pruned(item, holders)  # no order can enter a top
                continue
            for k, fields_ in item.members:
                layout = in_order(item.layout, fields_["order"])
                bar = tops.entry_bar(holders, key)
                if bar > -float("inf") and bounds.best_score(layout, bar) < bar:
                    tops.count(holders, "pruned", 1)
                else:
                    evaluate((place[0], k), layout, holders)
                decided(1)


def _timeline_score(job: PlanJob, group: Group, power_W: float) -> float:
    """The best score the group's timeline allows
    (:func:`~topomodel.analysis.training.stepbound.step_bound`)."""
    return rank_score(step_bound(job.model, group.layout, job.assumptions, group.shape,
                                 group.pipeline(job)), job, power_W)


def _expand(fabric: Fabric, job: PlanJob, entry: Coarse, power_W: float,
            push: Callable[[float, tuple[int, int], int, Group, tuple[int, ...]], None]
            ) -> None:
    """Push the groups of a set (:mod:`~topomodel.plan.coarse`) into the frontier,
    each with the tops that hold it at the lower of its cheap bound (as the search
    without sets bounds them, :func:`group_of`) and the set's floor (which holds for
    every family of the set)."""
    for m in entry.members:
        _, group = group_of(fabric, job, m.place, m.family, power_W, entry.cell)
        assert group is not None  # found valid before its set was made
        push(min(group.bound, entry.bound), m.place, GROUP, group, m.holders)


def merge(parts: Sequence[PlanPart], top: int) -> PlanPart:
    """The parts of one search as one: counts added, the ``top`` best of all."""
    tally = Tally()
    for part in parts:
        tally.add(part.tally)
    heap: list[Ranked] = []
    for ranked in sorted((r for part in parts for r in part.best), reverse=True):
        keep_distinct(heap, ranked, top)
    families = tuple(merge([part.families[h] for part in parts], top)
                     for h in range(len(parts[0].families) if parts else 0))
    return PlanPart(tally, tuple(sorted(heap, reverse=True)), families)


def plan_cells(fabric: Fabric, job: PlanJob) -> list[Cell]:
    """The cells of the job's space on its accelerators (``job.accelerators``, or all
    of ``fabric``'s), in search order (workers search them by index)."""
    return cells(job.model, job_world(fabric, job), job.space, job.base)


def job_world(fabric: Fabric, job: PlanJob) -> int:
    """The accelerators the job's layouts use: ``job.accelerators`` or every one of
    ``fabric``'s.

    Raises
    ------
    ParameterError
        When the job asks for more accelerators than the fabric has.
    """
    if job.accelerators > fabric.accelerator_count:
        raise ParameterError("accelerators", f"{job.accelerators:,} is more than the"
                             f" design's {fabric.accelerator_count:,}")
    return job.accelerators or fabric.accelerator_count


@dataclass(frozen=True)
class PlanResult:
    """A finished plan: the best layouts (best first), the counts, the time taken."""

    design: str
    job: PlanJob
    tally: Tally
    best: tuple[StepResult, ...]
    elapsed_s: float
    power_W: float
    workers: int = 1
    design_accelerators: int = 0  # the fabric's; ``idle`` the job leaves of them
    idle_reason: str = ""  # why the job leaves accelerators idle, when not asked to
    USD_per_h: float = float("nan")  # the whole fabric's cost per hour (docs/cost.md)
    families: tuple[FamilyTop, ...] = ()  # each asked family's top and counts (plan())

    @property
    def accelerators(self) -> int:
        """Accelerators the planned job uses."""
        return self.job.accelerators or self.design_accelerators

    @property
    def idle(self) -> int:
        """The design's accelerators the planned job leaves idle."""
        return max(0, self.design_accelerators - self.accelerators)

    @property
    def layouts_per_s(self) -> float:
        """Layouts decided per second of wall time."""
        return self.tally.searched / self.elapsed_s if self.elapsed_s > 0 else float("nan")

    def value(self, result: StepResult) -> float:
        """The objective's value for one of the results."""
        return objective_value(result, self.job.objective, self.power_W, self.USD_per_h)


def plan(fabric: Fabric, job: PlanJob, *, design: str = "",
         progress: Callable[[int], None] | None = None,
         families: Sequence[Family] = ()) -> PlanResult:
    """Search every layout of ``job.space`` on ``fabric`` in this process, keeping the
    best of each of ``families`` (parts of the space, :mod:`~topomodel.plan.tops`) in
    the same pass.

    Examples
    --------
    >>> from topomodel.inputs.catalog import load_catalog
    >>> from topomodel.inputs.design import load_design
    >>> from topomodel.fabric.build import build_fabric
    >>> d, cat = load_design("x.yaml", text="system: hgx-h100\\nsystems: 1\\n")
    >>> job = PlanJob(cat.get("llama3-8b", Model), Layout(global_batch=8),
    ...               PlanSpace(max_micro_batch=1, fixed={"zero": 1, "recompute": "none",
    ...                                                  "sequence_parallel": True}),
    ...               top=1)
    >>> found = plan(build_fabric(d, cat), job)
    >>> t = found.tally
    >>> t.searched == t.invalid + t.no_fit + t.pruned + t.evaluated + t.over_limit
    True
    """
    start = time.perf_counter()
    power = fabric_power_W(fabric)
    part = search_cells(fabric, job, range(len(plan_cells(fabric, job))), power_W=power,
                        progress=progress, families=families)
    return PlanResult(design, job, part.tally, tuple(r.result for r in part.best),
                      time.perf_counter() - start, power,
                      design_accelerators=fabric.accelerator_count,
                      USD_per_h=fabric_USD_per_h(fabric, job.cost),
                      families=tuple(FamilyTop(f.name, p.tally,
                                               tuple(r.result for r in p.best))
                                     for f, p in zip(families, part.families, strict=True)))


def total_layouts(fabric: Fabric, job: PlanJob) -> list[int]:
    """How many layouts each cell of the job lists (for a progress bar)."""
    from topomodel.plan.space import count_layouts

    return [count_layouts(job.model, c, job.base, job.space)
            for c in plan_cells(fabric, job)]
