"""Benchmark: how strong a coarse floor per (cell, EP, micro-batch) could be, before it
is built into the planner (issue #43 item 5).

Run: python benchmarks/bench_coarse_floor.py DESIGN --model M [any other ``plan`` flag]
     [--sets N] [--bar-step S] [--ideal]

It runs ``topomodel plan`` with ``search_cells`` replaced by this measure over the whole
space (``PlanSpace()``, as the scorecard's ``strategies`` part plans it), then stops:
the cells' families are grouped by (cell, EP, micro-batch) (a *set*); ``--sets N``
samples N of them (seeded; 0, the default: every set, in search order). Per set:

- the *candidate* coarse score: per (sequence parallelism, schedule, interleave) among
  the set's families, its layout without recomputation at ZeRO 0 with its collectives
  at their unplaced floors (``orderbounds.unplaced_floor_calls``) but those over DP
  (``dp``, ``dp_ag``, ``edp``, ``edp_ag``, ``zero3_ag``, ``zero3_rs``: ZeRO decides
  them), its busiest stage's operations with those calls and the wait (``busy_bound``
  on ``calls_busy_figures``); the set's score is the best of them (the largest);
- with ``--ideal``, the *ideal* score: the best over the set's valid, timeable
  families of the lower of their cheap bound and timeline bound (what the planner
  knows of a family after popping it), and how many families' score is above the candidate's
  (a family the candidate would wrongly prune: it must be 0).

A set is prunable when its score is below the bar: the tokens/s of a step of
``--bar-step`` seconds (default 10.114327189037661, the 16k cut's no-EP best, gfloor).
Prints the sets and groups prunable by each, and the candidate's CPU seconds.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import random
import resource
import sys
from typing import Any

import topomodel.plan.search as search
import topomodel.plan.spread as spread
from topomodel.analysis.training.stepbound import (
    CommFreePipeline,
    busy_bound,
    calls_busy_figures,
)
from topomodel.cli import main as cli_main
from topomodel.plan import groups
from topomodel.plan.orderbounds import OrderMemo, rank_score, unplaced_floor_calls
from topomodel.plan.space import PlanSpace, cell_families, cell_orders
from topomodel.plan.tally import over_limit
from topomodel.traffic.layout import evolve

DP_CALLS = frozenset({"dp", "dp_ag", "edp", "edp_ag", "zero3_ag", "zero3_rs"})
"""The collectives over DP (and the experts' replicas): their kind and count depend on
the ZeRO stage, so the candidate leaves them out (a call left out adds no time)."""


class _Done(Exception):
    """Raised once the measure has run: the plan stops there."""


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def candidate_score(fabric: Any, job: Any, families: list[dict[str, Any]], power_W: float,
                    memo: OrderMemo) -> float:
    """The candidate coarse score of one set's ``families`` (see the module); -1 where
    none has a shape."""
    best = -1.0
    seen: set[tuple[Any, ...]] = set()
    for family in families:
        if family["recompute"] != "none":
            continue
        key = (family["sequence_parallel"], family["schedule"], family["interleave"])
        if key in seen:
            continue
        seen.add(key)
        _, shape, _ = groups.shaped_stem(fabric, job, family)
        if shape is None:
            continue
        layout = evolve(job.base, **{**family, "zero": 0})
        calls = {name: call for name, call in
                 unplaced_floor_calls(fabric, job, layout, shape, memo).items()
                 if name not in DP_CALLS}
        duration, compute = calls_busy_figures(job.model, layout, job.assumptions, shape,
                                               calls)
        busy = duration.sum(axis=1)
        bound = busy_bound(job.model, layout, job.assumptions, shape,
                           CommFreePipeline(busy, compute.sum(axis=1), busy, False))
        best = max(best, rank_score(bound, job, power_W))
    return best


def ideal_score(fabric: Any, job: Any, ci: int, families: list[dict[str, Any]],
                power_W: float, memo: OrderMemo, candidate: float) -> tuple[float, int]:
    """The ideal coarse score of one set (see the module) and how many of its families
    score above ``candidate``."""
    cell = groups.CellMemo(cell_orders(search.plan_cells(fabric, job)[ci], job.space))
    best, above = -1.0, 0
    for family in families:
        _, group = groups.group_of(fabric, job, (ci, 0), family, power_W, cell)
        if group is None or over_limit(fabric, job.model, group.stand_in, job.routing):
            continue
        score = min(group.bound, search._timeline_score(job, group, power_W))
        best = max(best, score)
        above += score > candidate * (1 + 1e-12)
    return best, above


def main() -> None:
    argv = sys.argv[1:]
    options = {"--sets": "0", "--bar-step": "10.114327189037661"}
    for name in options:
        if name in argv:
            i = argv.index(name)
            options[name] = argv[i + 1]
            del argv[i:i + 2]
    ideal = "--ideal" in argv
    argv = [a for a in argv if a != "--ideal"]
    found: dict[str, Any] = {}

    def measure(fabric: Any, job: Any, indices: Any, *, power_W: float = 0.0,
                **_: Any) -> Any:
        job = dataclasses.replace(job, space=PlanSpace())
        all_cells = search.plan_cells(fabric, job)
        sets: dict[tuple[int, int, int], list[dict[str, Any]]] = collections.defaultdict(list)
        for ci in indices:
            for family in cell_families(job.model, all_cells[ci], job.base, job.space):
                sets[(ci, family["ep"], family["micro_batch"])].append(family)
        bar = job.base.global_batch * (job.base.seq or job.model.sequence) / float(
            options["--bar-step"])
        n = int(options["--sets"])
        keys = random.Random(1).sample(sorted(sets), min(n, len(sets))) if n else sorted(sets)
        rows = []
        spent = 0.0
        memo = OrderMemo()
        for key in keys:
            start = _cpu()
            candidate = candidate_score(fabric, job, sets[key], power_W, memo)
            spent += _cpu() - start
            best, above = (ideal_score(fabric, job, key[0], sets[key], power_W, OrderMemo(),
                                       candidate) if ideal else (-1.0, 0))
            rows.append((len(sets[key]), candidate < bar, best < bar, above))
        found.update(sets=len(sets), groups=sum(map(len, sets.values())), rows=rows,
                     cpu_s=spent)
        raise _Done

    search.search_cells = measure
    setattr(spread, "search_cells", measure)  # noqa: B010 (plan's own name for it)
    with contextlib.suppress(_Done):
        cli_main(["plan", *argv, "--no-progress", "--workers", "1"])
    rows = found["rows"]
    print(f"{found['sets']:,} sets, {found['groups']:,} groups; measured {len(rows):,} sets,"
          f" {sum(r[0] for r in rows):,} groups")
    print(f"candidate: {sum(r[1] for r in rows):,} sets prunable,"
          f" {sum(r[0] for r in rows if r[1]):,} groups; {found['cpu_s']:.2f} CPU s"
          f" ({1000 * found['cpu_s'] / max(1, len(rows)):.2f} ms a set)")
    if ideal:
        print(f"ideal: {sum(r[2] for r in rows):,} sets prunable,"
              f" {sum(r[0] for r in rows if r[2]):,} groups; families above the"
              f" candidate: {sum(r[3] for r in rows)}")


if __name__ == "__main__":
    main()
