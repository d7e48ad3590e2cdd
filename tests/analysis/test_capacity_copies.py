"""What the claim search's steps share, each reuse exact: a copy of a fabric with other
scale-out rates (:meth:`Fabric.with_capacities`, ``scale_scaleout(recable=False)``) times
the routes kept on the original, and a step there is, bit for bit, the step of a fabric
built with those rates and nothing kept; a batch or a compute efficiency changes no
collective, so those steps time no collective again and equal a fresh fabric's step."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from topomodel.analysis.assumptions import StepAssumptions
from topomodel.analysis.collectives.routes import kept_routes
from topomodel.analysis.training.step import step_time
from topomodel.analysis.training.stepshape import collective_times, step_traffic
from topomodel.analysis.training.studies import scale_scaleout
from topomodel.fabric.build import build_fabric
from topomodel.fabric.structure import measure_injection
from topomodel.fabric.tables import link_weaker_Bps
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.traffic.layout import Layout
from topomodel.vocabulary import SCALE_OUT_TIERS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TWO_SUPERNODES = ("system: cloudmatrix384-node\nsystems: 192\nscaleup:\n  kind: supernode\n"
                  "  switch: ub-l2\n  uplinks: 16\n  systems_per_domain: 96\n"
                  "scaleout:\n  kind: fat_tree\n  switch: tomahawk5\n  planes: 2\n"
                  "  port_rate: \"200 Gb/s /dir\"\n  rail_optimized: true\n")
"""Two 96-system supernodes joined by a two-plane RoCE fat-tree (hash routing)."""


def fresh(path):
    return build_fabric(*load_design(path))


def scaled_without_sharing(fabric, factor):
    """The copy as scale_scaleout made it before copies shared views: a new table, no
    view of the original."""
    links = fabric.links.copy()
    out = links["tier"].isin(SCALE_OUT_TIERS)
    links.loc[out, "capacity_Bps"] *= factor
    links.loc[out, "rate_Bps"] *= factor
    copy = fabric.with_frames(links=links)
    return replace(copy, injection=measure_injection(
        copy.node_arrays, copy.link_arrays, fabric.structure, fabric.reverse_rows))


@pytest.fixture(scope="module")
def supernodes(tmp_path_factory):
    path = tmp_path_factory.mktemp("sn") / "two-supernodes.yaml"
    path.write_text(TWO_SUPERNODES)
    return path


CASES = {
    # (design, model, layout, routing): an IB fat-tree (even split) and a RoCE one
    # between two supernodes (hash: the seed's routes are what is shared)
    "superpod": (EXAMPLES / "dgx-h100-superpod.yaml", "llama3-70b",
                 Layout(tp=8, pp=4, dp=31), "auto"),
    "supernodes": (None, "deepseek-v3", Layout(pp=16, dp=96, ep=32, zero=0), "auto"),
}


def case(name, supernodes):
    path, model, layout, routing = CASES[name]
    return path or supernodes, model, layout, routing


def test_a_capacity_copy_is_the_old_what_if_and_leaves_the_original(example_fabric):
    fabric = example_fabric("dgx-h100-superpod")
    before = fabric.links.copy()
    copy = scale_scaleout(fabric, 0.25, recable=False)
    oracle = scaled_without_sharing(fabric, 0.25)
    pd.testing.assert_frame_equal(copy.links, oracle.links)
    for name in ("nic", "scaleup_Bps", "scaleout_Bps", "host_Bps", "nic_ports_Bps"):
        assert np.array_equal(getattr(copy.injection, name), getattr(oracle.injection, name))
    assert copy.injection.bisection_Bps == oracle.injection.bisection_Bps
    pd.testing.assert_frame_equal(fabric.links, before)  # the original is untouched
    # the routes and the traffic are shared; the rates and the times are not
    assert copy.derived(kept_routes) is fabric.derived(kept_routes)
    assert copy.derived(step_traffic) is fabric.derived(step_traffic)
    assert copy.derived(collective_times) is not fabric.derived(collective_times)
    assert not np.array_equal(copy.derived(link_weaker_Bps), fabric.derived(link_weaker_Bps))


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("factor", [0.25, 2.0])
def test_a_step_on_a_capacity_copy_is_a_fresh_fabrics_bit_for_bit(name, factor, supernodes,
                                                                  monkeypatch):
    from topomodel.analysis.collectives import routes

    path, model_id, layout, routing = case(name, supernodes)
    fabric = fresh(path)
    model = fabric.catalog.get(model_id, Model)
    a = StepAssumptions(compute_efficiency=0.7)  # the 910C has no GEMM sweep
    step_time(fabric, model, layout, a, routing=routing)  # routes kept on the original
    routed = []
    real = routes.route

    def spy(fabric, ph, **options):
        routed.append(ph)
        return real(fabric, ph, **options)

    monkeypatch.setattr(routes, "route", spy)
    reused = step_time(scale_scaleout(fabric, factor, recable=False), model, layout, a,
                       routing=routing)
    assert not routed  # every phase's routes were the original's, the all-to-all's too
    monkeypatch.undo()
    alone = fresh(path)
    oracle = step_time(scaled_without_sharing(alone, factor), model, layout, a,
                       routing=routing)
    assert reused == oracle
    assert reused.step_time_s == oracle.step_time_s  # floats, bit for bit (== above)


@pytest.mark.parametrize("name", list(CASES))
def test_batch_and_compute_efficiency_time_no_collective_again(name, supernodes):
    path, model_id, layout, routing = case(name, supernodes)
    fabric = fresh(path)
    model = fabric.catalog.get(model_id, Model)
    a = StepAssumptions(compute_efficiency=0.7)  # the 910C has no GEMM sweep
    first = step_time(fabric, model, layout, a, routing=routing)
    timed = dict(fabric.derived(collective_times))
    variants = [(replace(layout, global_batch=first.global_batch * 4), a),
                (replace(layout, global_batch=first.global_batch // 2), a),
                (layout, replace(a, compute_efficiency=0.3))]
    for lay, assumptions in variants:
        got = step_time(fabric, model, lay, assumptions, routing=routing)
        assert fabric.derived(collective_times) == timed  # no collective timed again
        assert got == step_time(fresh(path), model, lay, assumptions, routing=routing)
