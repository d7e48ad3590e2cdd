"""Benchmark: the per-fabric views that failed copies share, on the ~100k examples.

Run: python benchmarks/bench_views.py [--example supernodes 8npu 8gpu]

For each example the fabric is built, then, each timed in-process (CPU s,
``time.process_time``) on that fresh fabric, in this order:

- the structured router's view of the intact fabric, which every verb builds first;
- ``share_failure_views`` for the parts goodput fails (the first part of each redundant
  tier, :func:`~topomodel.analysis.reliability.goodput.degraded_lines`), what the parent builds
  before the workers of goodput and review fork;
- every one of those parts failed on a copy and checked by the structured router, as
  each worker starts its degraded step (what is left to build there);
- the general router's wiring (``general._Wiring``), which a copy routing detours
  builds (in every worker that has not inherited it).

Each line also counts the sorts of the whole link table (``np.argsort`` calls over as
many keys as there are link rows) the step made. It runs on any checkout of the package
(``PYTHONPATH=TREE``), so a tree before a change can be measured the same way.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = {
    "8gpu": "examples/100k-8gpu-3tier.yaml",
    "8npu": "examples/100k-8npu-servers.yaml",
    "supernodes": "examples/100k-4k-supernodes.yaml",
}


class _SortCounter:
    """Counts ``np.argsort`` calls over at least ``size`` keys while installed."""

    def __init__(self, size: int) -> None:
        self.size, self.count = size, 0
        self._argsort = np.argsort

    def __call__(self, a: Any, *args: Any, **kwargs: Any) -> Any:
        if np.size(a) >= self.size:
            self.count += 1
        return self._argsort(a, *args, **kwargs)


def timed(counter: _SortCounter, work: Callable[[], object]) -> tuple[float, int]:
    """(CPU s, whole-table sorts) of ``work()``."""
    counter.count = 0
    np.argsort = counter  # type: ignore[assignment]  # looked up at each call
    try:
        start = time.process_time()
        work()
        return time.process_time() - start, counter.count
    finally:
        np.argsort = counter._argsort  # type: ignore[assignment]


def measure(name: str) -> None:
    """Print the lines of one example."""
    from topomodel.analysis.reliability.goodput import (
        component_lines,
        degraded_lines,
        share_failure_views,
        with_part_failed,
    )
    from topomodel.fabric.build import build_fabric
    from topomodel.inputs.design import load_design
    from topomodel.routing import general
    from topomodel.routing.structured import structured_supported

    design, catalog = load_design(ROOT / EXAMPLES[name])
    fabric = build_fabric(design, catalog)
    counter = _SortCounter(len(fabric.links))
    parts = [ln.representative
             for ln in degraded_lines(component_lines(fabric, fabric.accelerator_count))]

    def copies() -> None:
        for part in parts:
            structured_supported(with_part_failed(fabric, part))

    steps = [
        ("structured router's view of the intact fabric (as the verbs' first step)",
         lambda: structured_supported(fabric)),
        (f"share_failure_views ({len(parts)} parts)",
         lambda: share_failure_views(fabric, parts)),
        ("each part failed and checked, after it", copies),
        ("general router wiring, after it",
         lambda: with_part_failed(fabric, parts[0]).derived(general._Wiring)),
    ]
    for label, work in steps:
        cpu_s, sorts = timed(counter, work)
        print(f"| {name} | {len(fabric.links):,} | {label} | {cpu_s:.2f} | {sorts} |",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", nargs="+", choices=sorted(EXAMPLES),
                        default=["supernodes"])
    args = parser.parse_args()
    from topomodel.routing import general

    print(f"load average {os.getloadavg()[0]:.2f}; package {general.__file__}")
    print("| example | link rows | step | CPU s | link-table sorts |")
    print("|---|---:|---|---:|---:|")
    for name in args.example:
        measure(name)


if __name__ == "__main__":
    main()
