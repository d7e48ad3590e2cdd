"""Benchmark: one `topomodel review` run in process, its CPU split by piece of work.

Run: python benchmarks/bench_review_pieces.py DESIGN --model M [review flags ...] -o DIR

The arguments are `topomodel review`'s. Every piece of the review's work
(:func:`topomodel.report.review.schedule.run_work`: the step, each collective-table run,
each step with a part failed, the featured collective with the figures, ...) is charged
the user and system CPU seconds of this process (``os.times``) it took, and the peak RSS
when it ended; inside a single-failure what-if, the featured collective's run on the
failed copy is split from the step's. Each piece is put in a group: ``goodput``, what the
``goodput`` verb runs too (the step and its degraded steps), ``what-if steps``,
``what-if collectives``, ``collective table``, ``featured + figures`` or ``other``;
``outside pieces`` is the rest of the process (imports, the design and build, the views
built before the pieces, writing the files). Prints one JSON line per piece, then a table
of the groups. Run it with ``--workers 1`` (the default) so every piece runs here. It
imports the topomodel that ``PYTHONPATH`` names (to measure a tree before a change,
point it there); the machine's load inflates CPU seconds, so compare trees run by run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import resource
import sys
from collections import defaultdict
from typing import Any


def _cpu_s() -> float:
    times = os.times()
    return times.user + times.system


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    from topomodel.heap import keep_freed_memory

    keep_freed_memory()  # as the program does (topomodel.cli.main with argv None)
    import topomodel.analysis.reliability.single_failures as single
    import topomodel.report.review as review
    from topomodel.cli import main as cli_main

    contexts: list[Any] = []
    pieces: list[dict[str, Any]] = []
    inner = {"collective_s": 0.0}
    run_work, context_of, failed_collective = (getattr(review, "run_work"),  # noqa: B009
                                               getattr(review, "ReviewContext"),  # noqa: B009
                                               single.failed_collective)

    def recorded_context(*args: Any, **kwargs: Any) -> Any:
        contexts.append(context_of(*args, **kwargs))
        return contexts[-1]

    def timed_collective(*args: Any, **kwargs: Any) -> Any:
        start = _cpu_s()
        try:
            return failed_collective(*args, **kwargs)
        finally:
            inner["collective_s"] += _cpu_s() - start

    def timed(work: Any) -> Any:
        def run(got: Any) -> Any:
            start, inner["collective_s"] = _cpu_s(), 0.0
            out = work.run(got)
            pieces.append({"piece": work.name, "cpu_s": round(_cpu_s() - start, 3),
                           "collective_s": round(inner["collective_s"], 3),
                           "peak_MiB": round(_peak_mib())})
            return out
        return dataclasses.replace(work, run=run)

    # in the modules where collect_review and the what-ifs look them up
    setattr(review, "run_work",  # noqa: B010
            lambda works, **kw: run_work([timed(w) for w in works], **kw))
    setattr(review, "ReviewContext", recorded_context)  # noqa: B010
    setattr(single, "failed_collective", timed_collective)  # noqa: B010
    start = _cpu_s()
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
        status = cli_main(sys.argv[1:])
    whole = _cpu_s() - start
    context = contexts[0]
    goodput = {"step", *(f"failed {p}" for p in context.goodput_parts)}
    what_ifs = {f"failed {p}" for p in context.what_if_parts}
    groups: dict[str, float] = defaultdict(float)
    for piece in pieces:
        name = piece["piece"]
        if name in goodput or name in what_ifs:
            # a part of both: its step is goodput's, its collective the what-if's
            groups["what-if collectives"] += piece["collective_s"]
            groups["goodput (step, degraded steps)" if name in goodput else
                   "what-if steps"] += piece["cpu_s"] - piece["collective_s"]
        elif name.startswith("collectives"):
            groups["collective table"] += piece["cpu_s"]
        elif name == "featured":
            groups["featured + figures"] += piece["cpu_s"]
        else:
            groups["other pieces"] += piece["cpu_s"]
        print(json.dumps(piece))
    groups["outside pieces"] = whole - sum(groups.values())
    print("| group | CPU s | share |")
    print("|---|---:|---:|")
    for name, cpu_s in groups.items():
        print(f"| {name} | {cpu_s:.2f} | {cpu_s / whole:.0%} |")
    print(f"| whole (exit {status}), peak {_peak_mib():,.0f} MiB | {whole:.2f} | |")


if __name__ == "__main__":
    main()
