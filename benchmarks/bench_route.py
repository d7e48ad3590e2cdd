"""Benchmark: route and time collectives over a 131,072-GPU fabric.

Run: python benchmarks/bench_route.py [--accelerators 131072]
     python benchmarks/bench_route.py --accelerators 4096   # adds the all-ranks All-to-All

The fabric is the one of bench_build.py (HGX B200 servers, ConnectX-8, Q3400 3-tier
fat-tree). Each workload is routed by the structured router with even ECMP and timed
(per-link bytes, slowest link, latency, ideal and topology parts; NCCL's PXN on, the
default):

- a ring AllReduce of 1 GiB over all accelerators;
- a direct All-to-All of 256 MiB inside every 64-rank EP group at once (8.3 M flows for
  131,072 ranks);
- where its pairs are within ``topomodel.limits.MAX_FLOWS`` (up to 4,096 ranks), a
  direct All-to-All of 1 GiB over all ranks (16.8 M flows at 4,096).

Peak RSS only grows within a process: its figure after a workload covers the ones
before it.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_build import DESIGN

from topomodel.analysis.collectives.timing import time_traffic
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.limits import MAX_FLOWS
from topomodel.traffic.collectives import collective_traffic
from topomodel.traffic.groups import parse_groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--accelerators", type=int, default=131072)
    args = parser.parse_args()
    n = args.accelerators
    design, catalog = load_design("bench.yaml", text=DESIGN.format(n=n, systems=n // 8))
    fabric = build_fabric(design, catalog)
    print(f"fabric: {n:,} GPUs, {len(fabric.nodes):,} nodes, {len(fabric.links):,} link rows")
    workloads = [("ring AllReduce, all ranks", "allreduce", "all", 2**30, "ring"),
                 ("All-to-All in every 64-rank group", "alltoall", "block:64", 2**28,
                  "direct")]
    if n * (n - 1) <= MAX_FLOWS:
        workloads.append(("All-to-All over all ranks", "alltoall", "all", 2**30, "direct"))
    for label, collective, spec, size, algorithm in workloads:
        t0, c0 = time.perf_counter(), time.process_time()
        groups = parse_groups(fabric, spec)
        traffic = collective_traffic(fabric, collective, groups, size, algorithm=algorithm)
        t1, c1 = time.perf_counter(), time.process_time()
        timing = time_traffic(fabric, traffic)
        t2, c2 = time.perf_counter(), time.process_time()
        flows = sum(p.flows for p in traffic.phases)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{label}: {flows:,} flows; traffic {t1 - t0:.2f} s ({c1 - c0:.2f} s CPU),"
              f" route + time {t2 - t1:.2f} s ({c2 - c1:.2f} s CPU); collective time"
              f" {timing.time_s * 1e3:.3f} ms; peak RSS {peak:.0f} MiB")


if __name__ == "__main__":
    main()
