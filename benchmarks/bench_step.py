"""Benchmark: a full training step of a 131,072-accelerator layout, and the pipeline
timeline at 64 stages x 512 microbatches.

Run: python benchmarks/bench_step.py

Llama 3 70B on the bench_build.py fabric (HGX B200 servers, ConnectX-8, Q3400 3-tier
fat-tree): TP 8 x PP 4 x DP 4096, every collective of the step routed with all groups of
its kind at once (TP inside the servers, PP between them, DP across the fabric), every
operation of every microbatch on the pipeline timeline, first on a fresh fabric, then
warm (the fabric's views built, no collective time, route or step kept); then the
goodput model of that job (parts, failure rates, single points of failure, degradation
bound, checkpoint interval). Then the same fabric with TP 8 x PP 64 x DP 256 and 512
microbatches per pipeline (the schedule's largest case the issue names), and the timeline alone for
1F1B, interleaved 1F1B (2 chunks) and ZB-H1 at 64 x 512. Times are wall and CPU
(process) seconds.
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_build import DESIGN

from topomodel.analysis.collectives.routes import kept_routes
from topomodel.analysis.reliability.goodput import job_goodput
from topomodel.analysis.training.pipeline import schedule, timeline
from topomodel.analysis.training.step import StepAssumptions, step_time
from topomodel.analysis.training.stepshape import collective_times, recent_steps
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.traffic.layout import Layout


def _timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    n = 131072
    design, catalog = load_design("bench.yaml", text=DESIGN.format(n=n, systems=n // 8))
    fabric, build_s, _ = _timed(lambda: build_fabric(design, catalog))
    model = catalog.get("llama3-70b", Model)
    layout = Layout(tp=8, pp=4, dp=4096, global_batch=16384)
    result, step_s, step_cpu = _timed(lambda: step_time(fabric, model, layout))
    fabric.derived(collective_times).clear()  # warm: the fabric's views stay, no step kept
    fabric.derived(recent_steps).clear()
    fabric.derived(kept_routes).clear()  # routed again, as before routes were kept
    _, warm_s, warm_cpu = _timed(lambda: step_time(fabric, model, layout))
    goodput, goodput_s, _ = _timed(
        lambda: job_goodput(fabric, model, layout, StepAssumptions(), result))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"build {build_s:.2f} s; step model {step_s:.2f} s ({step_cpu:.2f} s CPU), warm"
          f" {warm_s:.2f} s ({warm_cpu:.2f} s CPU);"
          f" goodput {goodput_s:.2f} s; peak RSS {peak:.0f} MiB; step"
          f" {result.step_time_s:.3f} s, MFU {result.mfu:.1%}, communication share"
          f" {result.comm_share:.1%}, {goodput.interruptions_per_day:.1f}"
          f" interruptions/day, effective time {goodput.effective_time_fraction:.1%}")
    deep = Layout(tp=8, pp=64, dp=256, global_batch=256 * 512)
    result, deep_s, deep_cpu = _timed(lambda: step_time(fabric, model, deep))
    print(f"TP 8 x PP 64 x DP 256, {result.microbatches} microbatches per pipeline: step"
          f" model {deep_s:.2f} s ({deep_cpu:.2f} s CPU); step {result.step_time_s:.2f} s,"
          f" bubble {result.bubble_s:.2f} s, MFU {result.mfu:.1%}")
    p, m = 64, 512
    for name, v in (("1f1b", 1), ("1f1b", 2), ("zb-h1", 1)):
        def run(name: str = name, v: int = v) -> float:
            s = schedule(name, p, m, v)
            return timeline(s, np.ones((3, p, v)), np.full((p, 2), 0.01),
                            blocking_sends=True).makespan_s
        _, wall, cpu = _timed(run)
        label = f"{name}{' x ' + str(v) + ' chunks' if v > 1 else ''}"
        print(f"timeline {label} at {p} stages x {m} microbatches: {wall:.3f} s"
              f" ({cpu:.3f} s CPU)")


if __name__ == "__main__":
    main()
