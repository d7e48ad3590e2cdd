"""The group floor against the step: never above the step of any rank order of a layout
at any ZeRO stage, raised above the cheap bound by the collectives, and a plan that
prunes by it keeps the unpruned search's top."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_plan import DESIGN  # the same two HGX servers
from test_stepbound import CASES, _fitting_layouts

from topomodel.analysis.training.step import step_time
from topomodel.analysis.training.stepbound import (
    bound_with_calls,
    busy_bound,
    calls_busy_figures,
    calls_busy_sums,
)
from topomodel.errors import UsageError
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.plan.groupfloor import group_floor, unplaced_floor_calls
from topomodel.plan.orderbounds import OrderMemo
from topomodel.plan.search import PlanJob, plan_cells, search_cells
from topomodel.traffic.layout import evolve


@pytest.mark.parametrize("case", list(CASES))
def test_no_order_at_any_zero_stage_beats_the_floor(case):
    fabric = build_fabric(*load_design("two.yaml", text=DESIGN))  # no collective timed
    name, base, space, a = CASES[case]
    model = fabric.catalog.get(name, Model)
    job = PlanJob(model, base, space, a)
    memo = OrderMemo()
    checked = raised = stages = 0
    for fields, layout, shape, _ in _fitting_layouts(fabric, case):
        for zero in range(4):
            try:
                at = evolve(layout, zero=zero)
            except UsageError:
                continue
            floor = group_floor(fabric, job, at, shape, memo)
            if floor is None:  # DualPipe: the cheap bound is the floor
                assert at.ep_overlap == "dualpipe"
                continue
            step = step_time(fabric, model, at, a)
            assert floor.step_time_s <= step.step_time_s, (fields, zero)
            assert floor.tokens_per_s >= step.tokens_per_s and floor.mfu >= step.mfu
            # no more than the bound it relaxes: the timeline with the same collectives
            calls = unplaced_floor_calls(fabric, job, at, shape, memo)
            timed = bound_with_calls(model, at, a, shape, calls)
            assert floor.step_time_s <= timed.step_time_s * (1 + 1e-12), (fields, zero)
            cheap = busy_bound(model, at, a, shape).step_time_s
            raised += floor.step_time_s > cheap * (1 + 1e-9)
            stages += at.pp > 1
            checked += 1
    if "dualpipe" in case:
        assert checked == 0
        return
    # the collectives raise it over the cheap bound, on PP 1 and on pipelines
    assert checked > 50 and raised > checked // 4 and 0 < stages < checked


@pytest.mark.parametrize("case", ["dense", "moe"])
def test_a_pipelines_floor_reads_the_stage_sums_of_every_operations_figures(case):
    """With PP > 1 the floor takes the stages' sums without every operation's duration
    (``calls_busy_sums``): the same sums, to the bit, as the figures summed per stage."""
    fabric = build_fabric(*load_design("two.yaml", text=DESIGN))
    name, base, space, a = CASES[case]
    model = fabric.catalog.get(name, Model)
    job = PlanJob(model, base, space, a)
    memo = OrderMemo()
    checked = 0
    for _, layout, shape, _ in _fitting_layouts(fabric, case):
        if layout.pp == 1 or layout.ep_overlap == "dualpipe":
            continue
        calls = unplaced_floor_calls(fabric, job, layout, shape, memo)
        duration, compute = calls_busy_figures(model, layout, a, shape, calls)
        sums = calls_busy_sums(model, layout, a, shape, calls)
        assert sums.busy_s.tobytes() == duration.sum(axis=1).tobytes()
        assert sums.compute_s.tobytes() == compute.sum(axis=1).tobytes()
        checked += 1
    assert checked > 5


@pytest.mark.parametrize("case", ["dense", "moe"])
def test_a_plan_pruned_by_the_floor_keeps_the_unpruned_top(case):
    fabric = build_fabric(*load_design("two.yaml", text=DESIGN))
    name, base, space, a = CASES[case]
    job = PlanJob(fabric.catalog.get(name, Model), base, space, a, top=3)
    indices = range(len(plan_cells(fabric, job)))
    pruned = search_cells(fabric, job, indices)
    full = search_cells(fabric, job, indices, prune=False)
    assert [(r.score, r.place) for r in pruned.best] == [(r.score, r.place)
                                                        for r in full.best]
    assert [replace(r.result, warnings=()) for r in pruned.best] == [
        replace(r.result, warnings=()) for r in full.best]
    assert pruned.tally.pruned > 0
