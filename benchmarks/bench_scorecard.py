"""Benchmark: the scorecard of one design (`topomodel scorecard`), whole processes.

Run: python benchmarks/bench_scorecard.py [--runs 3] [--case NAME ...] [--before TREE ...]

Each case is one `topomodel scorecard` process; the CPU seconds are the child's (user +
system, from its rusage), beside wall (the machine is shared: read CPU). With
``--before``, each run is made by the package of this checkout and of each other
checkout named (``PYTHONPATH``), alternating trees run by run so the load falls on both
alike; each line names its tree, and the last says whether every tree's JSON output was
the same, byte for byte. Cases:

- ``superpod-given``: examples/dgx-h100-superpod.yaml (1,016 H100s), Llama 3 70B at TP 8
  x PP 4, the README's job: the step rows at that layout, scaling by its DP, a plan per
  strategy family.
- ``superpod-best``: the same design with no layout: the planner's best at full size
  and at 128 accelerators too.
- ``dual-plane-given``: examples/dual-plane-ethernet.yaml (1,024 H200s over two
  RoCE planes: hash routing, so the collectives run 4 seeds, and PXN moves the
  All-to-All's cross-rail pairs), Llama 3 70B at TP 8 x PP 4.
- ``supernodes-given``: examples/100k-4k-supernodes.yaml (98,304 NPUs), DeepSeek-V3 at
  PP 16 x EP 64 with the worked example's assumptions (docs/worked-example.md).

Prints one JSON line per run and the min and median per case.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = {
    "superpod-given": ["examples/dgx-h100-superpod.yaml", "--model", "llama3-70b",
                       "--tp", "8", "--pp", "4"],
    "superpod-best": ["examples/dgx-h100-superpod.yaml", "--model", "llama3-70b"],
    "dual-plane-given": ["examples/dual-plane-ethernet.yaml", "--model", "llama3-70b",
                         "--tp", "8", "--pp", "4"],
    "supernodes-given": ["examples/100k-4k-supernodes.yaml", "--model", "deepseek-v3",
                         "--pp", "16", "--ep", "64", "--global-batch", "49152",
                         "--compute-efficiency", "0.7", "--zero", "0"],
}


def run_once(args: list[str], tree: Path = ROOT) -> tuple[dict[str, float], bytes]:
    """Wall and CPU seconds of one `topomodel scorecard` process of the package in
    ``tree``, and its JSON output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "topomodel", "scorecard", *args,
                           "--format", "json", "--no-progress"], cwd=tree, check=True,
                          stdout=subprocess.PIPE,
                          env={**os.environ, "PYTHONPATH": str(tree)})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return ({"wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
             "peak_rss_MiB": round(after.ru_maxrss / 1024)}, done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--case", action="append", nargs="+", choices=list(CASES))
    parser.add_argument("--before", nargs="*", default=[], help="other checkouts")
    args = parser.parse_args()
    trees = [ROOT, *(Path(t).resolve() for t in args.before)]
    names = [n for group in args.case for n in group] if args.case else [
        "superpod-given", "superpod-best"]
    for name in names:
        runs: dict[Path, list[dict[str, float]]] = {tree: [] for tree in trees}
        outputs: set[bytes] = set()
        for _ in range(args.runs):
            for tree in trees:
                row, output = run_once(CASES[name], tree)
                runs[tree].append(row)
                outputs.add(output)
                print(json.dumps({"case": name, "tree": str(tree), **row}), flush=True)
        for tree in trees:
            cpu = [r["cpu_s"] for r in runs[tree]]
            print(json.dumps({"case": name, "tree": str(tree), "cpu_min_s": min(cpu),
                              "cpu_median_s": statistics.median(cpu)}))
        if len(trees) > 1:
            print(json.dumps({"case": name, "same_json": len(outputs) == 1}))


if __name__ == "__main__":
    main()
