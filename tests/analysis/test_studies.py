"""Studies on the step model: scaling, required bandwidth, sensitivity, compare, scale."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from topomodel.analysis.training import studies
from topomodel.analysis.training.step import StepAssumptions, step_time
from topomodel.analysis.training.studies import (
    BELOW_RANGE,
    FOUND,
    NO_EFFECT,
    default_counts,
    layout_for,
    required_scaleout_factor,
    scale_curve,
    scale_scaleout,
    sensitivity,
)
from topomodel.cli import main
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.traffic.layout import Layout

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

DESIGN = "system: toy-box\nsystems: 8\nscaleout:\n  switch: toy-switch-16\n"


def test_layout_for_fills_with_dp():
    assert layout_for(64, Layout(tp=4, pp=2, global_batch=32, dp=4)).dp == 8
    assert layout_for(64, Layout(tp=4, pp=2, global_batch=32, dp=4)).global_batch == 64


def test_scale_curve_efficiency_starts_at_one(toy):
    toy(DESIGN)  # writes the design next to the toy catalog
    design, catalog = load_design(toy.tmp_path / "design.yaml",
                                  extra_catalogs=[toy.catalog_path])
    model = catalog.get("toy-dense", Model)
    points = scale_curve(design, catalog, model, Layout(tp=4, dp=1, global_batch=8),
                         [8, 16, 32])
    assert [p.accelerators for p in points] == [8, 16, 32]
    assert points[0].efficiency == 1.0
    assert all(0 < p.efficiency <= 1.0 + 1e-9 for p in points)
    # efficiency is tokens/s per accelerator relative to the first point's
    first, last = points[0], points[-1]
    assert last.efficiency == pytest.approx(
        (last.result.tokens_per_s / 32) / (first.result.tokens_per_s / 8), rel=1e-12)
    assert last.efficiency < 1  # the DP all-reduce grows with the ranks it spans
    # weak scaling: 8 sequences per DP rank (TP 4), so 64 of 1024 tokens on 32
    assert [p.result.layout.dp for p in points] == [2, 4, 8]
    assert last.result.tokens_per_s * last.result.step_time_s == pytest.approx(64 * 1024)
    # the last point is the step on the design as written (8 boxes of 4)
    direct = step_time(toy(DESIGN), model, Layout(tp=4, dp=8, global_batch=64))
    assert last.result.tokens_per_s == pytest.approx(direct.tokens_per_s, rel=1e-12)


def test_counts_the_layout_fills_to_one_job_give_one_point(toy):
    toy(DESIGN)
    design, catalog = load_design(toy.tmp_path / "design.yaml",
                                  extra_catalogs=[toy.catalog_path])
    model = catalog.get("toy-dense", Model)
    # 20 and 23 accelerators are 5 boxes of 4: both the same 20-GPU job
    points = scale_curve(design, catalog, model, Layout(tp=4, dp=1, global_batch=8),
                         [20, 23, 32])
    assert [p.accelerators for p in points] == [20, 32]


def test_default_counts_give_more_than_two_points():
    # the 1,016-GPU SuperPOD at TP 8 x PP 4: 128 and 1,016 were the only points before
    counts = default_counts(1016, 8, Layout(tp=8, pp=4))
    assert len(counts) > 2 and counts[0] == 32 and counts[-1] == 1016
    assert counts == sorted(set(counts)) and all(c % 8 == 0 for c in counts[:-1])
    assert len(default_counts(32, 8, Layout())) > 2  # a 4-server lab cluster
    assert default_counts(8, 8, Layout()) == [8]  # one system: one point


def test_faster_scaleout_lowers_the_communication_share(toy):
    fabric = toy(DESIGN)
    model = fabric.catalog.get("toy-dense", Model)
    layout = Layout(dp=32, global_batch=32, zero=0)  # the all-reduce crosses the scale-out
    slow = step_time(fabric, model, layout)
    fast = step_time(scale_scaleout(fabric, 4.0), model, layout)
    assert fast.exposed_comm_s < slow.exposed_comm_s
    search = required_scaleout_factor(fabric, model, layout,
                                      target_share=fast.comm_share * 1.001)
    assert search.outcome == FOUND and search.factor is not None and 1 < search.factor <= 4
    assert search.result.comm_share <= fast.comm_share * 1.001


def test_the_factor_search_ends_when_no_factor_changes_the_share(toy, monkeypatch):
    # a share that no factor moves (below and above the target): the search says so after
    # trying the ends of its range instead of halving for ever (it spun at 100 % CPU)
    fabric = toy(DESIGN)
    model = fabric.catalog.get("toy-dense", Model)
    layout = Layout(dp=32, global_batch=32)
    base = step_time(fabric, model, layout)
    calls = []

    def constant(*args, **kwargs):
        calls.append(1)
        return base

    monkeypatch.setattr(studies, "step_time", constant)
    for target in (base.comm_share * 2, base.comm_share / 2):
        calls.clear()
        search = required_scaleout_factor(fabric, model, layout, target_share=target)
        assert search.outcome == NO_EFFECT and search.factor is None and len(calls) == 2


def test_the_factor_search_is_bounded_by_its_step_cap(toy, monkeypatch):
    # a search that never settles (a tolerance no pair of factors meets, the answer
    # flapping about the target) still ends after SEARCH_STEPS_MAX steps
    fabric = toy(DESIGN)
    model = fabric.catalog.get("toy-dense", Model)
    layout = Layout(dp=32, global_batch=32)
    shares = iter([0.9, 0.1] + [0.9, 0.1] * studies.SEARCH_STEPS_MAX)
    calls = []

    def flapping(*args, **kwargs):
        calls.append(1)
        return SimpleNamespace(comm_share=next(shares))

    monkeypatch.setattr(studies, "step_time", flapping)
    search = required_scaleout_factor(fabric, model, layout, tolerance=-1.0,
                                      target_share=0.5)
    assert search.outcome == FOUND and len(calls) == studies.SEARCH_STEPS_MAX + 2


def test_a_slower_scaleout_that_still_meets_the_target_is_below_range(toy):
    fabric = toy(DESIGN)
    model = fabric.catalog.get("toy-dense", Model)
    layout = Layout(dp=32, global_batch=32)
    search = required_scaleout_factor(fabric, model, layout, target_share=0.999999)
    assert search.outcome == BELOW_RANGE and search.factor is None


@pytest.mark.parametrize("args", [
    ["step", "hgx-h100-server.yaml", "--model", "llama3-8b", "--tp", "8",
     "--target-comm-share", "0.5", "--no-goodput"],
    ["advise", "dgx-h100-superpod.yaml", "--model", "llama3-70b", "--tp", "8", "--dp", "1",
     "--threshold", "0.9"]])
def test_searches_that_no_factor_answers_end_on_the_shipped_examples(args, capsys):
    # both ran for ever: one server has no scale-out; DP 1 keeps the step inside a server
    args = [args[0], str(EXAMPLES / args[1]), *args[2:], "--format", "json"]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    outcome = data["required_scaleout"]["outcome"] if args[0] == "step" else data[
        "factor_search"]
    assert outcome == NO_EFFECT


def test_sensitivity_rows_are_sorted_by_swing(toy):
    fabric = toy(DESIGN)
    model = fabric.catalog.get("toy-moe", Model)
    rows = sensitivity(fabric, model, Layout(tp=2, dp=16, ep=4, global_batch=32),
                       StepAssumptions())
    swings = [r.swing for r in rows]
    assert swings == sorted(swings, reverse=True)
    assert {r.assumption for r in rows} >= {"compute_efficiency", "hot_expert_factor"}
    # the base is the step itself; each end is the step with that one assumption moved
    layout = Layout(tp=2, dp=16, ep=4, global_batch=32)
    base = step_time(fabric, model, layout, StepAssumptions()).comm_share
    assert all(r.base == pytest.approx(base, rel=1e-12) for r in rows)
    row = {r.assumption: r for r in rows}
    calm = step_time(fabric, model, layout, StepAssumptions(jitter_cv=0.0)).comm_share
    assert row["jitter_cv"].low == pytest.approx(calm, rel=1e-12)
    # directions the model implies: faster compute or more jitter raise the
    # communication share, and so do slower links; a hotter expert is compute imbalance
    # (named apart from the sync wall), which lengthens the step and so lowers the
    # share
    for name in ("compute_efficiency", "jitter_cv"):
        assert row[name].low < row[name].base < row[name].high, name
    for name in ("efficiency scaleup", "efficiency leaf"):
        assert row[name].low > row[name].high, name
    assert row["hot_expert_factor"].low > row["hot_expert_factor"].base > row[
        "hot_expert_factor"].high
    # faster memory-bound ops shorten compute, so the share rises
    assert row["hbm_efficiency"].low < row["hbm_efficiency"].high


def test_compare_and_scale_commands(toy, capsys, tmp_path):
    toy(DESIGN)
    design = str(toy.tmp_path / "design.yaml")
    status = main(["compare", design, design, "--model", "toy-dense", "--tp", "4",
                   "--catalog", str(toy.catalog_path), "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    first, second = data["designs"]
    assert status == 0 and second["mfu_ratio"] == pytest.approx(1.0)
    assert first["goodput"] == second["goodput"]  # the same design twice
    assert first["goodput"]["interruptions_per_day"] > 0
    assert second["deltas"] == {"power_W": 0.0, "network_power_W": 0.0,
                                "power_W_per_accelerator": 0.0, "capex_USD": 0.0}
    assert first["goodput"]["degraded_routed"] is True  # re-routed, not bounded
    status = main(["compare", design, design, "--model", "toy-dense", "--tp", "4",
                   "--catalog", str(toy.catalog_path)])
    assert status == 0 and "throughput kept while parts are down" in capsys.readouterr().out
    plot = tmp_path / "scale.png"
    status = main(["scale", design, "--model", "toy-dense", "--tp", "4", "--counts", "8", "16",
                   "--catalog", str(toy.catalog_path), "--plot", str(plot), "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert status == 0 and [p["accelerators"] for p in data["points"]] == [8, 16, 32]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_names_the_link_that_limits_when_a_faster_nic_changes_nothing(
        capsys, tmp_path):
    # dual-socket PCIe L40S servers: past 100 GbE the inter-socket link limits
    text = (EXAMPLES / "small-4x8-l40s-25gbe.yaml").read_text()
    fast, faster = tmp_path / "fast.yaml", tmp_path / "faster.yaml"
    fast.write_text(text.replace("connectx-4-lx", "connectx-6-dx").replace(
        "sn2410", "sn2700").replace("name: 4 servers", "name: fast 4 servers"))
    faster.write_text(text.replace("connectx-4-lx", "connectx-7").replace(
        "sn2410", "sn5400").replace("name: 4 servers", "name: faster 4 servers"))
    job = ["--model", "llama3-8b", "--compute-efficiency", "0.5", "--global-batch", "128",
           "--no-goodput", "--workers", "1"]
    assert main(["compare", str(fast), str(faster), *job, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    one, four = data["designs"]
    assert four["step_time_s"] == pytest.approx(one["step_time_s"], rel=0.01)
    assert four["busiest_link"]["link"] == "sys0/cpu0 -> sys0/cpu1"  # the socket link
    assert any("NIC ports 4x" in w and "the NIC is not the limit" in w
               and "sys0/cpu0 -> sys0/cpu1" in w for w in data["warnings"])


def test_advise_on_one_nvl72_rack_runs_the_step_at_most_three_times(tmp_path, monkeypatch):
    # issue #42: advise on one GB200 NVL72 rack (Llama 3 70B, TP 8) ran for minutes on
    # eaa741e, halving a factor no scale-out moves; now the ends of the range decide
    from topomodel.analysis.training.advice import advise
    from topomodel.fabric.build import build_fabric

    (tmp_path / "rack.yaml").write_text(
        "system: gb200-nvl72\nsystems: 1\nscaleout:\n  kind: fat_tree\n  switch: qm9700\n"
        "  rail_optimized: true\n")
    design, catalog = load_design(tmp_path / "rack.yaml")
    fabric = build_fabric(design, catalog)
    model = catalog.get("llama3-70b", Model)
    calls = []
    real = studies.step_time

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(studies, "step_time", counted)
    advice = advise(fabric, model, Layout(tp=8, dp=9))
    assert advice.outcome == NO_EFFECT and advice.factor is None and len(calls) <= 3
    assert advice.comm_share == step_time(fabric, model, Layout(tp=8, dp=9)).comm_share
