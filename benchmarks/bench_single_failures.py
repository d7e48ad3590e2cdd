"""Benchmark: the review's single-failure what-ifs on the 98,304-GPU example.

Run: python benchmarks/bench_single_failures.py [--design examples/100k-8gpu-3tier.yaml]
     [--compute-efficiency 0.7]   # for accelerators without measured GEMM rates (NPUs)

Llama 3 70B, TP 8 x PP 4 (the layout of the verb table in README.md). The featured
collective is the one the review features on this fabric: a direct All-to-All of 1 GiB
on ``stride:12288`` groups. For each part failed (a spine, a leaf, the most numerous
optic, a NIC) it prints the CPU seconds (``time.process_time``) of failing it, of the
collective and of the step routed around it, and the peak RSS so far.
"""

from __future__ import annotations

import argparse
import resource
import time

from topomodel.analysis.collectives.collective import run_collective
from topomodel.analysis.reliability.goodput import component_lines
from topomodel.analysis.reliability.single_failures import representatives
from topomodel.analysis.training.step import StepAssumptions, step_time
from topomodel.fabric.build import build_fabric
from topomodel.fabric.failures import with_failures
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.traffic.layout import Layout


def _rss_mib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--design", default="examples/100k-8gpu-3tier.yaml")
    parser.add_argument("--group", default="stride:12288")
    parser.add_argument("--compute-efficiency", type=float, default=None,
                        help="a flat share of peak compute (the NPU examples need one)")
    args = parser.parse_args()
    assumptions = StepAssumptions(compute_efficiency=args.compute_efficiency)
    design, catalog = load_design(args.design)
    fabric = build_fabric(design, catalog)
    model = catalog.get("llama3-70b", Model)
    layout = Layout(tp=8, pp=4, dp=len(fabric.accelerators) // 32)
    start = time.process_time()
    step_time(fabric, model, layout, assumptions)
    print(f"healthy step {time.process_time() - start:.2f} s, {_rss_mib()} MiB")
    start = time.process_time()
    run = run_collective(fabric, "alltoall", 2**30, [args.group])
    print(f"healthy {run.algorithm} alltoall {time.process_time() - start:.2f} s")
    for kind, line in representatives(component_lines(fabric, layout.world)).items():
        link = " -- " in line.representative
        start = time.process_time()
        failed = with_failures(fabric, () if link else (line.representative,),
                               (line.representative,) if link else ())
        fail_s = time.process_time() - start
        start = time.process_time()
        again = run_collective(failed, "alltoall", 2**30, [args.group],
                               algorithm=run.algorithm)
        collective_s = time.process_time() - start
        start = time.process_time()
        step_time(failed, model, layout, assumptions)
        step_s = time.process_time() - start
        print(f"{kind:6} {line.representative:28} fail {fail_s:.2f} s, collective"
              f" {collective_s:.2f} s (x{again.time_s / run.time_s:.3f}), step {step_s:.2f} s,"
              f" peak {_rss_mib()} MiB")


if __name__ == "__main__":
    main()
