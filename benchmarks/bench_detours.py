"""Benchmark: the review's two pieces with a NIC failed at the 4K supernodes, whose
detours go to the general router.

Run: python benchmarks/bench_detours.py [--design examples/100k-4k-supernodes.yaml]
     [--part sys00000/nic0] [--repeat 3]

Llama 3 70B at TP 8 x PP 4 (DP fills the fabric), 70 % of peak compute. As the review
calls them, each on a fresh copy of the fabric with ``--part`` failed: the what-if of
the featured collective (a direct All-to-All of 1 GiB on ``stride:12288`` groups,
:func:`~topomodel.analysis.reliability.single_failures.failed_collective`) and the step. Printed:
CPU seconds (``time.process_time``) of each, with the general router's forward searches
(``FORWARD_SEARCHES``) and without (one search towards each destination, the router
before), the first run with the general router's wiring still to build, then
``--repeat`` runs with it built (the workers of a review build it once); the part of it
in the general router's detours and the shortest-path searches they made; and whether
the detours' loads, hops and unroutable flows are the same bit for bit both ways.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

import topomodel.routing.survivors as survivors
from topomodel.analysis.collectives.collective import run_collective
from topomodel.analysis.reliability.goodput import share_failure_views, with_part_failed
from topomodel.analysis.reliability.single_failures import CollectiveSpec, failed_collective
from topomodel.analysis.training.step import StepAssumptions, step_time
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.routing import general
from topomodel.traffic.layout import Layout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--design", default="examples/100k-4k-supernodes.yaml")
    parser.add_argument("--part", default="sys00000/nic0")
    parser.add_argument("--group", default="stride:12288")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    design, catalog = load_design(args.design)
    fabric = build_fabric(design, catalog)
    model = catalog.get("llama3-70b", Model)
    layout = Layout(tp=8, pp=4, dp=len(fabric.accelerators) // 32)
    assumptions = StepAssumptions(compute_efficiency=0.7)
    healthy = run_collective(fabric, "alltoall", 2**30, [args.group])
    spec = CollectiveSpec("alltoall", 2**30, healthy.algorithm, healthy.time_s)
    share_failure_views(fabric, [args.part])
    import scipy.sparse.csgraph  # noqa: F401  (a review's workers have it loaded)

    detours: list[Any] = []
    searches: list[int] = []
    general_s: list[float] = []
    routed = survivors.route_general
    towards, forward = general._Graph.distances_to, general._Graph.distances_from

    def caught(*a: Any, **k: Any) -> Any:
        start = time.process_time()
        detours.append(out := routed(*a, **k))
        general_s.append(time.process_time() - start)
        return out

    def counted(search: Any) -> Any:
        def run(graph: Any, nodes: np.ndarray) -> Any:
            searches.append(len(nodes))
            return search(graph, nodes)
        return run

    survivors.route_general = caught  # type: ignore[assignment]
    general._Graph.distances_to = counted(towards)  # type: ignore[method-assign]
    general._Graph.distances_from = counted(forward)  # type: ignore[method-assign]
    pieces = {
        "what-if": lambda: failed_collective(with_part_failed(fabric, args.part), spec,
                                             group=args.group),
        "step": lambda: step_time(with_part_failed(fabric, args.part), model, layout,
                                  assumptions)}
    results: dict[bool, list[Any]] = {}
    for rep in range(args.repeat + 1):
        for on in (False, True):
            general.FORWARD_SEARCHES = on
            if rep == 0:
                fabric.__dict__.get("_failure_free", {}).pop((general._Wiring, ()), None)
            for name, piece in pieces.items():
                detours.clear()
                searches.clear()
                general_s.clear()
                start = time.process_time()
                piece()
                took = time.process_time() - start
                results.setdefault(on, []).append([(d.link_bytes.tobytes(), d.hops.tobytes(),
                                                    d.unroutable.tobytes()) for d in detours])
                label = "first (wiring built)" if rep == 0 else f"run {rep}"
                print(f"{label:21} forward={on!s:5} {name:8} {took:5.2f} CPU s, of it"
                      f" {sum(general_s):4.2f} s in {len(detours)} detours,"
                      f" {sum(searches)} searches")
    print("detours bit for bit the same:", results[False] == results[True])


if __name__ == "__main__":
    main()
