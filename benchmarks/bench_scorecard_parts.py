"""Benchmark: one `topomodel scorecard` run in process, its CPU split by part.

Run: python benchmarks/bench_scorecard_parts.py DESIGN --model M [scorecard flags ...]

The arguments are `topomodel scorecard`'s (``--format json --no-progress`` are added).
The scorecard's progress callback marks where each part starts (the planner's best at
full size, then scaling, collectives, levels, strategies, imbalance, failures); each part
is charged the user and system CPU seconds of this process (``os.times``) up to the next
mark, and the peak RSS so far when it ends. ``pgalloc`` is the machine's
``/proc/vmstat`` ``pgalloc_normal`` growth over the part (pages, 4 KiB: fresh memory the
kernel zeroed; machine-wide, so other processes' count too: note the load). Setup is the
time before the first part (imports, reading and building the design); the step is the
full-size step when a layout is given. Prints one JSON line per part and one for the
whole. It imports the topomodel that ``PYTHONPATH`` names (to measure a tree before a
change, point it there).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path


def _pgalloc() -> int:
    """Pages the kernel allocated machine-wide so far (``pgalloc_normal``), 0 if unknown."""
    try:
        for line in Path("/proc/vmstat").read_text().splitlines():
            if line.startswith("pgalloc_normal "):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class Marks:
    """The CPU, wall, peak RSS and page allocations at each part's start."""

    def __init__(self) -> None:
        self.rows: list[dict[str, object]] = []
        self.name = "setup"
        self.start = self._now()

    @staticmethod
    def _now() -> tuple[float, float, float, int]:
        t = os.times()
        return t.user, t.system, time.perf_counter(), _pgalloc()

    def mark(self, name: str) -> None:
        now = self._now()
        user, system, wall, pages = (b - a for a, b in zip(self.start, now, strict=True))
        self.rows.append({"part": self.name, "user_s": round(user, 2),
                          "sys_s": round(system, 2), "cpu_s": round(user + system, 2),
                          "wall_s": round(wall, 2),
                          "peak_rss_MiB": round(resource.getrusage(
                              resource.RUSAGE_SELF).ru_maxrss / 1024),
                          "pgalloc": pages})
        self.name, self.start = name, now


def main() -> None:
    args = sys.argv[1:]
    library_heap = "--library-heap" in args
    args = [a for a in args if a != "--library-heap"]
    marks = Marks()
    if not library_heap:
        from topomodel.heap import keep_freed_memory

        keep_freed_memory()
    from topomodel.cli import main as cli_main
    from topomodel.report.review import scorecard as module

    original = module.scorecard

    def marked(fabric, job, *, progress=None):  # type: ignore[no-untyped-def]
        marks.mark("step (full size)")
        return original(fabric, job, progress=marks.mark)

    module.scorecard = marked  # type: ignore[assignment]
    with open(os.devnull, "w") as null:
        stdout, sys.stdout = sys.stdout, null
        try:
            status = cli_main(["scorecard", *args, "--format", "json",
                               "--no-progress"])
        finally:
            sys.stdout = stdout
    marks.mark("end")
    for row in marks.rows:
        print(json.dumps(row))
    keys = ("user_s", "sys_s", "cpu_s", "wall_s", "pgalloc")
    total = {k: round(sum(r[k] for r in marks.rows), 2) for k in keys}  # type: ignore[misc]
    print(json.dumps({"part": "whole", **total, "peak_rss_MiB": marks.rows[-1]["peak_rss_MiB"],
                      "status": status}))


if __name__ == "__main__":
    main()
