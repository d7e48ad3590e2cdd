"""The order screen's operations' part (screen_works) against the step's recorded works."""

from __future__ import annotations

import numpy as np
import pytest
from test_plan import DESIGN
from test_stepbound import CASES, _fitting_layouts

from topomodel.analysis.training.compute import shared_device_model
from topomodel.analysis.training.orderscreen import screen_works
from topomodel.analysis.training.step import step_works
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.plan.callfloors import order_calls


def _from_step_works(model, layout, a, shape, calls):
    """What screen_works read before: the step's own chunk works, recorded (a unit per
    distinct work object, numbered where it first appears, kind by stage by chunk)."""
    idle = {n: c.timed(0.0, c.latency_s, c.bandwidth_s, c.topology_s)
            for n, c in calls.items()}
    device = shared_device_model(shape.accelerator, a.compute_dtype,
                                 override=a.compute_efficiency,
                                 hbm_efficiency=a.hbm_efficiency)
    works = step_works(device, model, layout, a, shape.seq, idle,
                       shape.sizes - shape.moe_sizes, shape.moe_sizes, record=True)
    units, unique, places, of = {}, [], [], []
    for kind, rows in enumerate(works):
        for st, row in enumerate(rows):
            for c, work in enumerate(row):
                u = units.setdefault(id(work), len(unique))
                if u == len(unique):
                    unique.append(work)
                places.append((kind, st, c))
                of.append(u)
    keys = [t[0] for work in unique for t in work.terms or ()]
    terms = [(n, max(0.0, b), sh, w, u) for u, work in enumerate(unique)
             for _, n, b, sh, w in work.terms or ()]
    s = shape.schedule
    unit_of = np.zeros((3, s.p, s.v), dtype=np.int64)
    unit_of[tuple(np.array(places).T)] = of
    return (tuple(keys), np.array(terms, dtype=float).reshape(-1, 5),
            unit_of[s.kind, np.arange(s.p)[:, None], s.chunk], len(unique))


@pytest.mark.parametrize("case", list(CASES))
def test_screen_works_are_the_step_works_terms(case):
    """Bit for bit the terms, units and critical path the step's recorded works give,
    for every fitting layout of each case (dense and MoE, interleaved, ZB-H1, DualPipe)."""
    fabric = build_fabric(*load_design("two.yaml", text=DESIGN))
    name, _, _, a = CASES[case]
    model = fabric.catalog.get(name, Model)
    checked = 0
    for fields, layout, shape, pipeline in _fitting_layouts(fabric, case):
        calls, _ = order_calls(fabric, model, layout, a, shape)
        works = screen_works(model, layout, a, shape, pipeline, calls)
        keys, terms, op_units, count = _from_step_works(model, layout, a, shape, calls)
        assert works.term_keys == keys, fields
        assert works.term.tobytes() == terms.tobytes(), fields
        assert works.op_units.dtype == op_units.dtype, fields
        assert np.array_equal(works.op_units, op_units), fields
        assert works.stage_units.shape[1] == count, fields
        assert works.stage_units.sum() == shape.schedule.p * shape.schedule.ops, fields
        checked += 1
    assert checked > 20


def test_a_stages_runs_at_once_are_each_runs_own():
    """``_stage_runs`` makes every bucket of a stage at once: bit for bit the ready
    times :func:`~topomodel.analysis.training.buckets.ready_times_s` gives run by run,
    and the kinds, shares, passes and places the runs give one after another."""
    from topomodel.analysis.training.buckets import ready_times_s
    from topomodel.analysis.training.orderscreen import _stage_runs
    from topomodel.analysis.training.pipeline import timeline
    from topomodel.analysis.training.stepshape import cached_schedule

    sched = cached_schedule("1f1b", 4, 8, 2)
    rng = np.random.default_rng(7)
    durations = rng.uniform(1e-4, 3e-3, (4, sched.ops))
    tl = timeline(sched, durations, np.full((4, 2), 1e-4))
    places: dict[tuple[int, int], int] = {}
    for st in range(4):
        runs = [(("dp", "edp")[int(k) % 2], int(n), int(pos)) for k, n, pos in zip(
            rng.integers(0, 2, 5), rng.integers(1, 40, 5), rng.integers(0, sched.ops, 5),
            strict=True)]
        before = dict(places)
        r, dp, share, at, filled = _stage_runs(tl, st, runs, places)
        one = dict(before)
        assert np.array_equal(r, np.concatenate(
            [ready_times_s(tl, st, n, pos) for _, n, pos in runs]))
        assert np.array_equal(dp, np.concatenate([np.full(n, key == "dp")
                                                  for key, n, _ in runs]))
        by_run = np.concatenate([(np.arange(n) + 1) / n for _, n, _ in runs])
        assert np.array_equal(share, by_run)
        assert np.array_equal(at, np.concatenate(
            [np.full(n, one.setdefault((st, pos), len(one))) for _, n, pos in runs]))
        assert one == places
        assert np.array_equal(filled, np.concatenate(
            [np.full(n, float(pos)) for _, n, pos in runs]) + by_run)
