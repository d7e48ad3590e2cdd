"""calibrate from every input kind (calibrate/calibration.py, tracefit.py, fit.py): a
profiler trace fits the same figures as nccl-tests runs, both fitted together; a
topology dump's system joins the same overlay; --explain; bad inputs in one line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import EXAMPLES

from topomodel.analysis.assumptions import TimeModel
from topomodel.analysis.collectives.collective import run_collective
from topomodel.calibrate.calibration import calibrate_inputs
from topomodel.calibrate.fit import tiers_of
from topomodel.calibrate.inputs import input_kind, read_inputs
from topomodel.calibrate.overlay import write_overlay
from topomodel.cli import main
from topomodel.fabric.build import build_fabric
from topomodel.inputs.catalog import load_catalog
from topomodel.inputs.design import load_design
from topomodel.inputs.measured.nccltests import parse_nccl_tests
from topomodel.inputs.parts import ScaleupLink, System

DATA = EXAMPLES.parent / "tests" / "data"
DESIGN = EXAMPLES / "hgx-h100-server.yaml"
SIZES = [2 ** k for k in range(28, 33)]  # 256 MiB-4 GiB: bandwidth-bound on NVLink


def _fabric(*catalogs):
    return build_fabric(*load_design(DESIGN, extra_catalogs=list(catalogs)))


def _model(fabric, efficiency):
    return TimeModel(efficiency=dict.fromkeys(tiers_of(fabric, "scaleup_links", "nvlink4"),
                                              efficiency), measured_curves=False)


def _model_log(fabric, efficiency):
    """An all_reduce_perf log of the 8 GPUs whose times are the model's (auto) at an
    NVLink efficiency: the oracle the fit must recover."""
    lines = [f"#  Rank {r:2d} Group  0 Pid 1 on h device {r:2d} [0000:0{r}:00] GPU"
             for r in range(8)]
    lines += ["#  size  count  type  redop  root  time  algbw  busbw  #wrong",
              "#  (B)  (elements)  (us)  (GB/s)  (GB/s)"]
    for size in SIZES:
        t = run_collective(fabric, "allreduce", float(size), ["all"],
                           time_model=_model(fabric, efficiency)).time_s
        alg = size / t / 1e9
        lines.append(f"{size} {size // 4} float sum -1 {t * 1e6:.3f} {alg:.4f}"
                     f" {alg * 1.75:.4f} 0")
    lines.append("# Out of bounds values : 0 OK")
    return parse_nccl_tests("\n".join(lines), file="model.log")


def _model_trace(fabric, efficiency, folder):
    """Two ranks' Kineto traces of ring Simple all-gathers of SIZES on groups of 8, each
    kernel as long as the model's ring Simple time at an NVLink efficiency."""
    model = _model(fabric, efficiency)
    for rank in range(2):
        events, ts = [], 0.0
        for size in SIZES:
            t = run_collective(fabric, "allgather", float(size), ["block:8"],
                               algorithm="ring",
                               time_model=TimeModel(efficiency=model.efficiency,
                                                    measured_curves=False,
                                                    protocol="Simple")).time_s
            events.append({"ph": "X", "cat": "kernel", "ts": ts, "dur": t * 1e6,
                           "name": "ncclDevKernel_AllGather_RING_SIMPLE",
                           "pid": 0, "tid": 20,
                           "args": {"Collective name": "_allgather_base",
                                    "In msg nelems": size // 16, "Out msg nelems": size // 2,
                                    "Group size": 8, "dtype": "BFloat16",
                                    "Process Group Name": "0", "stream": 20}})
            ts += t * 1e6 + 10
        (folder / f"rank{rank}.json").write_text(json.dumps(
            {"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": 8,
                                                     "backend": "nccl"},
             "traceEvents": events}))
    return folder


def test_a_trace_and_a_log_fit_the_same_figure_together(tmp_path):
    """A log and a trace, both drawn from the model at NVLink efficiency 0.5 (the
    catalog's is 0.824): the efficiency is fitted on both curves at once and
    recovered, and it names both files."""
    fabric = _fabric()
    trace = _model_trace(fabric, 0.5, tmp_path)
    assert input_kind(trace).name == "PyTorch profiler trace"
    groups = read_inputs([trace])
    groups["nccl-tests"] = [_model_log(fabric, 0.5)]
    result = calibrate_inputs(fabric, groups)
    assert [c.series.kind for c in result.fit.curves] == ["nccl-tests", "profiler trace"]
    (fit,) = result.fit.fitted
    assert (fit.section, fit.entry, fit.key) == ("scaleup_links", "nvlink4", "efficiency")
    assert fit.before == pytest.approx(0.824)
    assert fit.after == pytest.approx(0.5, rel=1e-3)
    assert len(fit.curves) == 2 and len(fit.sizes) == 2 * len(SIZES)
    assert set(fit.files) == {"model.log", str(tmp_path / "rank0.json"),
                              str(tmp_path / "rank1.json")}
    assert max(abs(r) for r in fit.residual_after) < 1e-3
    # the trace alone fits the same figure to the same value
    alone = calibrate_inputs(fabric, read_inputs([trace])).fit.fitted[0]
    assert alone.after == pytest.approx(0.5, rel=1e-3) and alone.curves == (
        "allgather, groups of 8 (profiler trace)",)


def test_gloo_collectives_fit_nothing_and_say_why(capsys, tmp_path):
    status = main(["calibrate", str(DATA / "traces" / "gloo-2rank"), "--design",
                   str(DESIGN), "-o", str(tmp_path / "o.yaml")])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "gloo" in err
    assert not (tmp_path / "o.yaml").exists()


def test_a_dump_a_log_and_a_trace_make_one_overlay(tmp_path, capsys):
    out = tmp_path / "overlay.yaml"
    status = main(["calibrate", str(DATA / "nccl" / "h100-8gpu-degraded-allreduce.log"),
                   str(DATA / "traces" / "nccl-excerpt"),
                   str(DATA / "nccl-topo" / "dgx-h100.xml"), "--design", str(DESIGN),
                   "-o", str(out), "--format", "json"])
    assert status == 0
    data = json.loads(capsys.readouterr().out)
    assert [s["system"] for s in data["systems"]] == ["nccl-dgx-h100"]
    assert data["curves"][0]["curve"].startswith("allreduce")
    assert any("profiler trace" in c["curve"] for c in data["curves"])
    catalog = load_catalog([out])
    system = catalog.get("nccl-dgx-h100", System)
    assert system.provenance == "measured" and system.accelerator == "h100-sxm"
    link = catalog.get("nvlink4", ScaleupLink)
    assert link.efficiency == pytest.approx(0.24, abs=0.01)
    assert link.measured_from("efficiency") == str(
        DATA / "nccl" / "h100-8gpu-degraded-allreduce.log")


def test_the_dumps_system_with_the_overlays_figures(tmp_path):
    """A design on the dump's system: its launch latency fitted into the dump's entry."""
    dump_only = tmp_path / "dump.yaml"
    assert main(["calibrate", str(DATA / "nccl-topo" / "dgx-h100.xml"), "--design",
                 str(DESIGN), "-o", str(dump_only), "--format", "json"]) == 0
    design = tmp_path / "on-dump.yaml"
    design.write_text(DESIGN.read_text().replace("system: hgx-h100",
                                                 "system: nccl-dgx-h100"))
    assert "nccl-dgx-h100" in design.read_text()
    fabric = build_fabric(*load_design(design, extra_catalogs=[dump_only]))
    groups = read_inputs([DATA / "nccl" / "h100-8gpu-degraded-allreduce.log",
                          DATA / "nccl-topo" / "dgx-h100.xml"])
    result = calibrate_inputs(fabric, groups)
    path = write_overlay(tmp_path / "both.yaml", fabric.catalog, result.fit.fitted,
                         result.systems)
    system = load_catalog([path]).get("nccl-dgx-h100", System)
    assert system.measured_from("launch_latency") is not None
    assert system.provenance == "measured"


def test_explain_before_and_after(tmp_path):
    out = tmp_path / "o.yaml"
    cmd = [sys.executable, "-m", "topomodel", "calibrate",
           str(DATA / "nccl" / "h100-8gpu-degraded-allreduce.log"),
           str(DATA / "traces" / "nccl-excerpt"), "--design", str(DESIGN), "-o", str(out),
           "--explain", "--model", "llama3-8b", "--dp", "8", "--format", "json"]
    data = json.loads(subprocess.run(cmd, capture_output=True, text=True,
                                     check=True).stdout)["explain"]
    curve = data["curves"][0]
    assert curve["median_before"] < -0.5  # the degraded server: the model far too fast
    assert abs(curve["median_after"]) < abs(curve["median_before"])
    parts = {p["part"]: p for p in data["parts"]}
    # the overlay slows NVLink: the step's exposed communication grows, compute does not
    assert parts["compute"]["model_after_s"] == pytest.approx(
        parts["compute"]["model_before_s"])
    assert parts["step"]["model_after_s"] > parts["step"]["model_before_s"]
    assert data["comm_share"]["model_after"] > data["comm_share"]["model_before"]
    modelled = [k for k in data["kinds"] if k["model_before_s"] > 0]
    assert modelled and all(k["model_after_s"] > k["model_before_s"] for k in modelled)


@pytest.mark.parametrize(("path", "kind"), [
    ("traces/nccl-excerpt", "PyTorch profiler trace"),
    ("traces/nccl-excerpt/rank0.json", "PyTorch profiler trace"),
    ("traces/gloo-2rank/rank1.json.gz", "PyTorch profiler trace"),
    ("nccl-topo/dgx-h100.xml", "NCCL topology dump"),
    ("nccl/h100-8gpu-azure-allreduce.log", "nccl-tests text"),
])
def test_each_kind_is_recognised(path, kind):
    assert input_kind(DATA / path).name == kind


def test_a_truncated_dump_is_one_line_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "o.yaml"
    status = main(["calibrate", str(DATA / "nccl" / "h100-8gpu-degraded-allreduce.log"),
                   str(DATA / "nccl-topo" / "truncated.xml"), "--design", str(DESIGN),
                   "-o", str(out)])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "truncated.xml" in err
    assert not out.exists()
