"""Benchmark: the topology figure's layout, drawing and PNG on the three ~100k examples.

Run: python benchmarks/bench_layout.py [--example supernodes 8npu 8gpu] [--repeat 5]
     [--before TREE]   # also another checkout, in a process of its own, alternating
     [--cli 3]         # and `topomodel draw --route allreduce --size 1GiB`, N times

Each process builds the fabric and routes one 1 GiB AllReduce over all accelerators
(the load `draw --route` and the review colour the links by), then times, on a fresh
copy of the fabric each repeat (no view kept from the last one; `time.process_time`):
``topology_layout`` with the load, ``topology_figure`` with the load (its layout, the
drawing and the overlap check) and ``figure_bytes`` of that figure as PNG. The figures
of the two trees must be byte-identical. ``--cli`` times the whole `draw --route`
process (wall, and CPU from the children's rusage), the trees alternating.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = {
    "supernodes": "examples/100k-4k-supernodes.yaml",
    "8npu": "examples/100k-8npu-servers.yaml",
    "8gpu": "examples/100k-8gpu-3tier.yaml",
}


def measure(name: str, repeat: int) -> dict[str, object]:
    """CPU seconds of each repeat, in this process's tree."""
    from topomodel.analysis.collectives.collective import run_collective
    from topomodel.analysis.collectives.loads import link_utilization
    from topomodel.draw.io import figure_bytes
    from topomodel.draw.layout import topology_layout
    from topomodel.draw.topology import topology_figure
    from topomodel.fabric.build import build_fabric
    from topomodel.inputs.design import load_design

    fabric = build_fabric(*load_design(ROOT / EXAMPLES[name]))
    run = run_collective(fabric, "allreduce", 2**30, ["all"])
    load = link_utilization(run.timing)
    figure_bytes(topology_figure(replace(fabric), link_utilization=load))  # fonts loaded
    times: dict[str, list[float]] = {"layout": [], "figure": [], "png": []}
    digest = ""
    for _ in range(repeat):
        start = time.process_time()
        topology_layout(replace(fabric), link_utilization=load)
        laid = time.process_time()
        fig = topology_figure(replace(fabric), link_utilization=load)
        drawn = time.process_time()
        png = figure_bytes(fig, "png")
        done = time.process_time()
        times["layout"].append(laid - start)
        times["figure"].append(drawn - laid)
        times["png"].append(done - drawn)
        digest = hashlib.sha256(png).hexdigest()
    return {"rows": len(fabric.links), "times": times, "png_sha256": digest}


def cli_wall(tree: str, name: str) -> tuple[float, float]:
    """Wall and CPU seconds of one `topomodel draw --route` process on ``tree``."""
    with tempfile.TemporaryDirectory() as out:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "topomodel", "draw", EXAMPLES[name], "-o",
                        f"{out}/x.png", "--route", "allreduce", "--size", "1GiB"], cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": tree}, check=True,
                       capture_output=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _in_tree(tree: str, name: str, repeat: int) -> dict[str, object]:
    out = subprocess.run([sys.executable, __file__, "--measure", name, "--repeat",
                          str(repeat)], env={**os.environ, "PYTHONPATH": tree}, check=True,
                         capture_output=True, text=True, cwd=ROOT).stdout
    result: dict[str, object] = json.loads(out.splitlines()[-1])
    return result


def _spread(values: list[float]) -> str:
    return f"{min(values) * 1e3:.0f} / {statistics.median(values) * 1e3:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", nargs="+", choices=sorted(EXAMPLES),
                        default=list(EXAMPLES))
    parser.add_argument("--before", metavar="TREE", help="another checkout to time too")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cli", type=int, default=0, metavar="N",
                        help="also time `draw --route` N times per tree (wall)")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:  # a worker: one tree, one example
        print(json.dumps(measure(args.measure, args.repeat)))
        return
    trees = ([("before", args.before)] if args.before else []) + [("this tree", str(ROOT))]
    for name in args.example:
        results = {label: _in_tree(tree, name, args.repeat) for label, tree in trees}
        if len({r["png_sha256"] for r in results.values()}) != 1:
            raise SystemExit(f"{name}: the PNGs differ")
        rows = next(iter(results.values()))["rows"]
        print(f"{name} ({rows:,} link rows), CPU ms best / median of {args.repeat}:")
        for label, result in results.items():
            times = result["times"]
            assert isinstance(times, dict)
            print(f"  {label:9s} layout {_spread(times['layout'])}  figure (layout, drawing,"
                  f" overlaps) {_spread(times['figure'])}  png {_spread(times['png'])}")
        walls: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in trees}
        for _ in range(args.cli):
            for label, tree in trees:
                walls[label].append(cli_wall(tree, name))
        for label, values in walls.items():
            if values:
                print(f"  {label:9s} draw --route wall / CPU s: "
                      + ", ".join(f"{wall:.1f} / {cpu:.1f}" for wall, cpu in values))


if __name__ == "__main__":
    main()
