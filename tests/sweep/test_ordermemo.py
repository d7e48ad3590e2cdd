"""The bounds of rank orders with what a search's layouts share (:class:`~topomodel.plan.
orderbounds.OrderMemo`: collectives, issued calls, screens): for every order of a sample
of layouts, neither the bound of all its layout's orders nor its own is above its step,
whichever layout of its family came first."""

from __future__ import annotations

import functools
from dataclasses import replace

from test_plan import DESIGN, MODEL

from topomodel.analysis.training.step import StepAssumptions, step_time
from topomodel.analysis.training.stepbound import (
    comm_free_pipeline,
    unordered,
)
from topomodel.analysis.training.stepcalls import step_calls
from topomodel.analysis.training.stepshape import shape_of
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.plan.callfloors import order_calls, unplaced_calls
from topomodel.plan.orderbounds import OrderBounds, OrderMemo, in_order, rank_score
from topomodel.plan.search import PlanJob
from topomodel.plan.space import PlanSpace
from topomodel.traffic.layout import Layout

ORDERS = ("tp,cp,dp,pp", "dp,tp,cp,pp", "pp,dp,tp,cp", "tp,pp,dp,cp")


def test_shared_bounds_stay_under_every_orders_step():
    fabric = build_fabric(*load_design("two.yaml", text=DESIGN))
    model = fabric.catalog.get(MODEL, Model)
    a = StepAssumptions()
    job = PlanJob(model, Layout(global_batch=16, seq=4096), PlanSpace(), assumptions=a)
    memo, pipelines = OrderMemo(), {}
    checked = raised = 0
    for tp, pp, dp in ((2, 2, 4), (4, 2, 2), (2, 4, 2)):
        for recompute in ("none", "full"):
            for zero in (2, 1, 0, 3):  # ZeRO 2 first: ZeRO 1 finds its screen
                layout = Layout(tp=tp, pp=pp, dp=dp, global_batch=16, seq=4096,
                                zero=zero, recompute=recompute)
                shape = shape_of(fabric, model, layout)
                key = unordered(layout)
                if key not in pipelines:
                    pipelines[key] = comm_free_pipeline(model, layout, a, shape)
                bounds = OrderBounds(fabric, job, layout, shape,
                                     functools.partial(pipelines.get, key), 0.0, memo)
                everyone = bounds.unplaced_score(in_order(layout, ORDERS[1]))
                # the same, with each collective at a time none of these orders beats
                spanned = bounds.unplaced_score(layout, orders=ORDERS)
                assert spanned <= everyone
                raised += spanned < everyone
                for order in ORDERS:
                    placed = in_order(layout, order)
                    own = bounds.best_score(placed, -float("inf"))
                    step = rank_score(step_time(fabric, model, placed, a), job, 0.0)
                    assert step <= own <= spanned * (1 + 1e-12), placed
                    checked += 1
    assert checked == 3 * 2 * 4 * len(ORDERS)
    assert raised  # the orders' spans lower the score somewhere (their latency)
    assert len(memo.screens) == 3 * 2 * 3  # ZeRO 1 and 2 share theirs
    assert len(memo.works) == 3 * 2 * 2  # and ZeRO 0 the operations' part
    assert len(memo.issued) == 3 * 3  # and recomputation its calls
    assert len(memo.floors) == len(memo.issued)  # and their floors, as found afresh
    assert memo.floors[bounds.calls_key] == unplaced_calls(
        fabric, layout, a, memo.issued[bounds.calls_key])
    assert replace(layout, order=ORDERS[0]) == in_order(layout, ORDERS[0])


def _fresh_bounds():
    """The two-server fabric (nothing timed), its job, one layout (TP 2 PP 2 DP 4,
    ZeRO 1), its shape and the bounds of its rank orders with nothing shared yet."""
    fabric = build_fabric(*load_design("two.yaml", text=DESIGN))
    model = fabric.catalog.get(MODEL, Model)
    a = StepAssumptions()
    job = PlanJob(model, Layout(global_batch=16, seq=4096), PlanSpace(), assumptions=a)
    layout = Layout(tp=2, pp=2, dp=4, global_batch=16, seq=4096, zero=1)
    shape = shape_of(fabric, model, layout)
    pipeline = comm_free_pipeline(model, layout, a, shape)
    bounds = OrderBounds(fabric, job, layout, shape, lambda: pipeline, 0.0, OrderMemo())
    return fabric, model, a, job, layout, shape, bounds


def test_kept_collectives_from_before_a_step_prune_no_more_than_todays():
    """An order's collectives kept from before a step timed some of them give a screen
    no lower than today's: below the bar they drop the order as today's would, and
    otherwise they are found again (the order's bound then is today's)."""
    fabric, model, a, job, layout, _, bounds = _fresh_bounds()
    placed = [in_order(layout, order) for order in ORDERS]
    before = [bounds.best_score(lay, float("inf")) for lay in placed]  # screens alone
    steps = [rank_score(step_time(fabric, model, lay, a), job, 0.0) for lay in placed]
    assert all(bounds._calls(lay)[2] for lay in placed)  # kept, the table grew since
    kept = [bounds.best_score(lay, float("inf")) for lay in placed]
    assert kept == before  # below the bar: the kept collectives decide
    today = [bounds.best_score(lay, -float("inf")) for lay in placed]
    assert not any(bounds._calls(lay)[2] for lay in placed)  # found again
    for old, new, step in zip(before, today, steps, strict=True):
        assert step <= new <= old * (1 + 1e-12)
    assert any(new < old for old, new in zip(before, today, strict=True))


def test_orders_with_the_same_times_share_one_screen_score():
    """The collectives kept by where an order places the communicators are that order's
    own, and the screen's score kept per group by the calls' times is the screen's own
    bound on them, for every rank order (those that place a dimension of one rank
    elsewhere, here CP, find the collectives and score of an order before them)."""
    fabric, model, a, job, layout, shape, bounds = _fresh_bounds()
    orders = (*ORDERS, "cp,tp,dp,pp", "tp,dp,cp,pp", "dp,cp,tp,pp", "cp,dp,tp,pp")
    for order in orders:
        placed = in_order(layout, order)
        bounds.best_score(placed, float("inf"))  # the screen alone decides
        calls = bounds._calls(placed)[0]
        # kept by where the order puts the communicators: its own listing's calls
        assert calls == order_calls(fabric, model, placed, a, shape)[0], order
        fresh = rank_score(bounds._screen(placed, calls).bound(calls), job, 0.0)
        times = tuple((name, call.time_s) for name, call in calls.items())
        assert bounds.screened[times] == fresh, order
    assert len(bounds.screened) < len(orders)  # some orders found another's
    assert len(bounds.timed) < len(orders)  # and their collectives


def test_a_kept_placement_is_each_layouts_own_grid_keys():
    """:meth:`OrderBounds._placement` keeps an order's communicators' keys by what they
    read (the sizes, EP, the order, the pipeline's wrap) in the search's memo: the
    layouts that find another's (other ZeRO stages, recomputation, micro-batches,
    interleaves) find their own grids' :func:`grid_key`, each made afresh on a new
    fabric."""
    from topomodel.analysis.training.stepshape import grid_key

    fabric = build_fabric(*load_design("two.yaml", text=DESIGN))
    model = fabric.catalog.get(MODEL, Model)
    a = StepAssumptions()
    job = PlanJob(model, Layout(global_batch=16, seq=4096), PlanSpace(), assumptions=a)
    memo = OrderMemo()
    checked = 0
    for tp, pp, dp in ((2, 2, 4), (2, 4, 2)):
        for zero, recompute, interleave in ((1, "none", 1), (2, "full", 1), (0, "none", 2),
                                            (3, "none", 1)):
            layout = Layout(tp=tp, pp=pp, dp=dp, global_batch=16, seq=4096, zero=zero,
                            recompute=recompute, interleave=interleave)
            shape = shape_of(fabric, model, layout)
            bounds = OrderBounds(fabric, job, layout, shape, lambda: None, 0.0, memo)
            for order in (*ORDERS, "cp,tp,dp,pp"):
                placed = in_order(layout, order)
                kept = bounds._placement(placed)
                fresh_fabric = build_fabric(*load_design("two.yaml", text=DESIGN))
                assert kept == tuple(grid_key(fresh_fabric, placed, grid)
                                     for grid in bounds.grids), (layout, order)
                checked += 1
    assert checked == 40 and len(memo.placements) < checked


def test_spanned_floors_stay_under_each_orders_collectives():
    """Every collective of every one of the orders, routed and timed as its step times
    it, takes no less than its floor over those orders' spans (and the pipeline's
    sends their unplaced floor); the spans raise some floor above the unplaced one
    (the latency of a ring over the ranks the bytes' bound does not see)."""
    fabric = build_fabric(*load_design("two.yaml", text=DESIGN))
    model = fabric.catalog.get(MODEL, Model)
    a = StepAssumptions()
    job = PlanJob(model, Layout(global_batch=16, seq=4096), PlanSpace(), assumptions=a)
    memo = OrderMemo()
    raised = checked = 0
    for tp, pp, dp, cp in ((2, 2, 4, 1), (4, 2, 2, 1), (2, 1, 4, 2), (8, 2, 1, 1)):
        for zero in (0, 1, 3):
            layout = Layout(tp=tp, pp=pp, dp=dp, cp=cp, global_batch=16, seq=4096,
                            zero=zero, sequence_parallel=tp > 1)
            shape = shape_of(fabric, model, layout)
            bounds = OrderBounds(fabric, job, layout, shape, lambda: None, 0.0, memo)
            spanned = bounds.spanned_floors(layout, ORDERS)
            unplaced = bounds.unplaced_floors(layout)
            raised += sum(spanned[n].time_s > unplaced[n].time_s for n in spanned)
            for order in ORDERS:
                placed, _ = step_calls(fabric, model, in_order(layout, order), a,
                                       shape=shape)
                for name, call in placed.items():
                    assert call.time_s >= spanned[name].time_s * (1 - 1e-12), (
                        layout, order, name)
                    checked += 1
    assert raised and checked > 200
