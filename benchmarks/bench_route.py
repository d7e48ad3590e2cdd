"""Benchmark: route and time collectives over a 131,072-GPU fabric.

Run: python benchmarks/bench_route.py [--accelerators 131072]

The fabric is the one of bench_build.py (HGX B200 servers, ConnectX-8, Q3400 3-tier
fat-tree). Two workloads, each routed by the structured router with even ECMP and
timed (per-link bytes, slowest link, latency, ideal and topology parts):

- a ring AllReduce of 1 GiB over all accelerators;
- a direct All-to-All of 256 MiB inside every 64-rank EP group at once (8.3 M flows for
  131,072 ranks).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_build import DESIGN

from topomodel.analysis.timing import time_traffic
from topomodel.design import load_design
from topomodel.fabric.build import build_fabric
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
    for label, collective, spec, size, algorithm in (
            ("ring AllReduce, all ranks", "allreduce", "all", 2**30, "ring"),
            ("All-to-All in every 64-rank group", "alltoall", "block:64", 2**28, "direct")):
        t0 = time.perf_counter()
        groups = parse_groups(fabric, spec)
        traffic = collective_traffic(fabric, collective, groups, size, algorithm=algorithm)
        t1 = time.perf_counter()
        timing = time_traffic(fabric, traffic)
        t2 = time.perf_counter()
        flows = sum(p.flows for p in traffic.phases)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{label}: {flows:,} flows; traffic {t1 - t0:.2f} s, route + time"
              f" {t2 - t1:.2f} s; collective time {timing.time_s * 1e3:.3f} ms;"
              f" peak RSS {peak:.0f} MiB")


if __name__ == "__main__":
    main()
