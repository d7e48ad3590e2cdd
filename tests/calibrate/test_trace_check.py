"""Traces measured and beside the model (calibrate/tracesteps.py, calibrate/trace.py,
``topomodel check-trace``): closed forms on the hand-written NCCL excerpt, the span
arithmetic against a brute-force oracle, the recorded gloo traces, and the verb."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from topomodel.analysis.training.step import step_time
from topomodel.calibrate.trace import COMM_BOUND_SHARE, check_trace
from topomodel.calibrate.tracesteps import measure_traces, merged, overlap_s
from topomodel.cli import main
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.measured.kineto import read_traces
from topomodel.inputs.parts import Model
from topomodel.traffic.collectives import busbw_factor
from topomodel.traffic.layout import Layout

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "traces"
HGX = ROOT / "examples" / "hgx-h100-server.yaml"
US = 1e-6


@cache
def excerpt():
    return measure_traces(read_traces([DATA / "nccl-excerpt"]))


def test_the_excerpts_steps_by_closed_form():
    """Rank 0, step 10: gemms [0, 4000) and [4100, 8000) us; reduce-scatter [3000, 4500)
    (hidden but for [4000, 4100)), all-reduce 610 us, all-gather 700 us and a send of
    40 us after the compute. Rank 1's all-reduce takes 560 us: rank 0 waited 50 us."""
    steps = {(s.rank, s.step): s for s in excerpt().steps}
    s = steps[(0, 10)]
    assert s.step_s == pytest.approx(10000 * US)
    assert s.compute_s == pytest.approx(7900 * US)
    assert s.comm_s == pytest.approx((1500 + 610 + 700 + 40) * US)
    assert s.exposed_comm_s + s.wait_s == pytest.approx((100 + 610 + 700 + 40) * US)
    assert s.wait_s == pytest.approx(50 * US)
    assert s.idle_s == pytest.approx((10000 - 7900 - 1450) * US)
    hidden = steps[(0, 11)]  # one 8 ms gemm hides the whole reduce-scatter
    assert hidden.exposed_comm_s + hidden.wait_s == pytest.approx((610 + 700 + 40) * US)
    assert steps[(1, 10)].wait_s == 0.0  # the last to arrive waits for nobody
    assert s.comm_share == pytest.approx(1450 / 10000)


def test_the_excerpts_collectives_and_busbw():
    rows = {c.kind: c for c in excerpt().collectives}
    ar = rows["allreduce"]
    assert (ar.calls, ar.size_bytes, ar.group_size) == (4, 2 * 67108864, 8)
    assert ar.time_s == pytest.approx(585 * US)  # median of 610, 610, 560, 560
    assert ar.transfer_s == pytest.approx(560 * US)
    assert ar.busbw_Bps == pytest.approx(2 * 67108864 / (585 * US) * busbw_factor("allreduce", 8))
    assert ar.algorithms == "RING/LL128"
    assert rows["sendrecv"].busbw_Bps == pytest.approx(2 * 1048576 / (40 * US))
    assert excerpt().comm_per_step_s("allreduce") == pytest.approx(585 * US)


def test_span_arithmetic_against_a_unit_grid():
    rng = np.random.default_rng(7)
    for _ in range(50):
        spans = []
        for _ in range(2):
            n = int(rng.integers(0, 12))
            start = rng.integers(0, 90, n).astype(float)
            spans.append((start, start + rng.integers(0, 15, n)))
        grid = [np.zeros(120, bool) for _ in spans]
        for g, (s, e) in zip(grid, spans, strict=True):
            for a, b in zip(s.astype(int), e.astype(int), strict=True):
                g[a:b] = True
        a, b = (merged(*x) for x in spans)
        assert (a[1] - a[0]).sum() == grid[0].sum()
        assert np.all(a[0][1:] > a[1][:-1])  # disjoint and sorted
        assert overlap_s(a, b) == (grid[0] & grid[1]).sum()


def test_the_recorded_gloo_job_measures_every_step():
    measure = measure_traces(read_traces([DATA / "gloo-2rank"]))
    assert len(measure.steps) == 8 and measure.device == "cpu"
    for s in measure.steps:
        assert 0 < s.compute_s <= s.step_s
        assert s.exposed_comm_s + s.wait_s <= s.comm_s + 1e-12
        assert s.compute_s + s.exposed_comm_s + s.wait_s + s.idle_s == pytest.approx(s.step_s)
    assert {c.size_bytes for c in measure.collectives} == {4.0, 2 * (256 * 256 + 256) * 4}


@cache
def hgx_check():
    design, catalog = load_design(HGX)
    fabric = build_fabric(design, catalog)
    step = step_time(fabric, catalog.get("llama3-8b", Model), Layout(dp=8))
    return check_trace(fabric, excerpt(), step), step


def test_the_model_side_is_the_collective_and_step_models():
    check, step = hgx_check()
    by_kind = {c.measured.kind: c for c in check.collectives}
    ar = by_kind["allreduce"]
    assert ar.model_time_s and ar.model_busbw_Bps
    assert ar.busbw_ratio == pytest.approx(ar.measured.busbw_Bps / ar.model_busbw_Bps)
    parts = {p.part: p for p in check.parts}
    assert parts["step"].model_s == step.step_time_s
    assert parts["exposed communication"].model_s == step.exposed_comm_s
    assert parts["compute"].measured_s == pytest.approx(7950 * US)
    kinds = {k.kind: k for k in check.kinds}
    assert kinds["allreduce"].measured_time_s == pytest.approx(585 * US)
    assert sum(k.model_time_s for k in check.kinds) == pytest.approx(
        sum(c.time_s for c in step.comm))
    assert check.threshold == COMM_BOUND_SHARE == 0.30
    assert check.verdict(0.31) == "communication-bound"
    assert check.verdict(check.measured_share) == "compute-bound"


def test_a_group_larger_than_the_design_has_no_model_figure():
    design, catalog = load_design(ROOT / "examples" / "small-2x2-a100-1gbe.yaml")
    fabric = build_fabric(design, catalog)
    step = hgx_check()[1]
    check = check_trace(fabric, excerpt(), step)
    ar = next(c for c in check.collectives if c.measured.kind == "allreduce")
    assert ar.model_time_s is None and "the design has 4 accelerators" in ar.note


def test_check_trace_verb_json(capsys):
    status = main(["check-trace", str(DATA / "nccl-excerpt" / "rank0.json"),
                   str(DATA / "nccl-excerpt" / "rank1.json"), "--design", str(HGX),
                   "--model", "llama3-8b", "--dp", "8", "--format", "json"])
    assert status == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ranks"] == [0, 1] and data["device"] == "gpu"
    assert data["measured_comm_share"] == pytest.approx(excerpt().median("comm_share"))
    assert {r["collective"] for r in data["collectives"]} == {
        "allreduce", "allgather", "reducescatter", "sendrecv"}
    assert [p["part"] for p in data["step_parts"]][-1] == "step"


def test_check_trace_verb_refuses_a_bad_trace_in_one_line(tmp_path, capsys):
    bad = tmp_path / "rank0.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1}]}')
    status = main(["check-trace", str(bad), "--design", str(HGX), "--model", "llama3-8b",
                   "--dp", "8"])
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert err.count("\n") == 0 and "rank0.json: traceEvents[0].dur: not a number" in err
    assert main(["check-trace", str(DATA / "gloo-2rank"), "--design", str(HGX), "--model",
                 "llama3-8b", "--dp", "8", "--threshold", "1.5"]) == 2
