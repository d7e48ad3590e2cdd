"""Benchmark: ``build_fabric`` and the build report's passes on the ~100k examples.

Run: python benchmarks/bench_build_examples.py [--example supernodes] [--repeat 3]
     [--before TREE]   # also the package of another checkout, example by example

Each example runs in a fresh child process (so the first call pays what a CLI run pays:
fresh pages for every new array) and prints the CPU seconds of loading the design,
``build_fabric`` (first call, then the best of ``--repeat`` more), and each pass of
``topomodel build``'s report on the first fabric: the tier summaries, the closed-form
bisection, the bill of materials and the link budgets (in the order the report runs
them, so a view one pass leaves on the fabric is there for the next), then the child's
peak resident memory. The load average is printed first: other jobs on the cores
inflate the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = {
    "8gpu": "examples/100k-8gpu-3tier.yaml",
    "8npu": "examples/100k-8npu-servers.yaml",
    "supernodes": "examples/100k-4k-supernodes.yaml",
}

CHILD = """
import json, resource, sys, time
from topomodel.analysis.bisection import bisection
from topomodel.analysis.bom import bill_of_materials
from topomodel.analysis.linkbudget import link_budgets
from topomodel.analysis.tiers import tier_summaries
from topomodel.inputs.design import load_design
from topomodel.fabric.build import build_fabric

def cpu(make):
    start = time.process_time()
    value = make()
    return value, time.process_time() - start

(design, catalog), load_s = cpu(lambda: load_design(sys.argv[1]))
fabric, first_s = cpu(lambda: build_fabric(design, catalog))
out = {"load_s": load_s, "build_first_s": first_s}
for name, make in (("tiers_s", tier_summaries),
                   ("bisection_s", lambda f: bisection(f, max_flow_node_limit=0)),
                   ("bom_s", bill_of_materials), ("budgets_s", link_budgets)):
    out[name] = cpu(lambda: make(fabric))[1]
out["build_best_s"] = min(cpu(lambda: build_fabric(design, catalog))[1]
                          for _ in range(int(sys.argv[2])))
out["rows"] = len(fabric.links)
out["peak_MiB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def run(design: str, repeat: int, tree: str | None) -> dict[str, float]:
    """The child's figures for ``design`` with the package of ``tree`` (this one if
    ``None``)."""
    home = tree or str(ROOT)  # the child's first import path is its directory
    done = subprocess.run([sys.executable, "-c", CHILD, str(ROOT / design), str(repeat)],
                          cwd=home, env={**os.environ, "PYTHONPATH": home},
                          capture_output=True, text=True, check=True)
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--example", choices=sorted(EXAMPLES), nargs="+",
                        default=sorted(EXAMPLES))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", metavar="TREE",
                        help="also time the package under TREE (another checkout), right"
                        " before this tree's")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    print("| example | tree | link rows | load | build_fabric first / best | tiers |"
          " bisection | BOM | budgets | peak RSS MiB |")
    trees = [(args.before, "before"), (None, "this")] if args.before else [(None, "this")]
    for name in args.example:
        for tree, label in trees:
            r = run(EXAMPLES[name], args.repeat, tree)
            print(f"| {name} | {label} | {r['rows']:,} | {r['load_s']:.2f} |"
                  f" {r['build_first_s']:.2f} / {r['build_best_s']:.2f} |"
                  f" {r['tiers_s']:.2f} | {r['bisection_s']:.2f} | {r['bom_s']:.2f} |"
                  f" {r['budgets_s']:.2f} | {r['peak_MiB']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
