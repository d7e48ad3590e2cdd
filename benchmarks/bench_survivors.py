"""Benchmark: the hot sections of the router around failures at the 4K supernodes.

Run: python benchmarks/bench_survivors.py [--design examples/100k-4k-supernodes.yaml]
     [--repeat 5] [--routing ecmp hash dmodk]

Llama 3 70B at TP 8 x PP 4 (DP fills the fabric), 70 % of peak compute. Two calls of
:mod:`topomodel.routing.survivors` are caught as the goodput and the review make them,
then timed again alone (best CPU seconds, ``time.process_time``, of ``--repeat``):

- the supernode section of the step's data-parallel all-reduce on the all-live view
  (``supernode_plane_paths``, what :func:`~topomodel.routing.sections.intact_section` routes
  once per worker), caught in the degraded step of the first scale-out part;
- the scale-out section of the review's featured All-to-All (1 GiB, ``direct``, on
  ``stride:12288`` groups) with the spine what-if's part failed (``scaleout_paths``).

Each is also timed under the other routings given. Run it with ``PYTHONPATH`` set to
another checkout to time that tree's code on the same calls.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable
from typing import Any

import topomodel.routing.clos.paths as paths
import topomodel.routing.survivors as survivors
from topomodel.analysis.reliability.goodput import (
    component_lines,
    degraded_lines,
    share_failure_views,
    with_part_failed,
)
from topomodel.analysis.reliability.single_failures import (
    CollectiveSpec,
    failed_collective,
    what_if_lines,
)
from topomodel.analysis.training.step import StepAssumptions, step_time
from topomodel.analysis.training.studies import fill_dp
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.traffic.layout import Layout
from topomodel.vocabulary import SCALE_OUT_TIERS


def _largest_call(module: Any, name: str, run: Callable[[], Any]) -> tuple[Any, ...]:
    """The arguments of the call of ``module.<name>`` with the most flows in ``run()``."""
    original = getattr(module, name)
    caught: list[tuple[Any, ...]] = []

    def catching(*args: Any) -> Any:
        caught.append(args)
        return original(*args)

    setattr(module, name, catching)
    try:
        run()
    finally:
        setattr(module, name, original)
    if not caught:
        raise SystemExit(f"no call of {name}")
    return max(caught, key=lambda args: len(args[2]))


def _best_cpu_s(call: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        call()
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--design", default="examples/100k-4k-supernodes.yaml")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--routing", nargs="+", default=["ecmp", "hash", "dmodk"])
    args = parser.parse_args()
    design, catalog = load_design(args.design)
    fabric = build_fabric(design, catalog)
    model = catalog.get("llama3-70b", Model)
    layout = fill_dp(len(fabric.accelerators), Layout(tp=8, pp=4))
    assumptions = StepAssumptions(compute_efficiency=0.7)
    lines = component_lines(fabric, layout.world)
    degraded = [ln for ln in degraded_lines(lines) if ln.tier in SCALE_OUT_TIERS]
    share_failure_views(fabric, [ln.representative for ln in degraded])
    spine = what_if_lines(fabric, layout.world, lines)["spine"].representative
    supernode = _largest_call(paths, "supernode_plane_paths", lambda: step_time(
        with_part_failed(fabric, degraded[0].representative), model, layout, assumptions))
    spec = CollectiveSpec("alltoall", 2**30, "direct", 0.019)
    scaleout = _largest_call(survivors, "scaleout_paths", lambda: failed_collective(
        with_part_failed(fabric, spine), spec, group="stride:12288",
        time_model=assumptions.time))
    print(f"{args.design}: best CPU s of {args.repeat}")
    print("| section | flows | routing | CPU s |")
    print("|---|---:|---|---:|")
    for name, caught in (("supernode_plane_paths", supernode), ("scaleout_paths", scaleout)):
        view, phase, flows, _, seed, qps = caught
        function = getattr(survivors, name)
        for routing in args.routing:
            seconds = _best_cpu_s(functools.partial(function, view, phase, flows, routing,
                                                    seed, qps), args.repeat)
            print(f"| {name} | {len(flows):,} | {routing} | {seconds:.3f} |", flush=True)


if __name__ == "__main__":
    main()
