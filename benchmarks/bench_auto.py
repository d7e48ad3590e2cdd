"""Benchmark: one collective with ``algorithm="auto"`` (the fastest of the algorithms NCCL
runs, with NCCL's protocols), in-process CPU time.

Run: python benchmarks/bench_auto.py [--accelerators 4096 131072]

The fabric is the one of bench_build.py (HGX B200 servers, ConnectX-8, Q3400
fat-tree). A 1 GiB AllReduce over all accelerators: every candidate that applies is
built, bounded, and routed unless its bound already loses (issue #13, item 11).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_build import DESIGN

from topomodel.analysis.collectives.collective import run_collective
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--accelerators", type=int, nargs="+", default=[4096, 131072])
    args = parser.parse_args()
    for n in args.accelerators:
        design, catalog = load_design("bench.yaml", text=DESIGN.format(n=n, systems=n // 8))
        fabric = build_fabric(design, catalog)
        start_cpu = time.process_time()
        run = run_collective(fabric, "allreduce", 2**30)
        cpu = time.process_time() - start_cpu
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{n:,} GPUs: auto AllReduce 1 GiB -> {run.algorithm} ({run.timing.protocol}),"
              f" {run.time_s * 1e3:.3f} ms, busbw {run.busbw_Bps / 1e9:.1f} GB/s; routed"
              f" {sorted(run.candidates)}; {cpu:.2f} s CPU; peak RSS {peak:.0f} MiB")


if __name__ == "__main__":
    main()
