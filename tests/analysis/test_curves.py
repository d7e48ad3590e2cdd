"""Collectives timed from a system's measured nccl-tests curve (analysis/collectives/curves.py).

The interpolation is checked against the curve's own points (a check of the lookup,
not a validation: the validation of the curve's effect is Korthikanti's Table 5 in
tests/integration/test_published.py, which is never an input). The rule's limits (one system,
the curve's collective and group size, sizes inside the curve, no what-if the curve
cannot answer) and the off switch each have a test; bad catalog input gives one error
naming file, line and key.
"""

import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from topomodel.analysis.collectives.collective import run_collective
from topomodel.analysis.collectives.curves import FROM_ALLREDUCE
from topomodel.analysis.collectives.timing import TimeModel
from topomodel.analysis.training.step import StepAssumptions, step_time
from topomodel.errors import CatalogError
from topomodel.fabric.build import build_fabric
from topomodel.inputs.catalog import load_catalog
from topomodel.inputs.design import load_design, with_overrides
from topomodel.inputs.parts import Model, System
from topomodel.traffic.layout import Layout

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MIB = 2**20
OFF = TimeModel(measured_curves=False)


@pytest.fixture(scope="module")
def selene():
    """Two DGX A100 of the Selene example (16 GPUs, two scale-up domains)."""
    design, catalog = load_design(EXAMPLES / "selene-dgx-a100.yaml")
    return build_fabric(with_overrides(design, systems=2), catalog)


@pytest.fixture(scope="module")
def curve(selene):
    system = selene.catalog.get("dgx-a100", System)
    (allreduce,) = system.measured_collectives
    return allreduce


def test_the_dgx_a100_curve_is_sourced_and_not_fed_from_table_5(curve):
    assert (curve.collective, curve.ranks, curve.provenance) == ("allreduce", 8, "datasheet")
    assert "[R30]" in curve.source and "NCCL 2.18.5" in curve.source
    assert "Table 5" in curve.notes and "not an input" in curve.notes
    sizes = [size for size, _ in curve.points]
    assert sizes[0] == 2**10 and sizes[-1] == 8 * 2**30 and len(sizes) == 24
    assert dict(curve.points)[64 * MIB] == pytest.approx(166.63e9)


def test_the_curve_reproduces_each_of_its_points(selene, curve):
    for size, busbw in curve.points:
        run = run_collective(selene, "allreduce", size, ["0-7"])
        assert run.timing.measured, size
        assert run.busbw_Bps == pytest.approx(busbw, rel=1e-9), size


def test_between_points_time_is_interpolated_in_log_size_and_log_time(selene, curve):
    points = dict(curve.points)
    t64, t128 = (s * 1.75 / points[s] for s in (64 * MIB, 128 * MIB))
    middle = np.sqrt(64 * MIB * 128 * MIB)
    run = run_collective(selene, "allreduce", middle, ["0-7"])
    assert run.time_s == pytest.approx(np.sqrt(t64 * t128), rel=1e-9)
    # and the split still adds up, the latency the model's
    timing = run.timing
    assert timing.latency_s + timing.bandwidth_s + timing.topology_s == pytest.approx(
        run.time_s)
    assert timing.latency_s == run_collective(selene, "allreduce", middle, ["0-7"],
                                              time_model=OFF).timing.latency_s


def test_off_gives_the_tuner_model(selene):
    """The model's 64 MiB all-reduce on 8 A100s is 545.3 us (docs/validation.md); the
    Azure run measured 704.8 us, which the curve gives."""
    off = run_collective(selene, "allreduce", 64 * MIB, ["0-7"], time_model=OFF)
    on = run_collective(selene, "allreduce", 64 * MIB, ["0-7"])
    assert off.timing.measured == ""
    assert off.time_s == pytest.approx(545.3e-6, rel=1e-3)
    assert on.time_s == pytest.approx(704.8e-6, rel=1e-3)


@pytest.mark.parametrize("size", [512, 16 * 2**30])
def test_outside_the_measured_sizes_the_model_times_it(selene, size):
    on = run_collective(selene, "allreduce", size, ["0-7"])
    off = run_collective(selene, "allreduce", size, ["0-7"], time_model=OFF)
    assert on.timing.measured == "" and on.time_s == off.time_s


@pytest.mark.parametrize("collective", FROM_ALLREDUCE)
def test_gather_and_scatter_run_at_the_allreduce_busbw(selene, curve, collective):
    run = run_collective(selene, collective, 64 * MIB, ["0-7"])
    assert "at the allreduce curve's busbw" in run.timing.measured
    assert run.busbw_Bps == pytest.approx(dict(curve.points)[64 * MIB], rel=1e-9)


@pytest.mark.parametrize(("collective", "group", "model"), [
    ("allreduce", "0-15", TimeModel()),  # two systems: the network, not the curve
    ("allreduce", "0-3", TimeModel()),  # no 4-rank curve
    ("alltoall", "0-7", TimeModel()),  # no curve of its own nor a derived one
    ("allreduce", "0-7", TimeModel(protocol="Simple")),  # a forced protocol: a what-if
    ("allreduce", "0-7", TimeModel(efficiency={"scaleup": 0.5})),  # a what-if too
])
def test_the_curve_times_only_what_it_measured(selene, collective, group, model):
    run = run_collective(selene, collective, 64 * MIB, [group], time_model=model)
    assert run.timing.measured == ""
    off = run_collective(selene, collective, 64 * MIB, [group],
                         time_model=replace(model, measured_curves=False))
    assert run.time_s == off.time_s


def test_a_system_without_a_curve_is_unchanged():
    fabric = build_fabric(*load_design(EXAMPLES / "hgx-h100-server.yaml"))
    on = run_collective(fabric, "allreduce", 64 * MIB, ["all"])
    off = run_collective(fabric, "allreduce", 64 * MIB, ["all"], time_model=OFF)
    assert on.timing.measured == "" and on.time_s == off.time_s


def test_a_step_says_which_collectives_the_curve_timed(selene):
    model = selene.catalog.get("megatron-gpt-1t", Model)
    model = replace(model, layers=8)
    layout = Layout(tp=8, pp=2, micro_batch=1, global_batch=8, recompute="full")
    on = step_time(selene, model, layout)
    off = step_time(selene, model, layout, StepAssumptions(time=OFF))
    timed = {c.kind: bool(c.measured) for c in on.comm}
    assert timed["tp"] and not timed["pp"]  # PP crosses InfiniBand between the boxes
    assert not any(c.measured for c in off.comm)
    tp_on, tp_off = (next(c for c in r.comm if c.kind == "tp") for r in (on, off))
    assert tp_on.time_s > tp_off.time_s  # the measured mid-size rate is below the tuner's


def test_cli_switch_and_note(tmp_path):
    def route(*extra):
        return subprocess.run(
            [sys.executable, "-m", "topomodel", "route", str(EXAMPLES / "selene-dgx-a100.yaml"),
             "--collective", "allreduce", "--size", "64 MiB", "--group", "0-7", *extra],
            capture_output=True, text=True, check=True).stdout
    measured = route()
    assert "timed from the measured allreduce curve of dgx-a100 [R30]" in measured
    assert "as measured (the model would pick" in measured  # the protocol is not claimed
    assert "measured" not in route("--no-measured-curves")


CURVE_SYSTEM = """\
systems:
  box:
    accelerator: a100-sxm-80gb
    accelerators: 8
    scaleup: {kind: switched, switch: nvswitch2, switches: 6,
              links_per_switch: [2, 2, 2, 2, 2, 2]}
    source: test
    provenance: assumed
    measured_collectives:
      - collective: COLLECTIVE
        ranks: RANKS
        points:
          - ["1 MiB", "36 GB/s"]
          - [SIZE, BUSBW]
        source: test
        provenance: assumed
"""


@pytest.mark.parametrize(("changes", "line", "key", "message"), [
    ({"BUSBW": '"40 GHz"'}, 14, "systems.box.measured_collectives[0].points[1]",
     "is a frequency"),
    ({"BUSBW": "40"}, 14, "systems.box.measured_collectives[0].points[1]", "bare number"),
    ({"SIZE": '"1 MiB"'}, 14, "systems.box.measured_collectives[0].points[1]",
     "sizes must be strictly increasing"),
    ({"SIZE": '"512 KiB"'}, 14, "systems.box.measured_collectives[0].points[1]",
     "sizes must be strictly increasing"),
    ({"COLLECTIVE": "allredux"}, 10, "systems.box.measured_collectives[0].collective",
     "did you mean 'allreduce'"),
    ({"RANKS": "16"}, 9, "systems.box.measured_collectives", "16 ranks, but the system"
     " has 8"),
])
def test_bad_curves_name_file_line_and_key(tmp_path, changes, line, key, message):
    text = CURVE_SYSTEM
    for word, value in {"COLLECTIVE": "allreduce", "RANKS": "8", "SIZE": '"2 MiB"',
                        "BUSBW": '"53 GB/s"', **changes}.items():
        text = text.replace(word, value)
    path = tmp_path / "curve.yaml"
    path.write_text(text)
    with pytest.raises(CatalogError, match=message) as info:
        load_catalog([path])
    problem = info.value.problems[0]
    assert (problem.file, problem.line, problem.key_path) == (str(path), line, key)


def test_a_bad_curve_is_one_cli_line_with_status_2(tmp_path):
    path = tmp_path / "curve.yaml"
    path.write_text(textwrap.dedent(CURVE_SYSTEM).replace("COLLECTIVE", "allreduce")
                    .replace("RANKS", "8").replace("SIZE", '"1 MiB"')
                    .replace("BUSBW", '"40 GB/s"'))
    done = subprocess.run([sys.executable, "-m", "topomodel", "catalog", "show", "box",
                           "--catalog", str(path)], capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"topomodel: error: {path}:14:")
    assert "strictly increasing" in lines[0]
