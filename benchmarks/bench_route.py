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

Warm All-to-All against its floor (issue #42 item 5): the 64-rank All-to-All is then
routed and timed ``--warm`` more times on the same fabric (its views built: what a step,
a sweep or a what-if pays per collective), min and median CPU s, beside **the floor**:
one numpy pass over its flows, ``np.bincount(src, weights=bytes)`` over the listed flows
(8.3 M at 131,072 ranks; the bytes each node sends, the least any router that reads each
flow once must do), its flow arrays listed before the clock starts, min of five passes.
The ratio is the warm median over the floor.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_build import DESIGN

from topomodel.analysis.collectives.timing import time_traffic
from topomodel.fabric.build import build_fabric
from topomodel.fabric.tables import Fabric
from topomodel.inputs.design import load_design
from topomodel.limits import MAX_FLOWS
from topomodel.traffic.collectives import collective_traffic
from topomodel.traffic.groups import parse_groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--accelerators", type=int, default=131072)
    parser.add_argument("--warm", type=int, default=5,
                        help="warm repeats of the 64-rank All-to-All (0: none)")
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
    if args.warm:
        warm_against_floor(fabric, args.warm)


def all_to_all_cpu_s(fabric: Fabric) -> float:
    """CPU s to make, route and time the direct All-to-All of 256 MiB in every 64-rank
    group."""
    c0 = time.process_time()
    traffic = collective_traffic(fabric, "alltoall", parse_groups(fabric, "block:64"), 2**28,
                                 algorithm="direct")
    time_traffic(fabric, traffic)
    return time.process_time() - c0


def warm_against_floor(fabric: Fabric, repeats: int) -> None:
    """Print the warm 64-rank All-to-All (min, median CPU s of ``repeats``), its floor
    (one numpy pass over its listed flows, min of five) and their ratio."""
    warm = [all_to_all_cpu_s(fabric) for _ in range(repeats)]
    traffic = collective_traffic(fabric, "alltoall", parse_groups(fabric, "block:64"), 2**28,
                                 algorithm="direct")
    src = np.concatenate([p.src for p in traffic.phases])
    nbytes = np.concatenate([p.bytes for p in traffic.phases])
    floor = []
    for _ in range(5):
        c0 = time.process_time()
        np.bincount(src, weights=nbytes, minlength=len(fabric.nodes))
        floor.append(time.process_time() - c0)
    median = statistics.median(warm)
    print(f"warm All-to-All in every 64-rank group ({len(src):,} flows listed): CPU s min"
          f" {min(warm):.3f} median {median:.3f}; floor (one pass) {min(floor):.3f};"
          f" median / floor {median / min(floor):.1f}x")


if __name__ == "__main__":
    main()
