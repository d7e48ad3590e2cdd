"""How a plan proves a layout's rank orders out of its top before modelling their steps,
and how it scores a step or a bound: see :mod:`topomodel.plan.search`, step 3."""

from __future__ import annotations

import copy
import functools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from topomodel.analysis.training.orderscreen import (
    OrderScreen,
    ScreenWorks,
    order_screen,
    screen_works,
    works_bound,
)
from topomodel.analysis.training.stagework import Call
from topomodel.analysis.training.step import StepAssumptions, StepResult
from topomodel.analysis.training.stepbound import (
    CommFreePipeline,
    StepBound,
    bound_frame,
    bound_with_calls,
)
from topomodel.analysis.training.stepcalls import Issued, grid_span, issued_calls, step_calls
from topomodel.analysis.training.stepshape import (
    Shape,
    collective_times,
    grid_key,
    grid_keys,
    ranks_of,
)
from topomodel.errors import UsageError
from topomodel.fabric.tables import Fabric
from topomodel.inputs.parts import Model
from topomodel.plan.callfloors import order_calls, spanned_calls, unplaced_calls
from topomodel.plan.space import OBJECTIVES
from topomodel.traffic.layout import Layout, rank_groups


class PlanJob(Protocol):
    """What the bounds read of a plan's job (:class:`topomodel.plan.search.PlanJob`)."""

    @property
    def model(self) -> Model: ...
    @property
    def assumptions(self) -> StepAssumptions: ...
    @property
    def objective(self) -> str: ...
    @property
    def routing(self) -> str: ...
    @property
    def seed(self) -> int: ...
    @property
    def base(self) -> Layout: ...
    @property
    def headroom(self) -> float: ...


@functools.lru_cache(maxsize=256)
def order_problem(order: str) -> str:
    """Why ``order`` is not a rank order (as a layout refuses it), or ""."""
    try:
        Layout(order=order)
    except UsageError as exc:
        return str(exc)
    return ""


def in_order(layout: Layout, order: str) -> Layout:
    """``layout`` in the rank order ``order``, as ``replace(layout, order=order)`` makes
    it, without checking its other fields again (they passed when ``layout`` was made;
    a search makes one copy per rank order of every layout it reaches)."""
    if order == layout.order:
        return layout  # frozen: the copy would be equal in every field
    if order_problem(order):
        return replace(layout, order=order)  # raises for a bad order
    moved = copy.copy(layout)
    object.__setattr__(moved, "order", order)
    return moved


def objective_value(result: StepResult | StepBound, objective: str, power_W: float,
                    USD_per_h: float = float("nan")) -> float:
    """The value of ``objective`` for a step, or its best for a bound (tokens per joule
    over ``power_W``; US dollars per million tokens at ``USD_per_h``)."""
    if objective == "tokens_per_J":
        return result.tokens_per_s / power_W if power_W > 0 else float("nan")
    if objective == "cost_per_token":
        rate = result.tokens_per_s * 3600.0
        return USD_per_h / rate * 1e6 if rate > 0 else float("inf")
    return float(getattr(result, objective))


def rank_score(result: StepResult | StepBound, job: PlanJob, power_W: float) -> float:
    """``result``'s (or a bound's best) value of the job's objective as the search
    ranks it: larger is better."""
    if job.objective == "cost_per_token":
        # the fabric's cost per hour is the same for every layout on it: the cheapest
        # token is the fastest (so the bounds on tokens/s prune for it too)
        return float(result.tokens_per_s)
    value = objective_value(result, job.objective, power_W)
    return value if OBJECTIVES[job.objective][0] == "max" else -value


CALLS_FIELDS = tuple(f for f in Layout.__dataclass_fields__
                     if f not in ("recompute", "zero", "order"))
"""The layout fields the step's collectives read (all but recomputation, ZeRO, read
apart, and the order, keyed apart): :func:`~topomodel.analysis.training.stepcalls.step_calls`
reads the sizes, the batch, sequence parallelism, the schedule and interleave (the
pipeline pairs and stage sizes), the overlap flags and the ZeRO stage's kind."""

_calls_fields = operator.attrgetter(*CALLS_FIELDS)  # a tuple of them, as getattr reads

TIMED_ORDERS = 65_536
"""Rank orders whose collectives a search keeps (by :data:`CALLS_FIELDS`'s fields and
where the order places the communicators, :meth:`OrderBounds._placement`; a few kB
each): the layouts of a cell that differ only in recomputation or in ZeRO 1 and 2, and
the orders that place every communicator alike, find them instead of asking the
fabric's tables again. An order with every
collective timed keeps them for good (a time, once routed, never changes); one with
some only bounded keeps them as they are while the fabric's table of times has not
grown, and after, only to screen with (a step modelled since may have timed them: the
time is then the tighter figure, found again when the kept ones do not drop the
order: :meth:`OrderBounds.best_score`)."""


SCREENS = 1_024
"""Order screens (and their operations' parts) a search keeps, by :data:`CALLS_FIELDS`'
fields, the ZeRO stage's kind and recomputation (tens of kB each, so tens of MB at
most): the layouts of a family that differ only in ZeRO 0, 1
and 2 share them (see :meth:`OrderBounds._screen`), and the search reaches those
close together (their bounds differ only in the optimizer step and the gathers), so a
thousand is plenty."""


Times = tuple[tuple[str, float], ...]
"""An order's collectives' names and times, seconds, in the order of its calls: all its
screen reads of them (:meth:`OrderBounds._screen_score`)."""


def kept_in(table: dict[Any, Any], key: Any, most: int, make: Callable[[], Any]) -> Any:
    """``table[key]``, made by ``make()`` and kept when missing; a table at ``most``
    entries is emptied first (the search's memos: what it asks again comes close
    together, so dropping all at once costs little and needs no order kept)."""
    found = table.get(key)
    if found is None:
        if len(table) >= most:
            table.clear()
        found = table[key] = make()
    return found


@dataclass
class OrderMemo:
    """What the bounds of a search's layouts share: every rank order's collectives
    (``timed``: the calls, how many are not timed yet, the fabric's table size when
    found; see :data:`TIMED_ORDERS`), each layout's collectives in any order with no
    time looked up (``issued``) and at what no order can beat (``floors``; none of a
    group's orders, ``spanned``, from the spans its communicators take in them,
    ``spans``), its order
    screen (``screens``) and the part of that its operations give (``works``, shared
    by ZeRO 0, 1 and 2); and what every order of a layout issues before it is placed
    (``issues``: :func:`~topomodel.analysis.training.stepcalls.issued_calls`, kept by
    :data:`CALLS_FIELDS`' fields and the ZeRO stage's kind, what they read)."""

    timed: dict[tuple[Any, ...], tuple[dict[str, Call], int, int, Times]] = field(
        default_factory=dict)
    issued: dict[tuple[Any, ...], dict[str, Call]] = field(default_factory=dict)
    issues: dict[tuple[Any, ...], tuple[Issued, ...]] = field(default_factory=dict)
    floors: dict[tuple[Any, ...], dict[str, Call]] = field(default_factory=dict)
    spanned: dict[tuple[Any, ...], dict[str, Call]] = field(default_factory=dict)
    spans: dict[tuple[Any, ...], dict[str, set[tuple[int, int]]]] = field(
        default_factory=dict)
    screens: dict[tuple[Any, ...], OrderScreen] = field(default_factory=dict)
    works: dict[tuple[Any, ...], ScreenWorks] = field(default_factory=dict)
    placements: dict[tuple[Any, ...], tuple[Any, ...]] = field(default_factory=dict)


class OrderBounds:
    """Proves rank orders of one group out of the top, cheapest first: the order screen
    (:mod:`~topomodel.analysis.training.orderscreen`, made on first use), then the order's own
    pipeline (:func:`~topomodel.analysis.training.stepbound.bound_with_calls`), kept by the
    collective times (orders with the same times have the same bound)."""

    # PLR0913: the search's shared state, passed on as it is
    def __init__(self, fabric: Fabric, job: PlanJob, layout: Layout, shape: Shape,
                 pipeline: Callable[[], CommFreePipeline], power_W: float,
                 memo: OrderMemo) -> None:
        self.fabric, self.job, self.shape, self.power_W = fabric, job, shape, power_W
        self.pipeline = pipeline
        self.screen: OrderScreen | None = None
        self.known: dict[tuple[tuple[str, float], ...], float] = {}
        # the screen's scores by the calls' names and times (its screen is the group's)
        self.screened: dict[tuple[tuple[str, float], ...], float] = {}
        self.grids: tuple[str, ...] | None = None  # the communicators' kinds, in order
        self.memo, self.timed = memo, memo.timed
        lay = layout  # what the step's collectives read of it: not recompute, and
        # ZeRO 1 and 2 issue the same (reduce-scatter and gather)
        self.calls_key = (*_calls_fields(lay),
                          min(lay.zero, 1) if lay.zero < 3 else 3)

    def best_score(self, layout: Layout, worst_kept: float) -> float:
        """The best score ``layout``'s own rank order can reach by its placement's
        bound, found before its step is modelled or anything of it routed: the screen
        on its collective times (with those not timed yet at what they cannot beat;
        with all of them timed, the step's own times, a close bound far cheaper than
        the step), and, when that is not below ``worst_kept`` and something is not timed
        yet, the order's own bound (kept by the collective times).

        Collectives kept from before the fabric's table grew (:data:`TIMED_ORDERS`)
        are tried first: each of their times is the table's (which never changes) or
        a bound the table's time, once routed, is no less than, so the screen on them
        is no lower than on the table's current times (it only grows with each time),
        and an order it puts below ``worst_kept`` the current times would too; only
        an order it does not drop has its collectives looked up again."""
        job, shape = self.job, self.shape
        placement = self._placement(layout)
        calls, missed, stale, times = self._calls(layout, placement)
        score = self._screen_score(layout, calls, times)
        if stale and score >= worst_kept:
            calls, missed, times = self._order_calls(layout, placement)
            score = self._screen_score(layout, calls, times)
        if not missed or score < worst_kept:
            return score
        known = self.known.get(times)
        if known is None:
            known = self.known[times] = rank_score(bound_with_calls(
                job.model, layout, job.assumptions, shape, calls), job, self.power_W)
        return known

    def _screen_score(self, layout: Layout, calls: dict[str, Call],
                      times: tuple[tuple[str, float], ...]) -> float:
        """The score of the group's screen (:meth:`_screen`) on ``calls``, whose names
        and times are ``times``: all the screen reads of them (its
        :meth:`~topomodel.analysis.training.orderscreen.OrderScreen.bound` takes each
        call's time alone), so the rank orders of a group with the same times (those
        that differ only in where a dimension of one rank goes, or that place every
        communicator alike) share one, kept per group (:attr:`screened`)."""
        found = self.screened.get(times)
        if found is None:
            found = self.screened[times] = rank_score(
                self._screen(layout, calls).bound(calls), self.job, self.power_W)
        return found

    def unplaced_score(self, layout: Layout, worst_kept: float = -float("inf"),
                       orders: Sequence[str] = ()) -> float:
        """The best score any rank order of the group can reach (of ``orders``, where
        given): the screen with each collective at a time no order (none of those)
        can beat (:func:`~topomodel.plan.callfloors.unplaced_calls`, raised by
        :meth:`spanned_floors`), found from
        the collectives of ``layout`` (any of its orders: they issue the same). Before
        the screen is made, its operations' part alone is tried
        (:func:`~topomodel.analysis.training.orderscreen.works_bound`, a score no lower
        than the screen's): when that is below ``worst_kept`` it is returned (the
        screen's would be too), and the screen, not needed, is not made."""
        calls = self._issued(layout)
        job = self.job
        floor = (self.spanned_floors(layout, orders) if orders
                 else self.unplaced_floors(layout))
        if self.screen is None and worst_kept > -float("inf"):
            pipeline = self.pipeline()
            frame = bound_frame(job.model, layout, job.assumptions, self.shape)
            score = rank_score(works_bound(self._works(layout, calls), pipeline, frame,
                                           floor), job, self.power_W)
            if score < worst_kept:
                return score
        return rank_score(self._screen(layout, calls).bound(floor), job, self.power_W)

    def unplaced_floors(self, layout: Layout) -> dict[str, Call]:
        """``layout``'s collectives (any rank order: they issue the same), each at a time
        no order beats (:func:`~topomodel.plan.callfloors.unplaced_calls`), kept by what
        they read (:attr:`calls_key`)."""
        calls = self._issued(layout)
        return kept_in(self.memo.floors, self.calls_key, TIMED_ORDERS,
                       lambda: unplaced_calls(self.fabric, layout, self.job.assumptions,
                                              calls))

    def spanned_floors(self, layout: Layout, orders: Sequence[str],
                       only: frozenset[str] | None = None) -> dict[str, Call]:
        """:meth:`unplaced_floors`, each raised to a time none of the rank ``orders`` of
        ``layout`` beats (:func:`~topomodel.plan.callfloors.spanned_calls`, over the
        spans of the communicators those orders make; with ``only``, those of the
        collectives it names alone, the others left at their unplaced floors), kept by
        :attr:`calls_key` (the sizes and EP among them, which decide the
        communicators with the orders), the orders and ``only``. At 98k GPUs the
        latency of a ring over thousands of ranks, which no bound on bytes sees, is
        most of ZeRO's gathers' time."""
        def made() -> dict[str, Call]:
            issued = tuple(i for i in self._issues(layout) if only is None or i.name in only)
            return spanned_calls(self.fabric, self.job.assumptions, issued,
                                 self.unplaced_floors(layout),
                                 self._spans(layout, orders, {i.grid for i in issued}))

        return kept_in(self.memo.spanned, (*self.calls_key, tuple(orders), only),
                       TIMED_ORDERS, made)

    def _spans(self, layout: Layout, orders: Sequence[str], wanted: set[str]
               ) -> dict[str, set[tuple[int, int]]]:
        """Per communicators' kind of ``layout``'s collectives in ``wanted`` (the
        pipeline's pairs aside), the spans
        (:func:`~topomodel.analysis.training.stepcalls.grid_span`) its rank ``orders``
        give them, kept in the search's :attr:`OrderMemo.spans` by what decides them
        (as :meth:`_placement`'s keys, with the orders)."""
        grids = self._grids(layout)
        lay = layout
        kinds = tuple(g for g in grids if g in wanted and g != "pp-pairs")
        return kept_in(self.memo.spans, (lay.tp, lay.cp, lay.pp, lay.dp, lay.ep,
                                         lay.interleave > 1, grids, kinds, tuple(orders)),
                       TIMED_ORDERS, lambda: self._found_spans(layout, orders, grids, kinds))

    def _found_spans(self, layout: Layout, orders: Sequence[str], grids: tuple[str, ...],
                     kinds: tuple[str, ...]) -> dict[str, set[tuple[int, int]]]:
        """:meth:`_spans` of the communicators' ``kinds`` (some of ``grids``, the kinds
        of every collective of ``layout``, in :meth:`_placement`'s order), found."""
        ranks = ranks_of(self.fabric)[:layout.world]
        spans: dict[str, set[tuple[int, int]]] = {g: set() for g in kinds}
        for order in orders:
            ordered = in_order(layout, order)
            for grid, key in zip(grids, self._placement(ordered), strict=True):
                if grid in spans:
                    spans[grid].add(grid_span(self.fabric, key, lambda: rank_groups(
                        ranks, ordered, grid)))  # noqa: B023 (called at once)
        return spans

    def _issued(self, layout: Layout) -> dict[str, Call]:
        """``layout``'s collectives in its own rank order with their names, kinds and
        sizes (every order issues the same), kept by :data:`CALLS_FIELDS`' fields and
        the ZeRO stage's kind (what they read); the times are the fabric's table's where
        it has them, else 0, and neither the screen nor the unplaced bound reads them,
        so none is bounded here (a layout pruned for all its orders costs no
        placement's bound)."""
        job = self.job
        return kept_in(self.memo.issued, self.calls_key, TIMED_ORDERS, lambda: step_calls(
            self.fabric, job.model, layout, job.assumptions, routing=job.routing,
            seed=job.seed, unrouted=lambda *_: 0.0, shape=self.shape,
            issued=self._issues(layout))[0])

    def _issues(self, layout: Layout) -> tuple[Issued, ...]:
        """What every rank order of ``layout`` issues before it is placed
        (:func:`~topomodel.analysis.training.stepcalls.issued_calls`), kept by
        :data:`CALLS_FIELDS`' fields and the ZeRO stage's kind (what it reads)."""
        job, shape = self.job, self.shape
        return kept_in(self.memo.issues, self.calls_key, TIMED_ORDERS, lambda: issued_calls(
            self.fabric, job.model, layout, job.assumptions, shape.seq, shape.sizes,
            shape.moe_sizes))

    def _calls(self, layout: Layout, placement: tuple[Any, ...] | None = None
               ) -> tuple[dict[str, Call], int, bool, Times]:
        """``layout``'s collectives (:func:`~topomodel.analysis.training.stepbound.
        order_calls`), how many are not timed yet, whether they were kept from
        before the fabric's table grew (see :data:`TIMED_ORDERS`) and their
        :data:`Times`; ``placement``: its :meth:`_placement`, found here if not
        given."""
        if placement is None:
            placement = self._placement(layout)
        kept = self.timed.get((*self.calls_key, placement))
        if kept is not None:
            table = len(self.fabric.derived(collective_times))
            return kept[0], kept[1], bool(kept[1]) and kept[2] != table, kept[3]
        calls, missed, times = self._order_calls(layout, placement)
        return calls, missed, False, times

    def _grids(self, layout: Layout) -> tuple[str, ...]:
        """The kinds of communicators ``layout``'s collectives run on, in the order
        they issue them (the same for the group's every layout: found once)."""
        if self.grids is None:
            self.grids = tuple(dict.fromkeys(c.grid for c in self._issues(layout)))
        return self.grids

    def _placement(self, layout: Layout) -> tuple[Any, ...]:
        """Where ``layout``'s rank order puts the communicators its collectives run on:
        each one's :func:`~topomodel.analysis.training.stepshape.grid_key`, by which
        :func:`~topomodel.analysis.training.stepcalls.placed_calls` keys (and, not
        found, bounds or times) them, so the orders with the same keys have the same
        collectives, found once (with :data:`CALLS_FIELDS`' fields: every order that
        moves a dimension of one rank alone, three in four of a layout's 24 when CP
        and EP are 1). Kept in the search's :attr:`OrderMemo.placements` by what the
        grids' keys read (the sizes, EP, the order, whether the pipeline wraps) and the
        grids: the layouts of a cell that share them (other micro-batches, schedules,
        ZeRO stages, recomputation) find them at once."""
        grids = self._grids(layout)
        fabric = self.fabric
        return kept_in(self.memo.placements, (
            layout.tp, layout.cp, layout.pp, layout.dp, layout.ep, layout.interleave > 1,
            layout.order, grids), TIMED_ORDERS, lambda: tuple(
                grid_key(fabric, layout, grid, fabric.derived(grid_keys))
                for grid in grids))

    def _order_calls(self, layout: Layout, placement: tuple[Any, ...]
                     ) -> tuple[dict[str, Call], int, Times]:
        """``layout``'s collectives found again and kept, with how many are not timed
        yet and their :data:`Times` (:meth:`_calls`; ``placement``: its
        :meth:`_placement`)."""
        job = self.job
        key = (*self.calls_key, placement)
        table = len(self.fabric.derived(collective_times))
        calls, missed = order_calls(self.fabric, job.model, layout, job.assumptions,
                                    self.shape, routing=job.routing, seed=job.seed,
                                    issued=self._issues(layout))
        if len(self.timed) >= TIMED_ORDERS:
            self.timed.clear()
        times = tuple((name, call.time_s) for name, call in calls.items())
        self.timed[key] = (calls, missed, table, times)
        return calls, missed, times

    def _screen(self, layout: Layout, calls: dict[str, Call]) -> OrderScreen:
        """The group's order screen, made on first use from ``layout``'s ``calls``, or
        found in the search's: it reads the layout's collectives' names and sizes, its
        comm-free pipeline (the same for every ZeRO stage) and the layout, which it
        reads but for the order and, of ZeRO, whether it is 0, 1-2 or 3 (the step's
        operations and buckets, the gathers and the optimizer's sharding), so the
        layouts with ZeRO 1 and 2 and the same other fields share one."""
        if self.screen is None:
            job = self.job
            self.screen = kept_in(
                self.memo.screens, (*self.calls_key, layout.recompute), SCREENS,
                lambda: order_screen(job.model, layout, job.assumptions, self.shape,
                                     self.pipeline(), calls, self._works(layout, calls)))
        return self.screen

    def _works(self, layout: Layout, calls: dict[str, Call]) -> ScreenWorks:
        """The operations' part of the group's screen (:func:`~topomodel.analysis.
        training.orderscreen.screen_works`), found in the search's or made from
        ``layout``'s ``calls`` (their names and sizes): ZeRO 0, 1 and 2 share it
        (ZeRO 3 issues in the operations)."""
        job = self.job
        return kept_in(self.memo.works,
                       (*self.calls_key[:-1], self.calls_key[-1] == 3, layout.recompute),
                       SCREENS, lambda: screen_works(job.model, layout, job.assumptions,
                                                     self.shape, self.pipeline(), calls))


def unplaced_floor_calls(fabric: Fabric, job: PlanJob, layout: Layout, shape: Shape,
                         memo: OrderMemo, orders: Sequence[str] = (),
                         only: frozenset[str] | None = None) -> dict[str, Call]:
    """:meth:`OrderBounds.unplaced_floors` of ``layout`` (with ``orders``, its
    :meth:`~OrderBounds.spanned_floors` over them, of the collectives ``only`` names),
    found in ``memo`` or made and kept there, for a reader that bounds no order (a
    set's floor, :mod:`~topomodel.plan.coarse`): the group's order bounds find them
    there."""
    bounds = OrderBounds(fabric, job, layout, shape, _no_pipeline, 0.0, memo)
    return (bounds.spanned_floors(layout, orders, only) if orders
            else bounds.unplaced_floors(layout))


def _no_pipeline() -> CommFreePipeline:
    """Never called: the unplaced floors read no timeline."""
    raise AssertionError("the unplaced floors run no timeline")
