"""Benchmark: the layout planner on 16,384 GPUs, layouts decided per CPU second.

Run: python benchmarks/bench_plan.py [--max-tp 8 --max-cp 2 --max-micro-batch 2 ...]

Llama 3 70B with a global batch of 4,096 sequences on 2,048 HGX B200 servers
(ConnectX-8, Quantum-X800 Q3400, 3-tier fat-tree: the bench_build.py fabric at 16k).
Every layout of the space is decided in this process: invalid (the step model's
checks), over the memory, or its step modelled on the fabric with the collective
times the planner shares. Prints the counts, wall and CPU seconds, layouts per CPU
second (one process: per core), how many distinct collectives were routed, and checks
that the best layout's step, modelled again on a fresh fabric, has the same numbers.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_build import DESIGN

from topomodel.analysis.training.step import collective_times, step_time
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.plan.search import PlanJob, plan
from topomodel.plan.space import PlanSpace
from topomodel.traffic.layout import Layout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--accelerators", type=int, default=16384)
    parser.add_argument("--model", default="llama3-70b")
    parser.add_argument("--global-batch", type=int, default=4096)
    parser.add_argument("--max-tp", type=int, default=8)
    parser.add_argument("--max-pp", type=int, default=None)
    parser.add_argument("--max-cp", type=int, default=2)
    parser.add_argument("--max-micro-batch", type=int, default=2)
    parser.add_argument("--max-interleave", type=int, default=2)
    args = parser.parse_args()
    n = args.accelerators
    design, catalog = load_design("bench.yaml", text=DESIGN.format(n=n, systems=n // 8))
    fabric = build_fabric(design, catalog)
    space = PlanSpace(max_tp=args.max_tp, max_pp=args.max_pp, max_cp=args.max_cp,
                      max_micro_batch=args.max_micro_batch,
                      max_interleave=args.max_interleave)
    job = PlanJob(catalog.get(args.model, Model), Layout(global_batch=args.global_batch),
                  space, top=5)
    wall, cpu = time.perf_counter(), time.process_time()
    found = plan(fabric, job)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    t = found.tally
    routed = len(fabric.derived(collective_times))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{n:,} GPUs, {args.model}, global batch {args.global_batch}: {t.searched:,}"
          f" layouts searched ({t.invalid:,} invalid, {t.no_fit:,} over the memory,"
          f" {t.pruned:,} pruned by the bound, {t.evaluated:,} steps modelled);"
          f" {routed:,} distinct collectives routed")
    print(f"wall {wall:.1f} s, CPU {cpu:.1f} s: {t.searched / cpu:,.0f} layouts per CPU"
          f" second ({t.evaluated / cpu:,.0f} steps modelled per CPU second);"
          f" peak RSS {peak:.0f} MiB")
    if found.best:
        best = found.best[0]
        lay = best.layout
        again = step_time(build_fabric(design, catalog), job.model, lay)
        same = again == best
        print(f"best: TP {lay.tp} x PP {lay.pp} x DP {lay.dp} x CP {lay.cp}, micro-batch"
              f" {lay.micro_batch}, interleave {lay.interleave}, {lay.schedule},"
              f" recompute {lay.recompute}, ZeRO {lay.zero}, SP {lay.sequence_parallel},"
              f" order {lay.order}: step {best.step_time_s:.4f} s, MFU {best.mfu:.1%};"
              f" modelled again on a fresh fabric: {'identical' if same else 'DIFFERENT'}")


if __name__ == "__main__":
    main()
