"""Benchmark: a full training step of a 131,072-accelerator layout.

Run: python benchmarks/bench_step.py

Llama 3 70B on the bench_build.py fabric (HGX B200 servers, ConnectX-8, Q3400 3-tier
fat-tree): TP 8 x PP 4 x DP 4096, every collective of the step routed with all groups of
its kind at once (TP inside the servers, PP between them, DP across the fabric); then
the goodput model of that job (parts, failure rates, single points of failure,
degradation bound, checkpoint interval).
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_build import DESIGN

from topomodel.analysis.goodput import job_goodput
from topomodel.analysis.step import StepAssumptions, step_time
from topomodel.catalog import Model
from topomodel.design import load_design
from topomodel.fabric.build import build_fabric
from topomodel.traffic.layout import Layout


def main() -> None:
    n = 131072
    design, catalog = load_design("bench.yaml", text=DESIGN.format(n=n, systems=n // 8))
    t0 = time.perf_counter()
    fabric = build_fabric(design, catalog)
    t1 = time.perf_counter()
    model = catalog.get("llama3-70b", Model)
    layout = Layout(tp=8, pp=4, dp=4096, global_batch=16384)
    result = step_time(fabric, model, layout)
    t2 = time.perf_counter()
    goodput = job_goodput(fabric, model, layout, StepAssumptions(), result)
    t3 = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"build {t1 - t0:.2f} s; step model {t2 - t1:.2f} s; goodput {t3 - t2:.2f} s;"
          f" peak RSS {peak:.0f} MiB; step {result.step_time_s:.3f} s, MFU {result.mfu:.1%},"
          f" communication share {result.comm_share:.1%},"
          f" {goodput.interruptions_per_day:.1f} interruptions/day,"
          f" effective time {goodput.effective_time_fraction:.1%}")


if __name__ == "__main__":
    main()
