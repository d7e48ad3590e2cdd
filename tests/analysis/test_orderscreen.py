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
