"""The step bound's second pipeline term (:mod:`topomodel.analysis.training.stepbound`):
the longest paths of a run by how many sends hold them up (:func:`stage_paths`) and the
least a critical path can take when the sends may be slower (:func:`least_path_end`)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from test_plan import DESIGN  # the same two HGX servers

from topomodel.analysis.training.pipeline import schedule, timeline
from topomodel.analysis.training.step import StepAssumptions, step_time
from topomodel.analysis.training.stepbound import (
    bound_frame,
    bound_with_calls,
    comm_free_pipeline,
    least_path_end,
    stage_paths,
    step_bound,
)
from topomodel.analysis.training.stepcalls import step_calls
from topomodel.analysis.training.stepshape import shape_of
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.plan.callfloors import order_calls
from topomodel.traffic.layout import Layout

SCHEDULES = [("1f1b", 4, 3, 1), ("1f1b", 6, 2, 1), ("1f1b", 4, 8, 2), ("zb-h1", 5, 4, 1),
             ("1f1b", 3, 6, 3)]


def _run(name, p, m, v, send_s, blocking, ready=None, seed=0):
    s = schedule(name, p, m, v)
    durations = np.random.default_rng(seed).uniform(0.5, 2.0, (p, s.ops))
    return timeline(s, durations, np.full((p, 2), send_s), stage_ready_s=ready,
                    blocking_sends=blocking)


@pytest.mark.parametrize(("sched", "blocking"), itertools.product(SCHEDULES, [False, True]))
def test_the_paths_are_the_runs_longest(sched, blocking):
    """With the sends the run took, the longest path from a stage's first operation,
    its sends added, is the run's makespan less that stage's start when the stage
    starts last by far (and the longest of all, the makespan)."""
    send_s = 0.3
    tl = _run(*sched, send_s, blocking)
    paths = stage_paths(tl, blocking)
    counts = np.arange(paths.shape[1])
    through = (paths + counts * send_s).max(axis=1)
    assert through.max() == pytest.approx(tl.makespan_s, rel=1e-12)
    late = 1e3  # one stage held back: every path through its first operation is late
    for stage in range(tl.schedule.p):
        ready = np.zeros(tl.schedule.p)
        ready[stage] = late
        held = _run(*sched, send_s, blocking, ready=ready)
        assert held.makespan_s - late == pytest.approx(through[stage], abs=1e-9)


@pytest.mark.parametrize("sched", SCHEDULES)
def test_the_paths_do_not_read_the_send_time(sched):
    """The paths count sends and add only the operations: two runs with other send
    times give the same paths (their operations take the same)."""
    fast, slow = _run(*sched, 0.01, True), _run(*sched, 0.7, True)
    assert np.allclose(stage_paths(fast, True), stage_paths(slow, True), rtol=0, atol=1e-9)


def test_the_least_path_end_is_the_least_over_send_times():
    """Against a fine grid of send times: never above the least found there, and close."""
    rng = np.random.default_rng(1)
    for _ in range(200):
        width = int(rng.integers(2, 12))
        paths = np.sort(rng.uniform(0, 10, width))
        paths[rng.random(width) < 0.3] = -np.inf
        paths[-1] = max(paths[-1], 1.0)  # some path crosses the most sends
        own, floor_s = int(rng.integers(0, width)), float(rng.uniform(0, 0.5))
        found = least_path_end(paths, floor_s, own)
        h = np.flatnonzero(paths > -np.inf)
        slope = h - max(0, h.max() - own)
        x = np.linspace(floor_s, floor_s + 50, 20001)
        grid = (paths[h][:, None] + slope[:, None] * x[None, :]).max(axis=0)
        assert found <= grid.min() + 1e-9
        assert found >= grid.min() - 50 / 20000 * width


@pytest.fixture(scope="module")
def fabric():
    return build_fabric(*load_design("two.yaml", text=DESIGN))


# deep pipelines on few micro-batches: their paths cross more sends than a stage's own,
# so the first pipeline term keeps only a share of the bubble (none with ZeRO 1-2 where
# a stage holds no bucket of a kind)
DEEP = [Layout(pp=16, global_batch=g, seq=4096, zero=z, order=o, schedule=sc,
               pp_blocking=b)
        for g, z, o, sc, b in itertools.product([2, 4], [0, 1], ["tp,cp,dp,pp", "pp,tp,cp,dp"],
                                                ["1f1b", "zb-h1"], [True, False])]


@pytest.mark.parametrize("layout", DEEP, ids=lambda x: f"{x.global_batch}-{x.zero}-"
                         f"{x.order}-{x.schedule}-{x.pp_blocking}")
def test_deep_pipelines_are_bounded_below_their_step_and_near_it(fabric, layout):
    """The comm-free bound, the order's bound with its collectives' floors and with its
    own times: each at most the step, and the comm-free one within a quarter of it (the
    share alone kept ~1/3 of the bubble: at most 0.6 of the step here)."""
    model = fabric.catalog.get("llama3-8b", Model)
    a = StepAssumptions()
    shape = shape_of(fabric, model, layout)
    step = step_time(fabric, model, layout, a).step_time_s
    pipeline = comm_free_pipeline(model, layout, a, shape)
    assert bound_frame(model, layout, a, shape, pipeline).share < 1
    free = step_bound(model, layout, a, shape, pipeline, paths=True).step_time_s
    floors, _ = order_calls(fabric, model, layout, a, shape)
    placed, _ = step_calls(fabric, model, layout, a, shape=shape)
    for calls in (floors, placed):
        assert bound_with_calls(model, layout, a, shape, calls).step_time_s <= step
    assert free <= step
    assert free > 0.75 * step
