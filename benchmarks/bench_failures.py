"""Benchmark: route collectives around failed parts on a 131,072-GPU fabric.

Run: python benchmarks/bench_failures.py [--accelerators 131072] [--share 0.01]

The fabric is the one of bench_build.py (HGX B200 servers, ConnectX-8, Q3400 3-tier
fat-tree). A seeded ``--share`` of its leaf-spine cables is failed (both directions),
then each workload is routed with even ECMP and timed, as bench_route.py does:

- a ring AllReduce of 1 GiB over all accelerators;
- a direct All-to-All of 256 MiB inside every 64-rank EP group at once.

CPU time is measured in-process (``time.process_time``) and includes building the
structured router's failure view on the first workload. The general router, which was
the only one routing around failures before, is asked too: it refuses at this size.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_build import DESIGN

from topomodel.analysis.collectives.timing import time_traffic
from topomodel.errors import RoutingError
from topomodel.fabric.build import build_fabric
from topomodel.fabric.failures import with_failures
from topomodel.inputs.design import load_design
from topomodel.routing.general import route_general
from topomodel.traffic.collectives import collective_traffic
from topomodel.traffic.groups import parse_groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--accelerators", type=int, default=131072)
    parser.add_argument("--share", type=float, default=0.01)
    args = parser.parse_args()
    n = args.accelerators
    design, catalog = load_design("bench.yaml", text=DESIGN.format(n=n, systems=n // 8))
    healthy = build_fabric(design, catalog)
    links, names = healthy.links, healthy.nodes["name"].to_numpy()
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    tier = healthy.nodes["tier"].astype(str).to_numpy()
    cables = np.flatnonzero((tier[src] == "leaf") & (tier[dst] == "spine"))
    rng = np.random.default_rng(0)
    cut = rng.choice(cables, size=round(args.share * len(cables)), replace=False)
    t0 = time.process_time()
    fabric = with_failures(healthy, (), [f"{names[src[r]]} -- {names[dst[r]]}" for r in cut])
    t1 = time.process_time()
    print(f"fabric: {n:,} GPUs, {len(fabric.nodes):,} nodes, {len(fabric.links):,} link rows;"
          f" {len(cut):,} of {len(cables):,} leaf-spine links failed ({t1 - t0:.2f} s CPU)")
    for label, collective, spec, size, algorithm in (
            ("ring AllReduce, all ranks", "allreduce", "all", 2**30, "ring"),
            ("All-to-All in every 64-rank group", "alltoall", "block:64", 2**28, "direct")):
        traffic = collective_traffic(fabric, collective, parse_groups(fabric, spec), size,
                                     algorithm=algorithm)
        t0 = time.process_time()
        timing = time_traffic(fabric, traffic)
        t1 = time.process_time()
        flows = sum(p.flows for p in traffic.phases)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{label}: {flows:,} flows; route + time {t1 - t0:.2f} s CPU; collective"
              f" time {timing.time_s * 1e3:.3f} ms; peak RSS {peak:.0f} MiB")
    ring = collective_traffic(fabric, "allreduce", parse_groups(fabric, "all"), 2**30,
                              algorithm="ring")
    try:
        route_general(fabric, ring.phases[0])
        print("general router: routed")
    except RoutingError as exc:
        print(f"general router: refused ({exc})")


if __name__ == "__main__":
    main()
