"""Benchmark: build a fabric and its report at 1k to 131k accelerators.

Run: python benchmarks/bench_build.py [--sizes 1024 8192 32768 131072]

Each size is a rail-optimized 3-tier (or fewer) fat-tree of 8-GPU HGX B200-class
servers with one 800G NIC per GPU under 144-port XDR switches. Prints wall time for
build and report and the peak resident memory of the process (which only grows, so run
one size per process for exact per-size peaks: ``--sizes 131072``).
"""

from __future__ import annotations

import argparse
import resource
import time

from topomodel.analysis.bisection import bisection
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.report.build import build_report
from topomodel.report.output import render

DESIGN = """
name: benchmark {n} GPUs
system: hgx-b200
systems: {systems}
scaleout:
  kind: fat_tree
  nic: connectx-8
  switch: q3400
"""


def run(accelerators: int) -> dict[str, float]:
    text = DESIGN.format(n=accelerators, systems=accelerators // 8)
    t0 = time.perf_counter()
    design, catalog = load_design("bench.yaml", text=text)
    fabric = build_fabric(design, catalog)
    t1 = time.perf_counter()
    report = build_report(fabric, bisection_result=bisection(fabric, max_flow_node_limit=0))
    render(report, "table")
    t2 = time.perf_counter()
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"accelerators": accelerators, "nodes": len(fabric.nodes),
            "link_rows": len(fabric.links), "build_s": t1 - t0, "report_s": t2 - t1,
            "peak_rss_MiB": peak_mib}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 8192, 32768, 131072])
    args = parser.parse_args()
    print("accelerators  nodes     link rows  build s  report s  peak RSS MiB")
    for n in args.sizes:
        r = run(n)
        print(f"{r['accelerators']:>12,}  {r['nodes']:>8,}  {r['link_rows']:>9,}"
              f"  {r['build_s']:>7.2f}  {r['report_s']:>8.2f}  {r['peak_rss_MiB']:>12.0f}")


if __name__ == "__main__":
    main()
