"""The planner's first pass (:func:`~topomodel.plan.groups.group_of` over every family of
every cell) against the general path it stands for: the layout made in one step, its
shape found afresh, every operation of its step (:func:`step_ops`) summed per stage and
the cheap bound's frame made from its parts; the same reason for every invalid family
and the same score, bit for bit, for every valid one."""

from __future__ import annotations

import dataclasses
import weakref

import numpy as np
import pytest

from topomodel.analysis import opsums
from topomodel.analysis.opsums import chunk_map, row_sums
from topomodel.analysis.training.compute import shared_device_model
from topomodel.analysis.training.model import flops_per_token
from topomodel.analysis.training.stagework import Call
from topomodel.analysis.training.step import StepAssumptions, step_ops
from topomodel.analysis.training.stepbound import BoundFrame, CommFreePipeline, busy_pipeline
from topomodel.analysis.training.stepshape import partition, shape_of
from topomodel.analysis.training.syncwait import sync_wait
from topomodel.errors import UsageError
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.plan.groups import CellMemo, group_of
from topomodel.plan.orderbounds import rank_score
from topomodel.plan.search import PlanJob, plan_cells
from topomodel.plan.space import PlanSpace, cell_families, cell_orders
from topomodel.traffic.layout import Layout

DESIGN = """
name: four hgx
system: hgx-h100
systems: 4
scaleout:
  kind: fat_tree
  nic: connectx-7
  switch: qm9700
"""

JOBS = {
    "dense": ("llama3-8b", Layout(global_batch=32, seq=4096),
              PlanSpace(max_tp=4, max_micro_batch=2, max_interleave=4, max_cp=2),
              StepAssumptions()),
    "dense, default batch": ("llama3-8b", Layout(seq=2048),
                             PlanSpace(max_tp=2, max_micro_batch=2, max_interleave=3,
                                       max_cp=1), StepAssumptions(jitter_cv=0.03)),
    "moe": ("mixtral-8x7b", Layout(global_batch=32, seq=4096),
            PlanSpace(max_tp=2, max_micro_batch=2, max_interleave=3, max_cp=1),
            StepAssumptions(hot_expert_factor=1.3, compute_efficiency=0.7)),
    "moe, dualpipe": ("mixtral-8x7b", Layout(global_batch=16, seq=4096,
                                             ep_overlap="dualpipe"),
                      PlanSpace(max_tp=2, max_micro_batch=1, max_interleave=2, max_cp=1),
                      StepAssumptions()),
}


def _general(fabric, job, family, power_W):
    """The first pass's verdict on ``family`` by the general path: the reason it is
    invalid, or its cheap bound's score."""
    model, a = job.model, job.assumptions
    try:
        layout = dataclasses.replace(job.base, **family)
        shape = shape_of(fabric, model, layout)
    except UsageError as exc:
        return str(exc)
    device = shared_device_model(shape.accelerator, a.compute_dtype,
                                 override=a.compute_efficiency,
                                 hbm_efficiency=a.hbm_efficiency)
    calls = {}
    if layout.ep > 1 and model.is_moe:
        calls["ep"] = Call("ep", "alltoall", "direct", 1.0, 0.0, 0.0, 0.0, 0.0, False)
    ops = step_ops(device, model, layout, a, shape.seq, shape.schedule, calls,
                   shape.sizes - shape.moe_sizes, shape.moe_sizes)
    busy = np.asarray(ops.duration_s, dtype=float).sum(axis=1)
    dualpipe = layout.ep_overlap == "dualpipe"
    pipeline = CommFreePipeline(busy, ops.compute_s.sum(axis=1), busy, dualpipe)
    model_flops, _ = flops_per_token(model, shape.seq, recompute=layout.recompute)
    bound = BoundFrame(np.zeros(layout.pp), sync_wait(a, layout.world).share, 0.0,
                       shape.global_batch * shape.seq, model_flops,
                       layout.world * device.peak_flops).bound(pipeline)
    score = rank_score(bound, job, power_W)
    return score if score == score else float("inf")


@pytest.mark.parametrize("case", list(JOBS))
def test_the_first_pass_is_the_general_path(case):
    """Every family of every cell: the same reason, or the same score bit for bit, as
    the layout, shape, operations and frame made afresh; across PP 1 and more,
    interleave depths, both schedules, recomputation, SP, EP and ZeRO."""
    name, base, space, a = JOBS[case]
    fabric = build_fabric(*load_design("four.yaml", text=DESIGN))
    job = PlanJob(fabric.catalog.get(name, Model), base, space, a, top=3)
    power_W = 1.0e6
    seen = {"valid": 0, "invalid": 0, "pp": set(), "v": set(), "schedule": set()}
    for ci, c in enumerate(plan_cells(fabric, job)):
        cell = CellMemo(cell_orders(c, job.space))
        for u, family in enumerate(cell_families(job.model, c, job.base, job.space)):
            reason, group = group_of(fabric, job, (ci, u), family, power_W, cell)
            expected = _general(fabric, job, family, power_W)
            if group is None:
                assert reason == expected, family
                seen["invalid"] += 1
                continue
            assert group.bound == expected, family
            assert group.stand_in == dataclasses.replace(
                job.base, **{**family, "zero": group.stand_in.zero}), family
            assert group.layout == dataclasses.replace(job.base, **family)
            seen["valid"] += 1
            seen["pp"].add(family["pp"])
            seen["v"].add(family["interleave"])
            seen["schedule"].add(family["schedule"])
    assert seen["valid"] > 20
    assert len(seen["pp"]) > 1 and len(seen["schedule"]) > 1
    assert case == "moe, dualpipe" or len(seen["v"]) > 1


def test_an_invalid_family_keeps_its_one_step_reason():
    """Where a family's fields are refused (here a base whose global batch is below
    one microbatch per DP rank, found by the shape, and a recomputation the layout
    refuses), the reason is what the layout made in one step, then its shape, give."""
    fabric = build_fabric(*load_design("four.yaml", text=DESIGN))
    job = PlanJob(fabric.catalog.get("llama3-8b", Model), Layout(global_batch=2, seq=4096),
                  PlanSpace(max_micro_batch=2, max_interleave=2), top=1)
    cells = plan_cells(fabric, job)
    reasons = set()
    for ci, c in enumerate(cells):
        cell = CellMemo(cell_orders(c, job.space))
        for family in cell_families(job.model, c, job.base, job.space):
            for changed in (family, {**family, "recompute": "sometimes"}):
                reason, group = group_of(fabric, job, (ci, 0), changed, 0.0, cell)
                expected = _general(fabric, job, changed, 0.0)
                if group is None:
                    assert reason == expected
                    reasons.add(reason.split(":")[0])
                else:
                    assert group.bound == expected
    assert len(reasons) > 1


def test_a_partition_and_its_chunk_map_are_shared_and_read_only():
    """:func:`partition` gives the same arrays to every shape on a pipeline, read-only,
    and :func:`chunk_map`'s distinct chunks stand for every chunk of it."""
    fabric = build_fabric(*load_design("four.yaml", text=DESIGN))
    model = fabric.catalog.get("mixtral-8x7b", Model)
    sizes, moe = partition(model, 4, 2)
    assert partition(model, 4, 2)[0] is sizes
    with pytest.raises(ValueError, match="read-only"):
        sizes[0, 0] = 0
    assert int(sizes.sum()) == model.layers
    chunks = chunk_map(sizes - moe, moe)
    whats = [chunks.whats[i] for i in chunks.inverse]
    p, v = sizes.shape
    assert whats == [(int(sizes[s, c] - moe[s, c]), int(moe[s, c]), s == 0 and c == 0,
                      s == p - 1 and c == v - 1) for s in range(p) for c in range(v)]


@pytest.fixture(params=["as set", "always"])
def row_sums_everywhere(request, monkeypatch):
    """The busy pipeline's sums through distinct blocks where they gain (as set), or on
    every schedule (always)."""
    made = []
    if request.param == "always":
        monkeypatch.setattr(opsums, "ROW_SUMS_FROM", 0)
        monkeypatch.setattr(opsums, "ROW_SUMS_GAIN", 0)
        monkeypatch.setattr(opsums, "_OP_SUMS", weakref.WeakKeyDictionary())

        def counted(symbols):
            made.append(symbols.shape)
            return row_sums(symbols)

        monkeypatch.setattr(opsums, "row_sums", counted)
    return made


@pytest.mark.parametrize("case", ["dense", "moe"])
def test_the_first_pass_with_row_sums_on_every_schedule(case, row_sums_everywhere):
    """The first pass with every schedule's rows summed through their distinct blocks
    is the general path's too (``always``: every schedule's rows through them)."""
    test_the_first_pass_is_the_general_path(case)
    assert len(row_sums_everywhere) > 10 or not row_sums_everywhere


@pytest.mark.parametrize(("name", "fields"), [
    ("llama3-8b", {"tp": 8, "pp": 4, "dp": 1}),
    ("llama3-8b", {"tp": 4, "pp": 8, "dp": 1, "interleave": 2, "recompute": "full"}),
    ("llama3-8b", {"tp": 8, "pp": 2, "dp": 2, "schedule": "zb-h1",
                   "sequence_parallel": False}),
    ("mixtral-8x7b", {"tp": 2, "pp": 4, "dp": 4, "ep": 4, "recompute": "selective"}),
    ("mixtral-8x7b", {"tp": 4, "pp": 8, "dp": 1, "schedule": "zb-h1"})])
def test_a_long_schedules_busy_pipeline_is_its_operations_sums(name, fields):
    """On schedules of thousands of microbatches (summed through their distinct
    blocks), every stage's busy time and compute are the sums of the operations
    :func:`step_ops` makes, bit for bit."""
    fabric = build_fabric(*load_design("four.yaml", text=DESIGN))
    model = fabric.catalog.get(name, Model)
    a = StepAssumptions(hot_expert_factor=1.2)
    layout = Layout(global_batch=8192, seq=2048, **fields)
    shape = shape_of(fabric, model, layout)
    assert layout.pp * shape.schedule.ops >= opsums.ROW_SUMS_FROM
    device = shared_device_model(shape.accelerator, a.compute_dtype,
                                 override=a.compute_efficiency,
                                 hbm_efficiency=a.hbm_efficiency)
    calls = {}
    if layout.ep > 1:
        calls["ep"] = Call("ep", "alltoall", "direct", 1.0, 0.0, 0.0, 0.0, 0.0, False)
    ops = step_ops(device, model, layout, a, shape.seq, shape.schedule, calls,
                   shape.sizes - shape.moe_sizes, shape.moe_sizes)
    busy = busy_pipeline(model, layout, a, shape)
    assert np.array_equal(busy.busy_s, np.asarray(ops.duration_s).sum(axis=1))
    assert np.array_equal(busy.compute_s, ops.compute_s.sum(axis=1))
