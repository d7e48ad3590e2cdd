"""The planner's per-layout caches and fast paths against the slow paths they stand
for: :func:`~topomodel.traffic.layout.evolve` against ``dataclasses.replace``, the
chunk works :func:`~topomodel.analysis.training.stagework.chunk_work` keeps against
ones made afresh, and a whole plan with them against one without them (the same top,
step for step, and the same counts)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from topomodel.analysis.training import memory as memory_module
from topomodel.analysis.training import orderscreen as orderscreen_module
from topomodel.analysis.training import step as step_module
from topomodel.analysis.training import stepbound as stepbound_module
from topomodel.analysis.training.compute import shared_device_model, shared_layer_times
from topomodel.analysis.training.memory import forget_held, forget_stage_parameters
from topomodel.analysis.training.model import BYTES
from topomodel.analysis.training.stagework import (
    Call,
    chunk_work,
    forget_chunk_works,
    kept_chunks,
    op_durations,
)
from topomodel.analysis.training.step import StepAssumptions
from topomodel.analysis.training.stepbound import forget_frames
from topomodel.errors import UsageError
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Accelerator, Model
from topomodel.plan import groups
from topomodel.plan.search import PlanJob, plan_cells, search_cells
from topomodel.plan.space import PlanSpace, cell_families, cell_orders
from topomodel.traffic.layout import Layout, evolve

DESIGN = """
name: sixteen hgx
system: hgx-h100
systems: 16
scaleout:
  kind: fat_tree
  nic: connectx-7
  switch: qm9700
"""


@pytest.mark.parametrize("changes", [
    {"tp": 2, "pp": 4, "dp": 8}, {"zero": 0, "order": "pp,dp,cp,tp"}, {"zero": 3},
    {"tp": 0}, {"order": "tp,tp,dp,pp"}, {"dp": 4, "ep": 3}, {"recompute": "some"},
    {"schedule": "zb-h1", "interleave": 2}, {"micro_batch": True}, {}])
def test_evolve_is_replace(changes):
    """The same layout, or the same error, as ``dataclasses.replace``."""
    base = Layout(tp=4, dp=8, global_batch=64)
    try:
        expected: Layout | str = dataclasses.replace(base, **changes)
    except UsageError as exc:
        expected = str(exc)
    try:
        got: Layout | str = evolve(base, **changes)
    except UsageError as exc:
        got = str(exc)
    assert got == expected
    if isinstance(got, Layout):
        assert hash(got) == hash(expected)
        assert vars(got) == vars(expected)


def test_evolve_refuses_what_replace_refuses():
    with pytest.raises(TypeError, match="no field 'nope'"):
        evolve(Layout(), nope=1)


@pytest.fixture(scope="module")
def catalog():
    return load_design("mid.yaml", text=DESIGN)


def _works_as_numbers(works):
    return [[[(dict(w.parts), dict(w.issued), dict(w.calls), dict(w.exposed),
                list(w.terms) if w.terms is not None else None) for w in row]
             for row in kind] for kind in works]


@pytest.mark.parametrize("record", [False, True])
def test_kept_chunk_works_are_the_ones_made_afresh(catalog, record):
    """Chunk works found again (same times, calls and options) read as ones made with
    nothing kept, for dense and MoE models, timed and idle calls, any pipeline."""
    _, cat = catalog
    a = StepAssumptions()
    device = shared_device_model(cat.get("h100-sxm", Accelerator), a.compute_dtype)
    tp_call = Call("tp", "allgather", "ring", 1e6, 2e-4, 1e-5, 1.5e-4, 4e-5, False)
    rs_call = Call("tp", "reducescatter", "ring", 1e6, 3e-4, 1e-5, 2.5e-4, 4e-5, False)
    ep_call = Call("ep", "alltoall", "direct", 1e6, 5e-4, 1e-5, 4e-4, 9e-5, True)
    for name in ("llama3-8b", "deepseek-v3"):
        model = cat.get(name, Model)
        layout = Layout(tp=2, pp=4, dp=2, ep=2 if model.is_moe else 1, interleave=2,
                        recompute="selective")
        lt_dense, lt_moe, edges = shared_layer_times(
            device, model, layout, 4096, main_grad_bytes=BYTES[a.main_grad_dtype])
        dense = np.array([[4, 4], [4, 4], [4, 4], [3, 5]])
        moe = np.array([[1, 0], [1, 1], [0, 1], [1, 1]]) if model.is_moe else 0 * dense
        timed = {"tp_ag": tp_call, "tp_rs": rs_call, "ep": ep_call}
        slower = {n: dataclasses.replace(c, time_s=2 * c.time_s) for n, c in timed.items()}
        for calls in ({}, timed, slower):  # the last: the same names, other times
            times = (lt_dense, lt_moe, edges)

            def works(dense_layers, times=times, calls=calls, layout=layout, moe=moe):
                return chunk_work(*times, calls, layout, dense_layers, moe, hot=1.3,
                                  split_w=False, share=0.1, record=record)
            first = works(dense)
            again = works(dense)
            assert _works_as_numbers(again) == _works_as_numbers(first)
            other = works(dense[::-1].copy())  # the same key, other chunks
            forget_chunk_works()
            assert _works_as_numbers(works(dense)) == _works_as_numbers(first)
            forget_chunk_works()
            assert _works_as_numbers(works(dense[::-1].copy())) == _works_as_numbers(other)


def test_a_plan_with_its_caches_is_the_plan_without_them(catalog, monkeypatch):
    """A search with the per-layout caches and fast paths gives the top (layouts, places
    and steps, bit for bit) and the counts of one without them: layouts made with
    ``dataclasses.replace``, nothing kept between chunk works (nor the bounds' chunk
    figures), stage parameters, the memory a layout holds whatever its ZeRO stage, or
    bound frames."""
    design, cat = catalog
    model = cat.get("llama3-70b", Model)
    space = PlanSpace(max_tp=8, max_cp=1, max_micro_batch=2, max_interleave=2,
                      fixed={"sequence_parallel": True})
    job = PlanJob(model, Layout(global_batch=128, seq=4096), space, top=5)

    def run():
        fabric = build_fabric(design, cat)
        return search_cells(fabric, job, range(len(plan_cells(fabric, job))))

    fast = run()

    def afresh(make, forget):
        def made(*args, **kwargs):
            forget()
            return make(*args, **kwargs)
        return made

    monkeypatch.setattr(step_module, "chunk_work", afresh(chunk_work, forget_chunk_works))
    monkeypatch.setattr(stepbound_module, "op_durations", afresh(op_durations,
                                                                 forget_chunk_works))
    monkeypatch.setattr(orderscreen_module, "kept_chunks", afresh(kept_chunks,
                                                                  forget_chunk_works))
    monkeypatch.setattr(step_module, "stage_memory", afresh(memory_module.stage_memory,
                                                            forget_held))
    for module in (memory_module, step_module, stepbound_module, orderscreen_module):
        monkeypatch.setattr(module, "stage_parameters", afresh(
            memory_module.stage_parameters, forget_stage_parameters))
    for module in (stepbound_module, orderscreen_module):
        monkeypatch.setattr(module, "bound_frame", afresh(stepbound_module.bound_frame,
                                                          forget_frames))
    monkeypatch.setattr(groups, "evolve", dataclasses.replace)
    monkeypatch.setattr(stepbound_module, "evolve", dataclasses.replace)
    slow = run()
    assert [(r.place, r.score, r.result) for r in fast.best] == [
        (r.place, r.score, r.result) for r in slow.best]
    assert fast.tally == slow.tally
    assert fast.tally.evaluated > 5


@pytest.mark.parametrize("zeros", [(0, 1, 2, 3), (3, 2, 1, 0), (1, 0, 3, 2), (2, 0, 1, 3)])
def test_a_groups_fit_read_from_its_other_zero_stages_is_its_memorys(catalog, zeros):
    """Whether a group fits, read from its other ZeRO stages of 0-2 where they decide
    it, is its own memory's verdict, in whatever order the stages are asked (a space
    where some ZeRO stages of a layout fit and others do not)."""
    design, cat = catalog
    model = cat.get("llama3-70b", Model)
    space = PlanSpace(max_tp=8, max_cp=1, max_micro_batch=2, max_interleave=2,
                      fixed={"sequence_parallel": True})
    job = PlanJob(model, Layout(global_batch=128, seq=4096), space, top=5)
    fabric = build_fabric(design, cat)
    verdicts: set[tuple[bool, ...]] = set()
    for ci, cell in enumerate(plan_cells(fabric, job)):
        shared = groups.CellMemo(cell_orders(cell, space))
        by_key: dict[tuple, dict[int, groups.Group]] = {}
        for u, family in enumerate(cell_families(model, cell, job.base, space)):
            _, group = groups.group_of(fabric, job, (ci, u), family, 0.0, shared)
            if group is not None:
                by_key.setdefault(group.unordered, {})[group.layout.zero] = group
        for stages in by_key.values():
            asked = [stages[z] for z in zeros if z in stages]
            got = [g.fits(job) for g in asked]
            assert got == [step_module.shape_memory(model, g.layout, job.assumptions,
                                                    g.shape).fits(job.headroom)
                           for g in asked]
            verdicts.add(tuple(got))
    assert any(len(set(v)) > 1 for v in verdicts)  # some layouts fit at some stages only
