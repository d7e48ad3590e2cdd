"""Sweeps: expansion counted in closed form, errors located, points that match the step
model, failing points, resume after real interruptions, local pool and Dask agreeing."""

import functools
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from conftest import TOY_CATALOG, toy_switch

from topomodel.analysis.bom import bill_of_materials, power_summary
from topomodel.analysis.collectives.timing import TimeModel
from topomodel.analysis.pareto import pareto_mask
from topomodel.analysis.reliability.goodput import job_goodput
from topomodel.analysis.training.step import StepAssumptions, step_time
from topomodel.analysis.training.studies import scale_scaleout
from topomodel.cli import main
from topomodel.errors import UsageError
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.inputs.units import parse
from topomodel.report.sweep import sweep_report
from topomodel.sweep import (
    SweepError,
    apply_overrides,
    compile_constraint,
    constraint_holds,
    evaluate_point,
    journal_path,
    load_sweep,
    run_sweep,
)
from topomodel.traffic.layout import Layout

DESIGN = "system: toy-box\nsystems: 8\nscaleout:\n  switch: toy-switch-16\n"

# 3 oversubscriptions x (tp 1, 2, 3) x (2 zipped micro-batch / ZeRO-stage pairs) = 18 points,
# 3 designs; tp=3 does not divide toy-dense's 16 heads, so 6 points fail.
SWEEP = """\
name: toy
design: design.yaml
catalogs: [toy.yaml]
fixed:
  model: toy-dense
  global_batch: 64
parameters:
  design.scaleout.oversubscription[0]: {start: 1, stop: 3, step: 1, format: "{}:1"}
  tp: [1, 2, 3]
  zip:
    micro_batch: [1, 2]
    zero: [0, 1]
constraints:
  - comm_share <= 0.5
  - memory_bytes < "2 GB"
"""


@pytest.fixture
def place(tmp_path):
    """Write the toy catalog and design; return a writer of sweep files beside them."""
    (tmp_path / "toy.yaml").write_text(
        TOY_CATALOG + "".join(toy_switch(k) for k in (4, 6, 8, 12, 16)))
    (tmp_path / "design.yaml").write_text(DESIGN)

    def write(text=SWEEP, name="sweep.yaml"):
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return path

    return write


def frame_of(outcome):
    return outcome.frame.drop(columns=["elapsed_s"])


# Expansion --------------------------------------------------------------------------------


def test_ranges_lists_products_zips_and_blocks_count_in_closed_form(place):
    path = place("""\
        design: design.yaml
        catalogs: [toy.yaml]
        fixed: {model: toy-dense}
        parameters:
          - tp: {start: 1, stop: 8, factor: 2}          # 1 2 4 8
            pp: {start: 1, stop: 6, step: 2}            # 1 3 5 (6 is off the grid)
            compute_efficiency: {start: 0.4, stop: 0.7, num: 4}
            zip:
              - {micro_batch: [1, 2, 4], zero: [1, 0, 1]}
              - {tp_overlap: [backward, gemm], efficiency.leaf: [0.9, 1.0]}
          - scaleout_factor: {start: 2, stop: 0.5, step: -0.5}   # 2 1.5 1 0.5
            design.scaleout.oversubscription: [["1:1"], ["2:1"]]
        """)
    sweep = load_sweep(path)
    assert [b.count for b in sweep.blocks] == [4 * 3 * 4 * 3 * 2, 4 * 2]
    assert sweep.expanded == len(sweep.points) + sweep.duplicates == 4 * 3 * 4 * 3 * 2 + 8
    assert sweep.duplicates == 0  # block 2 leaves tp, pp at their defaults: new points
    first = sweep.blocks[0].axes
    assert [v for (v,) in first[0].values] == [1, 2, 4, 8]
    assert [v for (v,) in first[1].values] == [1, 3, 5]
    assert [v for (v,) in first[2].values] == [0.4, 0.5, 0.6, 0.7]
    assert first[3].keys == ("micro_batch", "zero") and len(first[3].values) == 3
    assert [v for (v,) in sweep.blocks[1].axes[0].values] == [2.0, 1.5, 1.0, 0.5]
    # the first axis varies slowest, the last fastest
    assert [p["tp"] for p in sweep.points[:3]] == [1, 1, 1]
    assert [p["tp_overlap"] for p in sweep.points[:3]] == ["backward", "gemm", "backward"]
    assert sweep.column_types["design.scaleout.oversubscription"] == "json"
    assert sweep.column_types["scaleout_factor"] == "float"


def test_duplicates_run_once_and_defaults_do_not_change_keys(place):
    sweep = load_sweep(place("""\
        design: design.yaml
        catalogs: [toy.yaml]
        fixed: {model: toy-dense}
        parameters:
          - {tp: [1, 2], pp: [1, 2]}
          - {tp: [2, 4]}
        """))
    assert sweep.expanded == 6 and len(sweep.points) == 5 and sweep.duplicates == 1
    explicit = load_sweep(place("""\
        design: design.yaml
        catalogs: [toy.yaml]
        fixed: {model: toy-dense, pp: 1, scaleout_factor: 1.0, design.systems: 8}
        parameters: {tp: [1, 2]}
        """, "b.yaml"))
    assert explicit.keys == sweep.keys[::2][:2]  # tp 1 and 2 at pp 1: the same points


def test_keys_change_with_the_base_design(place, tmp_path):
    first = load_sweep(place()).keys
    assert load_sweep(place()).keys == first
    (tmp_path / "design.yaml").write_text(DESIGN + "layout:\n  rack_cable: \"3 m\"\n")
    assert not set(load_sweep(place()).keys) & set(first)


def test_apply_overrides():
    base = {"system": "x", "accelerators": 64, "scaleout": {"switch": "s",
                                                             "oversubscription": ["1:1"]}}
    out = apply_overrides(base, {"design.systems": 2,
                                 "design.scaleout.oversubscription[1]": "7:1",
                                 "design.scaleout.oversubscription": ["2:1"],
                                 "design.layout.rack_cable": "3 m"})
    assert out == {"system": "x", "systems": 2, "layout": {"rack_cable": "3 m"},
                   "scaleout": {"switch": "s", "oversubscription": ["2:1", "7:1"]}}
    assert base["accelerators"] == 64  # not mutated
    with pytest.raises(ValueError, match="index 3 is past the end"):
        apply_overrides(base, {"design.scaleout.oversubscription[3]": "2:1"})
    with pytest.raises(ValueError, match="system is not a mapping"):
        apply_overrides(base, {"design.system.x": 1})


def test_examples_load_and_count_as_their_comments_say():
    counts = {"b200-16k-fabric": (96, 96, 12), "dgx-h100-layouts": (100, 99, 1),
              "llama3-24k-aggregation": (8, 8, 4), "nvl72-serving": (8, 8, 1)}
    for name, (expanded, points, designs) in counts.items():
        sweep = load_sweep(f"examples/sweeps/{name}.yaml")
        assert (sweep.expanded, len(sweep.points)) == (expanded, points), name
        built = {json.dumps({k: v for k, v in p.items() if k.startswith("design.")},
                            sort_keys=True) for p in sweep.points}
        assert len(built) == designs, name
    assert load_sweep("examples/sweeps/b200-16k-fabric.yaml").points[0][
        "design.scaleout.oversubscription[0]"] == "1:1"


# Errors ------------------------------------------------------------------------------


HEAD = "design: design.yaml\ncatalogs: [toy.yaml]\nfixed: {model: toy-dense}\n"


@pytest.mark.parametrize(("body", "problem"), [
    ("parameters:\n  tpp: [1]\n",
     "sweep.yaml:5: parameters.tpp: unknown parameter: a step option (tp, pp, micro_batch,"
     " ...), efficiency.TIER or design.KEY.PATH; did you mean 'tp'?"),
    ("parameters:\n  tp: {start: 4, stop: 1, step: 1}\n",
     "sweep.yaml:5: parameters.tp: an empty range: from 4 to 1 in steps of 1"),
    ("parameters:\n  tp: []\n", "sweep.yaml:5: parameters.tp: an empty list"),
    ("parameters:\n  tp: {start: 1, stop: 4}\n",
     "sweep.yaml:5: parameters.tp: a range needs exactly one of step, num or factor"),
    ("parameters:\n  tp: {start: 1, stop: 4, stepp: 1}\n",
     "sweep.yaml:5: parameters.tp.stepp: unknown range key; did you mean 'step'?"),
    ("parameters:\n  tp: [1, 2.5]\n",
     "sweep.yaml:5: parameters.tp[1]: expected a whole number, got a bare number (2.5)"),
    ("parameters:\n  batch: [1, 8]\n",
     "sweep.yaml:5: parameters.batch: batch is an option of decode; a sweep runs the"
     " training step or serve"),
    ("parameters:\n  rate: [1.0, 2.0]\n",
     "sweep.yaml:5: parameters.rate: rate is an option of serve; set job: serve to sweep"
     " serving"),
    ("job: serve\nparameters:\n  pp: [1, 2]\n",
     "sweep.yaml:6: parameters.pp: pp is an option of the training step; a serve sweep sets"
     " serve options (prefill_tp, decode_ep, rate, ...)"),
    ("job: serve\nmetrics: [ttft_s, mfu]\n",
     "sweep.yaml:5: metrics[1]: unknown metric 'mfu' of a serve sweep"),
    ("job: training\n",
     "sweep.yaml:4: job: expected one of step, serve, got a string ('training')"),
    ("parameters:\n  efficiency.leaf: [0.5, 1.5]\n",
     "sweep.yaml:5: parameters['efficiency.leaf'][1]: must be in (0, 1], got 1.5"),
    ("parameters:\n  fail: [node0/gpu0]\n",
     "sweep.yaml:5: parameters.fail[0]: expected a list of node names, got a string"),
    ("parameters:\n  zip:\n    tp: [1, 2]\n    pp: [1, 2, 4]\n",
     "sweep.yaml:5: parameters.zip: zipped parameters need lists of the same length; got"
     " tp: 2, pp: 3"),
    ("parameters:\n  model: [toy-dense, toy-dens]\n",
     "sweep.yaml:5: parameters.model[1]: unknown model id 'toy-dens'; did you mean"),
    ("metrics: [step_time, mfu]\n",
     "sweep.yaml:4: metrics[0]: unknown metric 'step_time'; did you mean 'step_time_s'?"),
    ("constraints: ['comm_share <=']\n",
     "sweep.yaml:4: constraints[0]: not an expression: invalid syntax"),
    ("constraints: ['mfu > 0.3 and foo < 2']\n",
     "sweep.yaml:4: constraints[0]: unknown name 'foo': a metric or a parameter"),
    ("constraints: ['__import__(\"os\").getcwd()']\n",
     "sweep.yaml:4: constraints[0]: call is not allowed in a constraint"),
    ("constraints: ['memory_bytes < \"3 s\"']\n",
     "sweep.yaml:4: constraints[0]: '3 s': is a time, not a size"),
    ("parameters:\n  design.scaleout.tierz: [2]\n",
     "sweep.yaml:5: parameters['design.scaleout.tierz'][0]: unknown key; did you mean"
     " 'tiers'?"),
    ("parameters:\n  design.scaleout.switch: [toy-switch-16, toy-swich-8]\n",
     "sweep.yaml:5: parameters['design.scaleout.switch'][1]: unknown switch id"
     " 'toy-swich-8'; did you mean 'toy-switch-8'?"),
    ("parameters:\n  design.scaleout.port_rate: ['100 Gb/s']\n",
     "a link bandwidth must say its direction"),
    ("parameters:\n  design.catalogs: [[a.yaml]]\n",
     "sweep.yaml:5: parameters['design.catalogs']: catalogs cannot vary within a sweep"),
    ("parameters:\n  tp: [1, 2]\n  model: [toy-dense]\n",
     "sweep.yaml:6: parameters.model: also set under fixed"),
    ("pareto: [power_W, speed]\n",
     "sweep.yaml:4: pareto: 'speed' is not a recorded metric"),
    ("dask: {schedular: tcp://x:1}\n", "sweep.yaml:4: dask.schedular: unknown key"),
    ("parametres:\n  tp: [1]\n",
     "sweep.yaml:4: parametres: unknown key; did you mean 'parameters'?"),
])
def test_bad_sweep_files_are_one_located_line_each_and_write_nothing(
        place, capsys, tmp_path, body, problem):
    path = place(HEAD + body)
    with pytest.raises(SweepError) as caught:
        load_sweep(path)
    assert any(str(p).startswith(f"{tmp_path}/") and problem in str(p)
               for p in caught.value.problems), caught.value
    out = tmp_path / "results.parquet"
    assert main(["sweep", str(path), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("topomodel: error: ") and problem in err
    assert not out.exists() and not journal_path(out).exists()


def test_constraints_are_safe_and_false_without_values():
    names = {"mfu", "tp", "memory_bytes", "efficiency.leaf"}
    holds = compile_constraint('0.3 <= mfu < 0.6 and not tp == 3 or memory_bytes < "1 GB"',
                               names)
    assert constraint_holds(holds, {"mfu": 0.4, "tp": 2, "memory_bytes": 2e9})
    assert not constraint_holds(holds, {"mfu": 0.4, "tp": 3, "memory_bytes": 2e9})
    assert constraint_holds(holds, {"mfu": 0.1, "tp": 3, "memory_bytes": 5e8})
    for values in ({"mfu": float("nan"), "tp": 2, "memory_bytes": 2e9},
                   {"mfu": None, "tp": 2, "memory_bytes": 2e9}, {"tp": 2}):
        assert not constraint_holds(holds, values)
    assert constraint_holds(compile_constraint("efficiency.leaf * 2 - 1 >= -tp / 4", names),
                            {"efficiency.leaf": 0.5, "tp": 4})
    for text, message in [("mfu ** 2 > 0", "pow is not allowed"),
                          ("tp in [1, 2]", "in is not allowed"),
                          ("mfu.real > 0", "unknown name 'mfu.real'"),
                          ("(1).real > 0", "only dotted parameter names"),
                          ("tp > None", "None is not a number or text")]:
        with pytest.raises(ValueError, match=re.escape(message)):
            compile_constraint(text, names)


def test_every_problem_is_reported_at_once(place):
    path = place(HEAD + "parameters:\n  tpp: [1]\n  pp: []\nmetrics: [mfoo]\n")
    with pytest.raises(SweepError) as caught:
        load_sweep(path)
    assert len(caught.value.problems) == 3


def test_missing_design_and_model(place):
    with pytest.raises(SweepError, match=r"sweep.yaml:1: design: no such file: .*nope.yaml"):
        load_sweep(place("design: nope.yaml\n"))
    with pytest.raises(SweepError, match=r"no model: set fixed\.model"):
        load_sweep(place("design: design.yaml\ncatalogs: [toy.yaml]\nparameters: {tp: [1]}\n"))


def test_cli_refuses_bad_options_before_running(place, capsys, tmp_path):
    path = place()
    out = tmp_path / "r.csv"
    for argv, message in [
            (["--results-format", "parquet"], "a .csv file cannot hold parquet results"),
            (["--pareto", "power_W", "speed"], "'speed' is not a recorded metric"),
            (["--pareto", "tp", "mfu"], "tp has no natural direction: write tp:min or tp:max"),
            (["--plot", "x.png"], "--plot draws the Pareto front"),
            (["--pareto", "power_W", "mfu", "--plot", "x.gif"], "ends in .png, .svg or .pdf"),
            (["--workers", "0"], "--workers must be at least 1"),
            (["--resume", "--overwrite"], "pick one")]:
        assert main(["sweep", str(path), "-o", str(out), *argv]) == 2, argv
        assert message in capsys.readouterr().err
        assert not out.exists() and not journal_path(out).exists()


# Points -------------------------------------------------------------------------------


def test_a_point_is_the_step_model_with_its_settings(place, tmp_path):
    """The sweep's point equals the step model called by hand with the same settings."""
    path = place("""\
        design: design.yaml
        catalogs: [toy.yaml]
        fixed:
          model: toy-moe
          tp: 2
          pp: 2
          ep: 2
          global_batch: 32
          micro_batch: 2
          zero: 1
          tp_overlap: gemm
          efficiency.leaf: 0.9
          compute_efficiency: 0.5
          bucket: "10 MB"
          scaleout_factor: 2
          straggler_share: 0.1
          straggler_slowdown: 0.2
          design.scaleout.oversubscription: ["3:1"]
        """)
    sweep = load_sweep(path)
    outcome = run_sweep(sweep, tmp_path / "r.parquet", workers=1, progress=False)
    row = outcome.frame.iloc[0]
    assert row["error"] is None or pd.isna(row["error"])
    design, catalog = load_design(tmp_path / "design.yaml",
                                  extra_catalogs=[tmp_path / "toy.yaml"])
    built = build_fabric(replace(design, scaleout=replace(design.scaleout,
                                                           oversubscription=(3.0,))), catalog)
    fabric = scale_scaleout(built, 2.0)
    base = StepAssumptions()
    assumptions = replace(base, compute_efficiency=0.5,
                          dp_bucket_bytes=parse("10 MB", "size"), straggler_share=0.1,
                          straggler_slowdown=0.2, time=TimeModel(efficiency={"leaf": 0.9}))
    layout = Layout(tp=2, pp=2, ep=2, dp=8, global_batch=32, micro_batch=2, zero=1,
                    tp_overlap="gemm")
    expected = step_time(fabric, catalog.get("toy-moe", Model), layout, assumptions)
    assert row["step_time_s"] == expected.step_time_s
    assert row["mfu"] == expected.mfu and row["comm_share"] == expected.comm_share
    assert row["topology_wall_s"] == expected.walls["topology_s"]
    good = job_goodput(fabric, catalog.get("toy-moe", Model), layout, assumptions, expected,
                       route_degradation=False)
    assert row["interruptions_per_day"] == good.interruptions_per_day
    assert row["goodput_tokens_per_s"] == good.goodput_tokens_per_s
    # why the effective time is what it is: the spares and repair time beside it
    assert row["spare_systems"] == good.spare_systems and row["repair_s"] == good.repair_s
    hint = good.spares_for_target
    assert (pd.isna(row["spares_for_target"]) if hint is None
            else row["spares_for_target"] == hint[0])
    assert row["dp_used"] == 8 and row["global_batch_used"] == 32 and row["world"] == 32
    assert row["microbatches_used"] == 32 // (8 * 2)
    bom = bill_of_materials(fabric)  # the what-if's re-cabled fabric
    power = power_summary(bom, 32)
    assert row["power_W"] == power.total_W and row["power_complete"] == power.complete
    assert row["switch_power_W"] == power.switches_W > 0
    assert row["switches"] == sum(line.count for line in bom if line.category == "switch")
    assert row["feasible"]


def test_cost_metrics_follow_the_cost_options(place, tmp_path):
    """USD_per_Mtok and J_per_token are analysis.cost.token_cost of the point's capex,
    power and goodput tokens/s under the point's cost options."""
    from topomodel.analysis.assumptions import CostAssumptions
    from topomodel.analysis.cost import token_cost

    path = place("""\
        design: design.yaml
        catalogs: [toy.yaml]
        fixed: {model: toy-dense, tp: 4, electricity_price: 0.12}
        parameters:
          pue: [1.1, 1.5]
        """)
    frame = run_sweep(load_sweep(path), tmp_path / "r.parquet", workers=1,
                      progress=False).frame
    for _, row in frame.iterrows():
        cost = token_cost(row["capex_USD"], row["power_W"], row["goodput_tokens_per_s"],
                          CostAssumptions(pue=row["pue"], electricity_USD_per_kWh=0.12),
                          share=row["world"] / row["accelerators"], goodput=True)
        assert row["USD_per_Mtok"] == pytest.approx(cost.USD_per_Mtok)
        assert row["J_per_token"] == pytest.approx(cost.J_per_token)
        assert row["capex_low_USD"] <= row["capex_USD"] <= row["capex_high_USD"]
    low, high = frame.sort_values("pue")["J_per_token"]
    assert high == pytest.approx(low * 1.5 / 1.1)


def test_the_injection_metric_is_the_scale_out_bandwidth_per_accelerator(place, tmp_path):
    """One toy box is one scale-up domain: its 4 accelerators have one 100 Gb/s NIC each
    (12.5 GB/s of scale-out) and 40 GB/s of scale-up links. The sweep's injection_Bps
    used to be the bisection's (52.5 GB/s, the scale-up added because the halves split
    the one domain); it is the scale-out figure ``advise`` and ``step`` multiply."""
    path = place("""\
        design: design.yaml
        catalogs: [toy.yaml]
        fixed:
          model: toy-dense
          global_batch: 64
          design.systems: 1
        """)
    row = run_sweep(load_sweep(path), tmp_path / "r.parquet", workers=1,
                    progress=False).frame.iloc[0]
    design, catalog = load_design(tmp_path / "design.yaml",
                                  extra_catalogs=[tmp_path / "toy.yaml"])
    box = build_fabric(replace(design, systems=1), catalog)
    assert row["injection_Bps"] == 12.5e9
    assert box.injection.bisection_Bps == pytest.approx(52.5e9)
    from topomodel.fabric.structure import scaleout_injection_Bps

    assert scaleout_injection_Bps(box.injection) == row["injection_Bps"]


def test_failing_points_record_their_error_and_the_sweep_goes_on(place, tmp_path):
    outcome = run_sweep(load_sweep(place()), tmp_path / "r.parquet", workers=1,
                        progress=False)
    frame = outcome.frame
    assert len(frame) == 18 and outcome.ran == 18
    failed = frame[frame["error"].notna()]
    assert set(failed["tp"]) == {3} and len(failed) == 6
    assert failed["error"].str.contains("tp=3 must divide the 16 heads").all()
    assert failed["step_time_s"].isna().all() and not failed["feasible"].any()
    ok = frame[frame["error"].isna()]
    assert ok["step_time_s"].gt(0).all()
    assert (ok["feasible"] == ((ok["comm_share"] <= 0.5) & (ok["memory_bytes"] < 2e9))).all()
    assert list(frame["point"]) == list(range(18))
    assert not journal_path(tmp_path / "r.parquet").exists()
    on_disk = pd.read_parquet(tmp_path / "r.parquet")
    assert on_disk.drop(columns="elapsed_s").equals(frame.drop(columns="elapsed_s"))


def test_constraints_mark_points_infeasible(place, tmp_path):
    path = place(SWEEP.replace("  - comm_share <= 0.5\n", "  - comm_share <= 0.01\n"))
    frame = run_sweep(load_sweep(path), tmp_path / "r.csv", workers=1, progress=False).frame
    ok = frame[frame["error"].isna()]
    assert not ok["feasible"].any()
    assert ok["violations"].str.contains("comm_share <= 0.01").all()


# Interruptions and resume --------------------------------------------------------------


def _interrupt_at(n, context, params, calls=[0]):  # noqa: B006 - a counter on purpose
    calls[0] += 1
    if calls[0] == n:
        raise KeyboardInterrupt
    return evaluate_point(context, params)


def test_resume_after_ctrl_c_gives_the_uninterrupted_result(place, tmp_path):
    sweep = load_sweep(place())
    whole = run_sweep(sweep, tmp_path / "whole.parquet", workers=1, progress=False)
    out = tmp_path / "cut.parquet"
    with pytest.raises(KeyboardInterrupt):
        run_sweep(sweep, out, workers=1, progress=False,
                  evaluate=functools.partial(_interrupt_at, 7, calls=[0]))
    assert not out.exists()
    journal = journal_path(out).read_text().splitlines()
    assert len(journal) == 1 + 6  # the header and the six points finished before Ctrl-C
    with pytest.raises(UsageError, match="add --resume to continue"):
        run_sweep(sweep, out, workers=1, progress=False)
    resumed = run_sweep(sweep, out, workers=1, progress=False, resume=True)
    assert (resumed.resumed, resumed.ran) == (6, 12)
    pd.testing.assert_frame_equal(frame_of(resumed), frame_of(whole))
    again = run_sweep(sweep, out, workers=1, progress=False, resume=True)
    assert again.ran == 0
    pd.testing.assert_frame_equal(frame_of(again), frame_of(whole))


KILLER = """\
import os, signal, sys
from topomodel.sweep import evaluate_point, load_sweep, run_sweep
calls = 0
def killer(context, params):
    global calls
    calls += 1
    if calls == int(sys.argv[3]):
        os.kill(os.getpid(), signal.SIGKILL)
    return evaluate_point(context, params)
run_sweep(load_sweep(sys.argv[1]), sys.argv[2], workers=1, progress=False, evaluate=killer)
"""


def test_a_killed_process_loses_no_finished_point(place, tmp_path):
    sweep_file = place()
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    out = tmp_path / "killed.parquet"
    run = subprocess.run([sys.executable, str(script), str(sweep_file), str(out), "11"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == -signal.SIGKILL, run.stderr
    assert not out.exists()
    assert len(journal_path(out).read_text().splitlines()) == 1 + 10
    # a torn last line (killed mid-write) is dropped, not misread
    with journal_path(out).open("a") as journal:
        journal.write('{"key": "00')
    sweep = load_sweep(sweep_file)
    resumed = run_sweep(sweep, out, workers=1, progress=False, resume=True)
    assert (resumed.resumed, resumed.ran) == (10, 8)
    whole = run_sweep(sweep, tmp_path / "whole.parquet", workers=1, progress=False)
    pd.testing.assert_frame_equal(frame_of(resumed), frame_of(whole))


OVERSUBSCRIPTION = "design.scaleout.oversubscription[0]"


def _culprit(tp, micro_batch, oversubscription):
    return (tp == 2) & (micro_batch == 2) & (oversubscription == "2:1")


def _kill_worker(marker, always, context, params):
    """Kill this worker process at one point: the first time, or every time."""
    if _culprit(params["tp"], params["micro_batch"], params[OVERSUBSCRIPTION]):
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
            first = True
        except FileExistsError:
            first = False
        if first or always:
            os.kill(os.getpid(), signal.SIGKILL)
    return evaluate_point(context, params)


def test_killed_workers_are_replaced_and_only_the_culprit_fails(place, tmp_path):
    sweep = load_sweep(place(SWEEP.replace("stop: 3", "stop: 2")))  # 12 points
    whole = run_sweep(sweep, tmp_path / "whole.parquet", workers=1, progress=False)
    once = run_sweep(sweep, tmp_path / "once.parquet", workers=2, progress=False,
                     evaluate=functools.partial(_kill_worker, str(tmp_path / "m1"), False))
    pd.testing.assert_frame_equal(frame_of(once), frame_of(whole))
    always = run_sweep(sweep, tmp_path / "always.parquet", workers=2, progress=False,
                       evaluate=functools.partial(_kill_worker, str(tmp_path / "m2"), True))
    frame = always.frame
    died = frame["error"].fillna("").str.contains("worker process died")
    culprits = _culprit(frame["tp"], frame["micro_batch"], frame[OVERSUBSCRIPTION])
    assert (died == culprits).all() and culprits.sum() == 1
    rest = frame_of(always)[~culprits]
    pd.testing.assert_frame_equal(rest, frame_of(whole)[~culprits])


def test_resume_a_longer_sweep_and_retry_failed(place, tmp_path):
    out = tmp_path / "r.csv"
    short = place(SWEEP.replace("tp: [1, 2, 3]", "tp: [1, 3]"))
    first = run_sweep(load_sweep(short), out, workers=1, progress=False)
    assert first.ran == 12 and out.exists()
    longer = load_sweep(place())
    grown = run_sweep(longer, out, workers=1, progress=False, resume=True)
    assert (grown.resumed, grown.ran) == (12, 6)  # only the tp=2 points are new
    retried = run_sweep(longer, out, workers=1, progress=False, resume=True,
                        retry_failed=True)
    assert retried.ran == 6  # the tp=3 points failed; they run again
    whole = run_sweep(longer, tmp_path / "whole.csv", workers=1, progress=False)
    pd.testing.assert_frame_equal(frame_of(retried), frame_of(whole))
    assert pd.read_csv(out)["key"].tolist() == list(longer.keys)


# Local pool and Dask --------------------------------------------------------------------


def error_lines(capsys):
    """What a sweep printed on stderr, less the point count it states before it starts."""
    return [line for line in capsys.readouterr().err.strip().splitlines()
            if not re.match(r"topomodel: sweep .*: [\d,]+ points \(limit", line)]


def test_local_pool_and_dask_cluster_agree(place, tmp_path, capsys):
    distributed = pytest.importorskip("distributed")
    sweep = load_sweep(place())
    alone = run_sweep(sweep, tmp_path / "alone.parquet", workers=1, progress=False)
    pool = run_sweep(sweep, tmp_path / "pool.parquet", workers=2, progress=False)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster:
        dask = run_sweep(sweep, tmp_path / "dask.parquet", progress=False,
                         scheduler=cluster.scheduler_address)
        # the sweep file's dask setting, through the CLI
        in_file = place(SWEEP + f"dask: {{scheduler: '{cluster.scheduler_address}'}}\n",
                        "on-dask.yaml")
        out = tmp_path / "cli.csv"
        argv = ["sweep", str(in_file), "-o", str(out), "--format", "json"]
        assert main(argv) == 2  # a sweep file alone never picks the cluster
        err = error_lines(capsys)
        assert len(err) == 1 and "cannot choose alone" in err[0]
        assert "--use-file-scheduler" in err[0] and "must be trusted" in err[0]
        assert not out.exists() and not journal_path(out).exists()
        assert main([*argv, "--use-file-scheduler"]) == 0
    assert dask.scheduler == cluster.scheduler_address
    assert json.loads(capsys.readouterr().out)["computed"] == 18
    pd.testing.assert_frame_equal(frame_of(pool), frame_of(alone))
    pd.testing.assert_frame_equal(frame_of(dask), frame_of(alone))
    from_cli = pd.read_csv(out).drop(columns="elapsed_s")
    assert from_cli["step_time_s"].tolist() == pytest.approx(
        frame_of(alone)["step_time_s"].tolist(), nan_ok=True, rel=1e-15)


def test_unreachable_scheduler_is_a_clean_error(place, tmp_path, monkeypatch, capsys):
    pytest.importorskip("distributed")
    monkeypatch.setattr("topomodel.sweep.pool.DASK_CONNECT_TIMEOUT", "1s")
    sweep = load_sweep(place("design: design.yaml\ncatalogs: [toy.yaml]\n"
                             "fixed: {model: toy-dense}\n"))
    out = tmp_path / "r.parquet"
    with pytest.raises(UsageError, match="cannot reach the Dask scheduler"):
        run_sweep(sweep, out, progress=False, scheduler="tcp://127.0.0.1:1")
    assert not out.exists() and not journal_path(out).exists()  # the next run may start
    for address in ("tcp://127.0.0.1:1", "tls://127.0.0.1:1"):
        assert main(["sweep", str(sweep.file), "-o", str(out), "--scheduler", address]) == 2
        err = error_lines(capsys)
        assert err == [f"topomodel: error: cannot reach the Dask scheduler at {address}:"
                       + err[0].split(address + ":", 1)[1]], err
        assert not out.exists() and not journal_path(out).exists()
    monkeypatch.setenv("TOPOMODEL_DASK_SCHEDULER", "tcp://127.0.0.1:1")
    assert main(["sweep", str(sweep.file), "-o", str(out)]) == 2
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:1" in capsys.readouterr().err
    assert main(["sweep", str(sweep.file), "-o", str(out), "--scheduler", "http://x"]) == 2
    assert "not a Dask scheduler address" in capsys.readouterr().err


# Reports and the CLI ----------------------------------------------------------------------


def test_report_best_points_and_pareto_front(place, tmp_path):
    outcome = run_sweep(load_sweep(place()), tmp_path / "r.parquet", workers=1,
                        progress=False)
    from topomodel.sweep import pareto_objectives

    objectives = pareto_objectives(outcome.sweep, ["power_W", "+mfu"])
    report = sweep_report(outcome, pareto=objectives, plot=str(tmp_path / "front.svg"))
    frame = outcome.frame
    usable = frame[frame["error"].isna() & frame["feasible"]]
    best = {b["metric"]: b for b in report.data["best"]}
    assert best["step_time_s"]["value"] == usable["step_time_s"].min()
    assert best["mfu"]["value"] == usable["mfu"].max()
    front = {p["key"] for p in report.data["pareto"]["points"]}
    values = usable[["power_W", "mfu"]].to_numpy()
    dominated = [any((o[0] <= v[0]) and (o[1] >= v[1]) and (o != v).any() for o in values)
                 for v in values]
    assert front == set(usable["key"][~np.array(dominated)])
    assert front == set(usable["key"][pareto_mask(values, [False, True])])
    assert (tmp_path / "front.svg").read_text().startswith("<?xml")
    assert report.data["failed"] == 6
    # the toy parts have no power figure: a power front over partial sums says so
    assert not usable["power_complete"].any()
    partial = [w for w in report.warnings if w.startswith("power is a partial sum in")]
    assert partial == [f"power is a partial sum in {len(usable)} point(s): the catalog has"
                       " no power figure for the parts power_unknown names"]


def test_cli_sweep_json_dry_run_and_overwrite(place, capsys, tmp_path):
    path = place()
    out = tmp_path / "results.parquet"
    plot = tmp_path / "front.png"
    argv = ["sweep", str(path), "-o", str(out), "--workers", "1", "--pareto", "power_W",
            "step_time_s", "--plot", str(plot), "--format", "json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema"] == "topomodel.sweep" and data["points"] == 18
    assert data["computed"] == 18 and data["failed"] == 6
    assert data["pareto"]["x"] == "power_W" and data["pareto"]["points"]
    assert plot.read_bytes().startswith(b"\x89PNG") and out.exists()
    assert main(argv) == 2
    assert "exists: add --resume" in capsys.readouterr().err
    assert main([*argv, "--resume"]) == 0
    assert json.loads(capsys.readouterr().out)["computed"] == 0
    assert main([*argv, "--overwrite"]) == 0
    assert json.loads(capsys.readouterr().out)["computed"] == 18
    assert main(["sweep", str(path), "--dry-run", "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["points"], plan["designs"], plan["blocks"]) == (18, 3, [18])
    assert main(["sweep", str(path), "--dry-run"]) == 0
    assert "distinct designs to build" in capsys.readouterr().out


def test_cli_interrupt_keeps_the_journal_and_says_resume(place, capsys, tmp_path,
                                                         monkeypatch):
    import topomodel.sweep as sweep_module

    original = sweep_module.run_sweep

    def interrupted(*args, **kwargs):
        return original(*args, **{**kwargs,
                                  "evaluate": functools.partial(_interrupt_at, 3, calls=[0])})

    monkeypatch.setattr(sweep_module, "run_sweep", interrupted)
    out = tmp_path / "r.parquet"
    with pytest.raises(SystemExit) as caught:
        main(["sweep", str(place()), "-o", str(out), "--workers", "1"])
    assert caught.value.code == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "--resume" in err
    assert len(journal_path(out).read_text().splitlines()) == 1 + 2


def test_two_sweeps_cannot_write_the_same_results(place, tmp_path):
    import fcntl

    sweep = load_sweep(place())
    out = tmp_path / "r.parquet"
    journal_path(out).write_text("")
    with journal_path(out).open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running sweep holds it
        with pytest.raises(UsageError, match="another sweep is writing these results"):
            run_sweep(sweep, out, workers=1, progress=False, resume=True)
    assert not out.exists()


def test_a_tls_scheduler_runs_the_sweep(place, tmp_path, monkeypatch, capsys):
    """tls:// addresses work, with the certificates from Dask's configuration."""
    distributed = pytest.importorskip("distributed")
    import shutil

    if shutil.which("openssl") is None:
        pytest.skip("openssl makes the test certificates")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
                    "1", "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    from distributed.security import Security

    security = Security(tls_ca_file=str(cert), tls_client_cert=str(cert),
                        tls_client_key=str(key), tls_scheduler_cert=str(cert),
                        tls_scheduler_key=str(key), tls_worker_cert=str(cert),
                        tls_worker_key=str(key), require_encryption=True)
    for name, value in (("CA_FILE", cert), ("CLIENT__CERT", cert), ("CLIENT__KEY", key)):
        monkeypatch.setenv(f"DASK_DISTRIBUTED__COMM__TLS__{name}", str(value))
    import dask

    dask.config.refresh()
    sweep_file = place("design: design.yaml\ncatalogs: [toy.yaml]\n"
                       "fixed: {model: toy-dense}\nparameters: {tp: [1, 2]}\n")
    out = tmp_path / "tls.csv"
    try:
        with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                      protocol="tls://", host="127.0.0.1",
                                      security=security, dashboard_address=":0") as cluster:
            address = cluster.scheduler_address
            assert address.startswith("tls://")
            assert main(["sweep", str(sweep_file), "-o", str(out), "--scheduler", address,
                         "--format", "json"]) == 0
    finally:
        monkeypatch.undo()
        dask.config.refresh()
    assert json.loads(capsys.readouterr().out)["computed"] == 2
    assert len(pd.read_csv(out)) == 2


SLOW = """\
import sys, time
from topomodel.sweep import load_sweep, run_sweep
def slow(context, params):
    open(sys.argv[3] + str(params["tp"]), "w").close()
    time.sleep(120)
if __name__ == "__main__":
    run_sweep(load_sweep(sys.argv[1]), sys.argv[2], workers=2, progress=False, evaluate=slow)
"""


def _descendants(pid):
    """Every process below ``pid`` (read from /proc)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_killed_sweep_leaves_no_process_behind(place, tmp_path):
    import time

    sweep_file = place("design: design.yaml\ncatalogs: [toy.yaml]\n"
                       "fixed: {model: toy-dense}\nparameters: {tp: [1, 2]}\n")
    script = tmp_path / "slow.py"
    script.write_text(SLOW)
    marker = tmp_path / "started-"
    run = subprocess.Popen([sys.executable, str(script), str(sweep_file),
                            str(tmp_path / "r.parquet"), str(marker)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    below = []
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("started-*"))) < 2:  # both workers are computing
            assert time.monotonic() < deadline and run.poll() is None
            time.sleep(0.1)
        below = _descendants(run.pid)
        assert len(below) >= 3  # the fork server (or spawner), two workers, ...
        run.kill()
        run.wait()
        deadline = time.monotonic() + 15
        while not all(_gone(pid) for pid in below) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [pid for pid in below if not _gone(pid)] == []
    finally:  # the processes this test started, should any be left
        run.kill()
        for pid in below:
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)


def _interrupting(after, context, params, calls):
    calls[0] += 1
    if calls[0] == after:
        raise KeyboardInterrupt
    return evaluate_point(context, params)


def test_a_torn_journal_line_is_trimmed_before_the_resume_appends(place, tmp_path):
    sweep = load_sweep(place())
    out = tmp_path / "r.parquet"
    with pytest.raises(KeyboardInterrupt):
        run_sweep(sweep, out, workers=1, progress=False,
                  evaluate=functools.partial(_interrupting, 5, calls=[0]))
    with journal_path(out).open("a") as journal:
        journal.write('{"key": "00')  # a process killed mid-write
    with pytest.raises(KeyboardInterrupt):  # the resume appends 3 points, then stops
        run_sweep(sweep, out, workers=1, progress=False, resume=True,
                  evaluate=functools.partial(_interrupting, 4, calls=[0]))
    lines = journal_path(out).read_text().splitlines()  # from disk, as a third run reads
    assert len(lines) == 1 + 4 + 3
    assert all(isinstance(json.loads(line), dict) for line in lines)
    resumed = run_sweep(sweep, out, workers=1, progress=False, resume=True)
    assert (resumed.resumed, resumed.ran) == (7, 11)
    whole = run_sweep(sweep, tmp_path / "whole.parquet", workers=1, progress=False)
    pd.testing.assert_frame_equal(frame_of(resumed), frame_of(whole))


@pytest.mark.parametrize("flag", ["--resume", "--overwrite"])
def test_a_symlinked_journal_or_results_file_is_refused(place, tmp_path, capsys, flag):
    sweep_file = place("design: design.yaml\ncatalogs: [toy.yaml]\n"
                       "fixed: {model: toy-dense}\n")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "r.csv"
    journal_path(out).symlink_to(victim)
    assert main(["sweep", str(sweep_file), "-o", str(out), "--workers", "1", flag]) == 2
    err = error_lines(capsys)
    assert len(err) == 1 and "is a symbolic link" in err[0], err
    assert victim.read_text() == "precious\n" and journal_path(out).is_symlink()
    journal_path(out).unlink()
    out.symlink_to(victim)
    assert main(["sweep", str(sweep_file), "-o", str(out), "--workers", "1", flag]) == 2
    assert "is a symbolic link" in capsys.readouterr().err
    assert victim.read_text() == "precious\n" and out.is_symlink()
    assert not journal_path(out).exists()


def test_results_are_written_and_the_journal_removed_under_the_lock(place, tmp_path,
                                                                    monkeypatch):
    import fcntl

    import topomodel.sweep.run as run_module

    sweep = load_sweep(place("design: design.yaml\ncatalogs: [toy.yaml]\n"
                             "fixed: {model: toy-dense}\n"))
    out = tmp_path / "r.parquet"
    seen = []
    original = run_module.write_results

    def write_and_probe(*args):
        with journal_path(out).open("a") as other:  # a second sweep arriving now
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                seen.append("unlocked")
            except BlockingIOError:
                seen.append("locked")
        table = original(*args)
        assert journal_path(out).exists()  # removed after the results, not before
        return table

    monkeypatch.setattr(run_module, "write_results", write_and_probe)
    unlinked = []
    real_remove = run_module.Journal.remove

    def remove(self):
        with journal_path(out).open("a") as other, pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        unlinked.append(True)
        real_remove(self)

    monkeypatch.setattr(run_module.Journal, "remove", remove)
    run_sweep(sweep, out, workers=1, progress=False)
    assert seen == ["locked"] and unlinked == [True]
    assert out.exists() and not journal_path(out).exists()


def _malformed(context, points, evaluate):
    return [{"index": i, "metrics": "x"} for i, _ in points]


def test_malformed_worker_results_are_one_clear_error(place, tmp_path, monkeypatch,
                                                      capsys):
    import topomodel.sweep.run as run_module

    sweep_file = place("design: design.yaml\ncatalogs: [toy.yaml]\n"
                       "fixed: {model: toy-dense}\nparameters: {tp: [1, 2]}\n")
    monkeypatch.setattr(run_module, "run_points", _malformed)
    out = tmp_path / "r.csv"
    assert main(["sweep", str(sweep_file), "-o", str(out), "--workers", "1"]) == 2
    err = error_lines(capsys)
    assert len(err) == 1 and "malformed result for points 0..0" in err[0], err
    assert "got one holding a dict" in err[0]
    assert not out.exists() and not journal_path(out).exists()
    distributed = pytest.importorskip("distributed")
    monkeypatch.setattr("topomodel.sweep.pool.run_points", _malformed)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster:
        assert main(["sweep", str(sweep_file), "-o", str(out),
                     "--scheduler", cluster.scheduler_address]) == 2
    err = error_lines(capsys)
    assert len(err) == 1 and "a worker returned a malformed result" in err[0], err


def test_a_serve_sweep_records_what_serve_reports(tmp_path):
    """job: serve runs topomodel serve at each point: its metrics are serve's numbers."""
    from topomodel.analysis.serving.serve import serve
    from topomodel.analysis.serving.serve_assumptions import ServeAssumptions
    from topomodel.sweep.params import JOB_METRICS

    sweep = load_sweep("examples/sweeps/nvl72-serving.yaml")
    assert sweep.job == "serve" and sweep.metrics == JOB_METRICS["serve"]
    frame = run_sweep(sweep, tmp_path / "r.csv", workers=1, progress=False).frame
    assert len(frame) == 8 and frame["error"].isna().all()
    fabric = build_fabric(*load_design("examples/gb200-nvl72-cluster.yaml"))
    r = serve(fabric, fabric.catalog.get("deepseek-v3", Model), serving=ServeAssumptions(
        prefill_tp=1, prefill_ep=32, decode_tp=1, decode_ep=64, input_tokens=4000,
        output_tokens=1000, placement="separate", transfer="after"))
    row = frame[(frame["placement"] == "separate") & (frame["decode_ep"] == 64)
                & (frame["transfer"] == "after")].iloc[0]
    assert row["ttft_s"] == pytest.approx(r.ttft_s) and row["tpot_s"] == pytest.approx(
        r.tpot_s)
    assert row["network_share"] == pytest.approx(r.network_share)
    assert row["USD_per_M_output_tokens"] == pytest.approx(r.cost.USD_per_Mtok)
    assert row["tokens_per_s_per_accelerator"] == pytest.approx(
        r.tokens_per_s_per_accelerator)
    assert row["kv_bottleneck_tier"] == "leaf"
    # packed, 32 + 32 GPUs fit rack 0: the hand-off stays on NVLink
    packed = frame[(frame["placement"] == "packed") & (frame["decode_ep"] == 32)]
    assert set(packed["kv_bottleneck_tier"]) == {"scaleup"}
