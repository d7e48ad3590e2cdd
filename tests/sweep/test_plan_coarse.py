"""The planner's sets (:mod:`topomodel.plan.coarse`): a set's floor is never above the
step of any rank order of any of its families, nor below any family's own busiest stage
with its in-stage floors, and a search by sets keeps the top of the search without them
and of the unpruned search."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_plan import DESIGN  # the same two HGX servers

from topomodel.analysis.training.step import StepAssumptions, layout_memory, step_time
from topomodel.analysis.training.stepbound import busy_bound, calls_busy_sums
from topomodel.errors import UsageError
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.plan import coarse, groups, search
from topomodel.plan.coarse import in_stage_floors, representative, set_key, set_score
from topomodel.plan.orderbounds import OrderMemo, rank_score
from topomodel.plan.space import PlanSpace, cell_axes, cell_families, cell_orders
from topomodel.plan.tally import over_limit
from topomodel.plan.tops import Family, Tops, space_family
from topomodel.traffic.layout import Layout

CASES = {  # every recomputation, ZeRO stage, SP, schedule and interleave in a set
    "dense": ("llama3-8b", Layout(global_batch=16, seq=4096),
              PlanSpace(max_micro_batch=1, max_interleave=2, max_cp=1, max_tp=4),
              StepAssumptions()),
    "moe": ("mixtral-8x7b", Layout(global_batch=16, seq=4096),
            PlanSpace(max_micro_batch=1, max_interleave=2, max_cp=1, max_tp=2),
            StepAssumptions(hot_expert_factor=1.3)),
}
REFUSED = {  # interleaves refused for their microbatches at some depths: reasons counted
    "refused": ("mixtral-8x7b", Layout(global_batch=12, seq=4096),
                PlanSpace(max_micro_batch=2, max_interleave=3, max_cp=1, max_tp=2),
                StepAssumptions()),
}


def _job(fabric, case, top=5):
    name, base, space, a = {**CASES, **REFUSED}[case]
    return search.PlanJob(fabric.catalog.get(name, Model), base, space, a, top=top)


@pytest.mark.parametrize("case", list(CASES))
def test_no_layout_of_a_set_beats_its_floor(case):
    fabric = build_fabric(*load_design("two.yaml", text=DESIGN))
    job = _job(fabric, case)
    memo = OrderMemo()
    all_cells = search.plan_cells(fabric, job)
    checked = sets = 0
    for c in all_cells:
        cell = groups.CellMemo(cell_orders(c, job.space))
        by_set: dict = {}
        for family in cell_families(job.model, c, job.base, job.space):
            _, layout, shape = groups.valid_family(fabric, job, family, cell)
            if layout is not None and not over_limit(fabric, job.model, layout,
                                                     job.routing):
                by_set.setdefault(set_key(family), []).append((family, layout, shape))
        for members in by_set.values():
            score = set_score(fabric, job, [(lay, sh) for _, lay, sh in members], 0.0,
                              memo, cell.orders)
            # the in-stage collectives at what none of the cell's orders beats: no
            # higher than at what no order at all beats
            assert score <= set_score(fabric, job, [(lay, sh) for _, lay, sh in members],
                                      0.0, memo) * (1 + 1e-12)
            sets += 1
            for family, _, shape in members:
                layout = replace(job.base, **family)
                # every family's busiest stage with its in-stage floors: none above
                own = busy_bound(job.model, layout, job.assumptions, shape, calls_busy_sums(
                    job.model, layout, job.assumptions, shape,
                    in_stage_floors(fabric, job, layout, shape, memo, cell.orders)))
                assert rank_score(own, job, 0.0) <= score * (1 + 1e-12), family
                if layout.zero == 0 and layout.recompute == "none":
                    assert representative(layout) is layout
                try:
                    fits = layout_memory(fabric, job.model, layout, job.assumptions
                                         ).fits(job.headroom)
                except UsageError:
                    continue
                if not fits:
                    continue
                for order in cell.orders:
                    step = step_time(fabric, job.model, replace(layout, order=order),
                                     job.assumptions)
                    assert rank_score(step, job, 0.0) <= score, (family, order)
                    checked += 1
    assert sets > 10 and checked > 100


@pytest.mark.parametrize("case", [*CASES, *REFUSED])
def test_a_search_by_sets_keeps_the_top(case):
    fabric = build_fabric(*load_design("two.yaml", text=DESIGN))
    job = _job(fabric, case, top=3)
    indices = range(len(search.plan_cells(fabric, job)))
    by_sets = search.search_cells(fabric, job, indices)
    by_groups = search.search_cells(fabric, job, indices, sets=False)
    full = search.search_cells(fabric, job, indices, prune=False)
    for other in (by_groups, full):
        assert [(r.score, r.place) for r in by_sets.best] == [(r.score, r.place)
                                                             for r in other.best]
        assert [replace(r.result, warnings=()) for r in by_sets.best] == [
            replace(r.result, warnings=()) for r in other.best]
        t, o = by_sets.tally, other.tally
        assert (t.searched, t.invalid, t.over_limit) == (o.searched, o.invalid,
                                                          o.over_limit)
        assert list(t.reasons.items()) == list(o.reasons.items())  # in the same order
        assert t.pruned + t.no_fit + t.evaluated == o.pruned + o.no_fit + o.evaluated


def _sets_one_by_one(fabric, job, ci, cell, tops, memo):
    """The sets of a cell made family by family (the search's way before
    :func:`~topomodel.plan.coarse.cell_sets`): each family's validity and the router's
    limit decided alone, its holders found alone, the set's floor over every member."""
    n = len(cell.orders)
    by_set: dict = {}
    c = search.plan_cells(fabric, job)[ci]
    for u, family in enumerate(cell_families(job.model, c, job.base, job.space)):
        holders = tops.holders(family)
        tops.count(holders, "searched", n)
        reason, layout, shape = groups.valid_family(fabric, job, family, cell)
        if layout is None or shape is None:
            tops.count(holders, "invalid", n, reason)
        elif over_limit(fabric, job.model, layout, job.routing):
            tops.count(holders, "over_limit", n)
        else:
            by_set.setdefault(set_key(family), []).append(
                (coarse.Member((ci, u * n), family, holders, n), layout, shape))
    return [(set_score(fabric, job, [(lay, sh) for _, lay, sh in members], 0.0, memo,
                       cell.orders),
             members[0][0].place, [m for m, _, _ in members])
            for members in by_set.values()]


def _families_of(job):
    families = [space_family("no EP", PlanSpace(max_ep=1), job.space),
                space_family("DP only", PlanSpace(max_tp=1, max_pp=1, max_cp=1, max_ep=1),
                             job.space)]
    return [f for f in families if f is not None]


@pytest.mark.parametrize("case", [*CASES, *REFUSED])
@pytest.mark.parametrize("way", ["alike", "predicate", "alone"])
def test_cell_sets_are_the_sets_made_family_by_family(case, way, monkeypatch):
    """:func:`~topomodel.plan.coarse.cell_sets` (a set's families decided per schedule
    and interleave) makes the sets, floors, members, holders and counts that deciding
    every family alone makes: with families that read only the limited fields, with a
    predicate that reads ZeRO (holders found per family), and with the families' checks
    made one by one (``_unshaped_pass`` refused)."""
    fabric = build_fabric(*load_design("two.yaml", text=DESIGN))
    job = _job(fabric, case)
    families = _families_of(job)
    if way == "predicate":
        families.append(Family("ZeRO 1", lambda f: f["zero"] == 1))
    if way == "alone":
        monkeypatch.setattr(coarse, "_unshaped_pass", lambda *_: False)
    new_tops, old_tops = Tops(job.top, families), Tops(job.top, families)
    entries = decided_all = 0
    for ci, c in enumerate(search.plan_cells(fabric, job)):
        axes = cell_axes(job.model, c, job.base, job.space)
        new_cell = groups.CellMemo(cell_orders(c, job.space))
        made, decided = (coarse.cell_sets(fabric, job, ci, axes, new_cell, new_tops, 0.0,
                                          OrderMemo()) if axes is not None else ([], 0))
        old = _sets_one_by_one(fabric, job, ci, groups.CellMemo(cell_orders(c, job.space)),
                               old_tops, OrderMemo())
        assert [(e.bound, e.place, list(e.members)) for e in made] == old
        for e, (_, _, members) in zip(made, old, strict=True):
            assert e.holders == tuple(sorted({h for m in members for h in m.holders}))
            assert sorted(e.counts()) == sorted((m.holders, m.orders) for m in members)
        entries += len(made)
        decided_all += decided
    assert entries > 10
    assert new_tops.tallies == old_tops.tallies
    assert (new_tops.tallies[0].invalid > 0) == (case in REFUSED)
    whole = new_tops.tallies[0]
    assert decided_all == whole.invalid + whole.over_limit
    assert [list(t.reasons) for t in new_tops.tallies] == [list(t.reasons)
                                                           for t in old_tops.tallies]


@pytest.mark.parametrize("case", [*CASES, *REFUSED])
def test_search_sets_takes_cells_by_depth_and_counts_them_in_order(case):
    """:func:`~topomodel.plan.coarse.search_sets` (cells taken by pipeline depth, the
    schedules held) gives the entries and counts of :func:`~topomodel.plan.coarse.
    cell_sets` over the cells in the order asked (here backwards), reasons in order."""
    fabric = build_fabric(*load_design("two.yaml", text=DESIGN))
    job = _job(fabric, case)
    families = _families_of(job)
    all_cells = search.plan_cells(fabric, job)
    order = list(range(len(all_cells)))[::-1]
    assert len({c.pp for c in all_cells}) > 1
    by_depth = Tops(job.top, families)
    made, decided = coarse.search_sets(fabric, job, all_cells, order, by_depth, 0.0,
                                       OrderMemo())
    in_order = Tops(job.top, families)
    expected, done = [], 0
    for ci in order:
        axes = cell_axes(job.model, all_cells[ci], job.base, job.space)
        if axes is not None:
            entries, n = coarse.cell_sets(fabric, job, ci, axes, groups.CellMemo(
                cell_orders(all_cells[ci], job.space)), in_order, 0.0, OrderMemo())
            expected += entries
            done += n
    assert [(e.bound, e.place, list(e.members)) for e in made] == [
        (e.bound, e.place, list(e.members)) for e in expected]
    assert decided == done
    assert by_depth.tallies == in_order.tallies
    assert [list(t.reasons.items()) for t in by_depth.tallies] == [
        list(t.reasons.items()) for t in in_order.tallies]
