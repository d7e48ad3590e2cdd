"""The scorecard (report/review/scorecard.py): its figures are the step's, the planner's
and the collectives' own numbers, each with an origin; two designs side by side; the
verb's files."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from conftest import EXAMPLES

from topomodel.analysis.assumptions import StepAssumptions
from topomodel.analysis.training.step import step_time
from topomodel.cli import main
from topomodel.errors import ParameterError
from topomodel.inputs.parts import Model
from topomodel.plan.space import PlanSpace
from topomodel.report.review.claims import check_claim, parse_claim
from topomodel.report.review.scorecard import (
    COLLECTIVE_SIZES_BYTES,
    IMBALANCE_SHARES,
    ORIGINS,
    TAIL_SEEDS,
    ScorecardJob,
    figure_rows,
    scorecard,
)
from topomodel.traffic.layout import Layout

SMALL = (1 << 20,)  # one collective size keeps the tests quick
NARROW = PlanSpace(max_micro_batch=1, max_interleave=1,
                   fixed={"zero": 1, "recompute": "none", "sequence_parallel": True})


@pytest.fixture(scope="module")
def server_card(example_fabric):
    fabric = example_fabric("hgx-h100-server")
    model = fabric.catalog.get("llama3-8b", Model)
    job = ScorecardJob(model, StepAssumptions(), Layout(tp=2, dp=4),
                       collective_sizes_bytes=SMALL)
    return fabric, model, scorecard(fabric, job)


def test_step_rows_are_the_step_models_and_the_split_adds_to_one(server_card):
    fabric, model, card = server_card
    step = step_time(fabric, model, Layout(tp=2, dp=4), StepAssumptions())
    assert card.value("tokens_per_s") == step.tokens_per_s
    assert card.value("mfu") == step.mfu
    parts = ("compute_share", "bubble_share", "exposed_comm_share", "wait_share")
    assert math.isclose(sum(card.value(k) for k in parts), 1.0, rel_tol=1e-12)
    assert card.layout.startswith("TP 2 x PP 1 x DP 4")


def test_every_figure_says_where_it_came_from(server_card):
    card = server_card[2]
    assert {f.origin for f in card.figures} <= set(ORIGINS)
    assert all(f.basis for f in card.figures)
    level = next(f for f in card.figures if f.key == "level_scale-up_Bps")
    assert level.origin == "published" and level.basis.startswith("nvlink4: ")
    assert level.value == 450e9  # NVLink 4: 18 links x 25 GB/s per direction


def test_collectives_run_on_every_seed_and_the_tail_is_the_slowest(server_card):
    card = server_card[2]
    means = {f.key: f.value for f in card.figures if f.key.endswith("_busbw_Bps")}
    tails = {f.key: f.value for f in card.figures if f.key.endswith("_busbw_tail_Bps")}
    assert len(means) == 4 and len(tails) == 4  # four collectives, one size, one group
    for key, mean in means.items():
        assert tails[key.replace("_busbw_Bps", "_busbw_tail_Bps")] <= mean
    assert TAIL_SEEDS >= 2 and len(COLLECTIVE_SIZES_BYTES) == 3


def test_two_designs_side_by_side_have_their_ratio(server_card):
    card = server_card[2]
    rows = figure_rows([card, card])
    heads = [f"{card.design} (1)", f"{card.design} (2)"]
    assert all(h in rows[0] for h in heads)
    for row in rows:
        if row[heads[0]]:
            assert row["ratio"] == pytest.approx(1.0)


def test_scaling_runs_each_size_at_its_own_best_layout(example_fabric):
    fabric = example_fabric("small-16x8-a100-100gbe-roce")
    model = fabric.catalog.get("llama3-8b", Model)
    job = ScorecardJob(model, StepAssumptions(compute_efficiency=0.5), None,
                       scaling_sizes=(16,), collective_sizes_bytes=SMALL, space=NARROW)
    card = scorecard(fabric, job)
    small, full = (next(f for f in card.figures if f.key == k)
                   for k in ("scaling_16", f"scaling_{fabric.accelerator_count}"))
    assert small.value == 1.0 and small.note.startswith("TP ")
    assert 0 < full.value <= 1.05
    assert full.note == card.layout  # no layout given: the full size runs at the best
    families = {f.key: f for f in card.figures if f.part == "strategies"}
    assert set(families) == {"mfu_dp", "mfu_tp_pp"}  # a dense model: no EP family
    # the TP + PP family's space holds every DP-only layout: it can only do better
    dp_only = families["mfu_dp"].value
    assert dp_only is None or families["mfu_tp_pp"].value >= dp_only


def test_a_given_layout_scales_by_its_data_parallel_degree(example_fabric):
    fabric = example_fabric("small-16x8-a100-100gbe-roce")
    model = fabric.catalog.get("llama3-8b", Model)
    assumptions = StepAssumptions(compute_efficiency=0.5)
    job = ScorecardJob(model, assumptions, Layout(tp=8, dp=16, global_batch=64),
                       scaling_sizes=(16, 20), collective_sizes_bytes=SMALL, space=NARROW)
    card = scorecard(fabric, job)
    small = next(f for f in card.figures if f.key == "scaling_16")
    assert small.note.startswith("TP 8 x PP 1 x DP 2, global batch 8")  # 4 per replica
    at_16 = step_time(fabric, model, Layout(tp=8, dp=2, global_batch=8), assumptions)
    full = card.step
    assert card.value(f"scaling_{fabric.accelerator_count}") == pytest.approx(
        (full.tokens_per_s / 128) / (at_16.tokens_per_s / 16), rel=1e-12)
    assert card.value("scaling_20") is None  # 20 is not whole TP 8 replicas


def test_moe_models_get_the_imbalance_rows_and_mfu_falls_as_it_grows(example_fabric):
    fabric = example_fabric("hgx-h100-server")
    model = fabric.catalog.get("mixtral-8x7b", Model)
    job = ScorecardJob(model, StepAssumptions(), Layout(tp=2, ep=4, dp=4),
                       collective_sizes_bytes=SMALL)
    card = scorecard(fabric, job)
    mfus = [card.value(f"mfu_imbalance_{round(s * 100)}") for s in IMBALANCE_SHARES]
    assert mfus == sorted(mfus, reverse=True) and mfus[0] > mfus[-1]
    assert "mfu_tp_pp_ep" in {f.key for f in card.figures}


@pytest.mark.parametrize("suffix", [".json", ".html"])
def test_the_verb_writes_every_format(capsys, tmp_path, suffix):
    out = tmp_path / f"card{suffix}"
    status = main(["scorecard", "examples/hgx-h100-server.yaml", "--model", "llama3-8b",
                   "--tp", "2", "--dp", "4", "-o", str(out)])
    assert status == 0
    text = out.read_text()
    if suffix == ".json":
        figures = json.loads(text)["figures"]
        assert {f["origin"] for f in figures} <= set(ORIGINS)
    else:
        assert "tokens per second" in text
    assert "MFU" in capsys.readouterr().out


def test_a_file_of_no_known_format_is_refused_in_one_line(capsys, tmp_path):
    status = main(["scorecard", "examples/hgx-h100-server.yaml", "--model", "llama3-8b",
                   "-o", str(tmp_path / "card.txt")])
    err = capsys.readouterr().err.strip()
    assert status == 2 and "\n" not in err and "extension" in err
    assert not (tmp_path / "card.txt").exists()


def test_a_claim_that_holds_is_said_to_and_searches_nothing(server_card):
    fabric, _, card = server_card
    check = check_claim([fabric], [_job(fabric)], [card], parse_claim("mfu >= 0.1"))
    assert check.holds and check.knobs == ()
    assert check.figure == card.value("mfu")


def test_a_claim_that_fails_names_the_nearest_assumption_that_makes_it_hold(server_card):
    fabric, _, card = server_card
    claim = parse_claim(f"mfu <= {card.value('mfu') * 0.9:.4f}")
    check = check_claim([fabric], [_job(fabric)], [card], claim)
    assert not check.holds
    knobs = {k.knob: k for k in check.knobs}
    efficiency = knobs["compute efficiency"]
    assert efficiency.holds_at is not None and efficiency.figure <= claim.value
    for k in check.knobs:  # where a knob makes it hold, the figure there does
        assert k.holds_at is None or k.figure <= claim.value


def _job(fabric):
    return ScorecardJob(fabric.catalog.get("llama3-8b", Model), StepAssumptions(),
                        Layout(tp=2, dp=4), collective_sizes_bytes=SMALL)


def test_the_review_shows_the_scorecard_when_asked(capsys, tmp_path):
    status = main(["review", "examples/hgx-h100-server.yaml", "--model", "llama3-8b",
                   "--tp", "2", "--dp", "4", "--scorecard", "--no-goodput",
                   "-o", str(tmp_path / "r")])
    assert status == 0
    data = json.loads((tmp_path / "r" / "report.json").read_text())
    assert {f["key"] for f in data["scorecard"]} >= {"tokens_per_s", "mfu", "comm_share"}
    assert "<h2>Scorecard</h2>" in (tmp_path / "r" / "report.html").read_text()
    capsys.readouterr()
    assert main(["review", "examples/hgx-h100-server.yaml", "--scorecard",
                 "-o", str(tmp_path / "s")]) == 2
    assert "--scorecard needs a model" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_a_calibration_overlay_makes_the_level_rows_measured(tmp_path, server_card):
    """The overlay ``calibrate`` writes from the degraded 8 x H100 log: the scale-up
    level's effective bandwidth is the measured efficiency's, said ``measured`` with the
    overlay's file and the log; the nominal rate stays the datasheet's."""
    from conftest import EXAMPLES

    from topomodel.calibrate.nccl import calibrate_nccl
    from topomodel.calibrate.overlay import write_overlay
    from topomodel.fabric.build import build_fabric
    from topomodel.inputs.design import load_design
    from topomodel.inputs.measured.nccltests import read_nccl_tests

    design = EXAMPLES / "hgx-h100-server.yaml"
    log = EXAMPLES.parent / "tests" / "data" / "nccl" / "h100-8gpu-degraded-allreduce.log"
    fabric = build_fabric(*load_design(design))
    fitted = calibrate_nccl(fabric, [read_nccl_tests(log)]).fitted
    overlay = write_overlay(tmp_path / "overlay.yaml", fabric.catalog, fitted)
    calibrated = build_fabric(*load_design(design, extra_catalogs=[overlay]))
    model = calibrated.catalog.get("llama3-8b", Model)
    card = scorecard(calibrated, ScorecardJob(model, StepAssumptions(), Layout(tp=2, dp=4),
                                              collective_sizes_bytes=SMALL))
    rows = {f.key: f for f in card.figures if f.part == "levels"}
    effective = rows["level_scale-up_effective_Bps"]
    assert effective.origin == "measured"
    assert effective.basis == f"{overlay} (efficiency measured in {log})"
    assert effective.value == pytest.approx(450e9 * fitted[0].after, rel=1e-3)
    assert rows["level_scale-up_Bps"].origin == "published"
    before = {f.key: f for f in server_card[2].figures}["level_scale-up_effective_Bps"]
    assert before.origin == "published" and before.basis.startswith("nvlink4: ")
    assert effective.value < 0.5 * before.value


def test_only_the_parts_asked_for_are_run(example_fabric, monkeypatch):
    import topomodel.report.review.scorecard as module

    fabric = example_fabric("hgx-h100-server")
    planned = []
    monkeypatch.setattr(module, "_best", lambda *a, **k: planned.append(k) or None)
    job = ScorecardJob(fabric.catalog.get("llama3-8b", Model), StepAssumptions(),
                       Layout(tp=2, dp=4), parts=("step", "levels"))
    card = scorecard(fabric, job)
    assert {f.part for f in card.figures} == {"step", "levels"}
    assert planned == []  # a given layout and no strategies: the planner never runs
    with pytest.raises(ParameterError, match="not a part"):
        scorecard(fabric, ScorecardJob(job.model, job.assumptions, job.layout,
                                       parts=("step", "bogus")))


def test_the_layout_is_searched_among_the_families_best_layouts(server_card):
    from topomodel.report.review.claims import layout_distance

    fabric, model, card = server_card
    stated = card.step.layout
    bests = {r.layout.tp: r for r in card.strategy_steps}
    best = max(card.strategy_steps, key=lambda r: r.mfu)
    assert best.mfu > card.value("mfu")  # the planner's best beats TP 2 x DP 4 here
    claim = parse_claim(f"mfu >= {best.mfu - 1e-9:.12f}")
    check = check_claim([fabric], [_job(fabric)], [card], claim)
    layout = {k.knob: k for k in check.knobs}["layout"]
    assert layout.holds_at.startswith(f"TP {best.layout.tp} x PP {best.layout.pp}")
    assert f"({layout_distance(stated, best.layout):.3g} doublings" in layout.holds_at
    # the figure there is the step of that layout with the planner's batch
    again = step_time(fabric, model, replace(best.layout, global_batch=best.global_batch),
                      StepAssumptions())
    assert layout.figure == again.mfu
    assert bests  # every family's best is kept for the search


def test_without_the_strategies_part_the_layout_is_not_searched(example_fabric):
    fabric = example_fabric("hgx-h100-server")
    job = ScorecardJob(fabric.catalog.get("llama3-8b", Model), StepAssumptions(),
                       Layout(tp=2, dp=4), parts=("step",))
    card = scorecard(fabric, job)
    check = check_claim([fabric], [job], [card], parse_claim("mfu >= 0.99"))
    layout = {k.knob: k for k in check.knobs}["layout"]
    assert layout.holds_at is None and "did not run" in layout.note


@pytest.mark.parametrize("routing", ["ecmp", "dmodk", "hash"])
def test_one_seed_runs_where_the_routing_reads_none(example_fabric, monkeypatch, routing):
    import topomodel.report.review.collect as collect
    import topomodel.routing.policy as policy

    fabric = example_fabric("small-16x8-a100-100gbe-roce")
    job = ScorecardJob(fabric.catalog.get("llama3-8b", Model),
                       StepAssumptions(compute_efficiency=0.5), Layout(tp=8, dp=16),
                       routing=routing, collective_sizes_bytes=SMALL,
                       parts=("step", "collectives"))
    seeds: list[int] = []
    real = collect.measured_runs
    monkeypatch.setattr(collect, "measured_runs",
                        lambda f, t, r, seed, runs: seeds.append(seed) or real(f, t, r, seed, runs))
    card = scorecard(fabric, job)
    assert len(set(seeds)) == (TAIL_SEEDS if routing == "hash" else 1)
    seeds.clear()
    monkeypatch.setattr(policy, "seed_matters", lambda *_: True)  # every seed, as before
    every = scorecard(fabric, job)
    assert len(set(seeds)) == TAIL_SEEDS
    assert card.figures == every.figures  # the same figures, bit for bit


def test_the_collectives_run_group_by_group_as_all_at_once():
    """The scorecard measures one group's runs at a time (``collect.group_pieces``:
    only one group's routes held); its rows are one call's over every run, bit for bit,
    on fabrics built afresh (no routes kept from the other)."""
    from topomodel.fabric.build import build_fabric
    from topomodel.inputs.design import load_design
    from topomodel.report.review.collect import group_pieces, measured_runs, plan_collectives

    def fresh():  # type: ignore[no-untyped-def]
        return build_fabric(*load_design(EXAMPLES / "small-16x8-a100-100gbe-roce.yaml"))

    timing = StepAssumptions().time
    fabric = fresh()
    planned = plan_collectives(fabric, (1 << 20, 64 << 20))
    pieces = group_pieces(planned.runs)
    assert len(pieces) >= 3 and [r for p in pieces for r in p] == planned.runs
    assert all(len({r[0] for r in p}) == 1 for p in pieces)
    whole = measured_runs(fabric, timing, "hash", 1, planned.runs)
    by_group = [row for p in pieces for row in measured_runs(fresh(), timing, "hash", 1, p)]
    assert by_group == whole and any(row is not None for row in whole)


@pytest.mark.parametrize("model_id, layout", [("mixtral-8x7b", Layout(tp=2, ep=4, dp=8)),
                                              ("llama3-8b", Layout(tp=2, dp=8))])
def test_the_strategy_rows_from_one_pass_are_a_plan_per_familys(monkeypatch, model_id,
                                                                  layout):
    """The full-size plan keeps each strategy family's best too (plan.tops); forcing a
    plan per family instead (no family taken as inside the job's space) gives the same
    rows and the same best steps, bit for bit. Two 8-GPU A100 servers (Mixtral fits)."""
    import topomodel.plan.tops as tops
    from topomodel.fabric.build import build_fabric
    from topomodel.inputs.design import load_design
    from topomodel.plan.search import plan as search_plan
    from topomodel.report.review import scorecard as module

    text = (EXAMPLES / "small-16x8-a100-100gbe-roce.yaml").read_text().replace(
        "systems: 16", "systems: 2")

    def card(fresh_plans):
        fabric = build_fabric(*load_design("two.yaml", text=text))
        job = ScorecardJob(fabric.catalog.get(model_id, Model),
                           StepAssumptions(compute_efficiency=0.5), layout,
                           space=replace(NARROW, fixed={**NARROW.fixed,
                                                        "recompute": "full"}),
                           parts=("step", "strategies"))
        plans = []
        with monkeypatch.context() as mp:
            mp.setattr(module, "plan", lambda *a, **k: plans.append(k) or
                       search_plan(*a, **k))
            if fresh_plans:
                mp.setattr(tops, "space_family", lambda *a: None)
            return scorecard(fabric, job), plans

    one, one_plans = card(False)
    separate, separate_plans = card(True)
    rows = [f for f in one.figures if f.part == "strategies"]
    assert len(rows) == len(separate_plans)
    assert all(f.value is not None for f in rows[1:])  # DP alone: Mixtral does not fit
    assert one.figures == separate.figures
    assert one.strategy_steps == separate.strategy_steps
    assert len(one_plans) == 1 and len(one_plans[0]["families"]) == len(rows) - 1
