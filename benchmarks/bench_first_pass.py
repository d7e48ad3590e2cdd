"""Benchmark: a plan's first pass (every family of every cell through
:func:`topomodel.plan.groups.group_of`, as ``search_cells`` calls it), in this process.

Run: python benchmarks/bench_first_pass.py DESIGN --model M [any other ``plan`` flag]
     [--space whole|default] [--profile N] [--digest]

It runs ``topomodel plan`` with ``search_cells`` replaced by the first pass alone: the
cells' families, each bounded by ``group_of`` (with the over-limit check the search makes
of every valid group), then stops. Prints the groups, the CPU seconds of the pass (user
+ system) and, with ``--digest``, a digest of every group's reason, bound and place (the
same digest before and after a change: the same first pass). ``--space whole`` plans
the scorecard's whole space (``PlanSpace()``) instead of the flags' limits;
``--profile N`` prints the N costliest functions (cProfile, cumulative).
"""

from __future__ import annotations

import contextlib
import cProfile
import hashlib
import pstats
import resource
import struct
import sys
from typing import Any

import topomodel.plan.search as search
import topomodel.plan.spread as spread
from topomodel.cli import main as cli_main
from topomodel.plan.space import PlanSpace, cell_families, cell_orders
from topomodel.plan.tally import over_limit


class _Done(Exception):
    """Raised once the first pass has run: the plan stops there."""


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def first_pass(fabric: Any, job: Any, indices: Any, power_W: float) -> dict[str, Any]:
    """Every family of the cells ``indices`` through ``group_of``: the groups, the CPU
    seconds and a digest of what each gave."""
    all_cells = search.plan_cells(fabric, job)
    digest = hashlib.sha256()
    groups = 0
    start = _cpu()
    for ci in indices:
        cell = groups.CellMemo(cell_orders(all_cells[ci], job.space))
        n = len(cell.orders)
        for u, family in enumerate(cell_families(job.model, all_cells[ci], job.base,
                                                 job.space)):
            reason, group = groups.group_of(fabric, job, (ci, u * n), family, power_W, cell)
            groups += 1
            if group is None:
                digest.update(reason.encode())
            else:
                over = over_limit(fabric, job.model, group.stand_in, job.routing)
                digest.update(struct.pack("<d??", group.bound, over,
                                          group.stand_in.zero == family["zero"]))
    return {"groups": groups, "cpu_s": _cpu() - start, "digest": digest.hexdigest()[:16]}


def main() -> None:
    argv = sys.argv[1:]
    profile = 0
    whole = False
    show_digest = "--digest" in argv
    argv = [a for a in argv if a != "--digest"]
    if "--profile" in argv:
        i = argv.index("--profile")
        profile = int(argv[i + 1])
        del argv[i:i + 2]
    if "--space" in argv:
        i = argv.index("--space")
        whole = argv[i + 1] == "whole"
        del argv[i:i + 2]
    found: dict[str, Any] = {}

    def only_first_pass(fabric: Any, job: Any, indices: Any, *, power_W: float = 0.0,
                        **_: Any) -> Any:
        if whole:
            job = search.replace(job, space=PlanSpace())
        if profile:
            prof = cProfile.Profile()
            prof.enable()
        found.update(first_pass(fabric, job, indices, power_W))
        if profile:
            prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(profile)
        raise _Done

    search.search_cells = only_first_pass
    spread.search_cells = only_first_pass
    with contextlib.suppress(_Done):
        cli_main(["plan", *argv, "--no-progress", "--workers", "1"])
    print(f"{found['groups']:,} groups, first pass {found['cpu_s']:.2f} CPU s"
          + (f", digest {found['digest']}" if show_digest else ""))


if __name__ == "__main__":
    main()
