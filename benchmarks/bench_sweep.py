"""Benchmark: points per second of a design-space sweep over a 16k-accelerator design.

Run: python benchmarks/bench_sweep.py [--workers N] [--sweep FILE]

Default sweep: examples/sweeps/b200-16k-fabric.yaml, 96 points of Llama 3 70B on 16,384
B200 GPUs (2,048 DGX B200 systems, 3-tier rail-optimized fat-tree) over 12 designs: 3
NIC/switch pairs x 4 leaf oversubscriptions x 2 TP x 4 PP. Every point builds (or takes
from the worker's cache) its fabric, routes every collective of the training step on it,
computes the job's goodput and records 38 metrics. Results go to a temporary
directory.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from pathlib import Path

from topomodel.sweep import load_sweep, run_sweep

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", default=str(ROOT / "examples/sweeps/b200-16k-fabric.yaml"))
    parser.add_argument("--workers", type=int, default=None,
                        help="local processes (default: every core)")
    args = parser.parse_args()
    t0 = time.perf_counter()
    sweep = load_sweep(args.sweep)
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        outcome = run_sweep(sweep, Path(tmp) / "results.parquet", workers=args.workers,
                            progress=False)
    frame = outcome.frame
    designs = frame[[c for c in sweep.columns if c.startswith("design.")]].drop_duplicates()
    point_s = frame["elapsed_s"].to_numpy()
    peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
               resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    print(f"{sweep.name}: {len(frame)} points, {len(designs)} designs,"
          f" {int(frame['accelerators'].max()):,} accelerators, {outcome.workers} workers")
    print(f"load + expand {t1 - t0:.2f} s; run {outcome.elapsed_s:.1f} s ="
          f" {len(frame) / outcome.elapsed_s:.2f} points/s;"
          f" per point median {statistics.median(point_s):.2f} s,"
          f" max {point_s.max():.2f} s (the first point of a design builds it);"
          f" failed {int(frame['error'].notna().sum())}; peak RSS of a process {peak:.0f} MiB")


if __name__ == "__main__":
    main()
