"""Benchmark: the blast-radius table for one failure-domain kind at 100k accelerators,
the sweep over every domain of the kind, and the goodput's domain lines.

Run: python benchmarks/bench_domains.py [--design examples/100k-8gpu-3tier.yaml]
     [--kind rack] [--repeat 3]

Prints CPU seconds (``time.process_time``) beside wall seconds for: building the
fabric; the blast radius of one domain of ``--kind`` (:func:`blast_radius` with
``kinds=(kind,)``: the table's row); the sweep over every domain of the kind (its worst
and median rows, ``every=(kind,)``); and the domain lines of the goodput for a job
that fills the fabric. The target (issue #40) is the table for one kind under 10 s.
"""

from __future__ import annotations

import argparse
import time

from topomodel.analysis.reliability.blast_radius import blast_radius
from topomodel.analysis.reliability.domain_failures import domain_lines
from topomodel.fabric.build import build_fabric
from topomodel.fabric.domains import domain_map
from topomodel.inputs.design import load_design


def _timed(label: str, work):  # type: ignore[no-untyped-def]
    cpu, wall = time.process_time(), time.perf_counter()
    out = work()
    print(f"{label}: {time.process_time() - cpu:.2f} s CPU, "
          f"{time.perf_counter() - wall:.2f} s wall")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--design", default="examples/100k-8gpu-3tier.yaml")
    parser.add_argument("--kind", default="rack")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    fabric = _timed("build", lambda: build_fabric(*load_design(args.design)))
    dmap = domain_map(fabric, args.kind)
    print(f"{fabric.accelerator_count:,} accelerators, {len(fabric.links):,} link rows,"
          f" {dmap.count:,} {args.kind} domains")
    for run in range(args.repeat):
        _timed(f"run {run + 1}: blast radius, one {args.kind}",
               lambda: blast_radius(fabric, kinds=(args.kind,)))
        _timed(f"run {run + 1}: every {args.kind} (worst and median rows)",
               lambda: blast_radius(fabric, kinds=(), every=(args.kind,)))
        _timed(f"run {run + 1}: goodput domain lines",
               lambda: domain_lines(fabric, fabric.accelerator_count))


if __name__ == "__main__":
    main()
