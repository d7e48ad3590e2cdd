"""The review's single-failure what-ifs: one spine, one leaf, one optic, one NIC failed,
the featured collective and the step routed around each (see
:mod:`topomodel.analysis.single_failures`)."""

from __future__ import annotations

from collections.abc import Sequence

from topomodel.analysis.single_failures import SingleFailure, single_failure_records
from topomodel.report.output import Table
from topomodel.report.review.document import Section, TableBlock, Text
from topomodel.units import format_si

EFFECT_TEXT = {"stops_job": "stops the job", "degrades": "degrades",
               "absorbed": "absorbed"}


def single_failure_table(rows: Sequence[SingleFailure], collective: str) -> Table:
    """One row per part failed: what, its class, the collective's and the step's time
    with it failed against healthy."""

    def time(seconds: float | None, ratio: float | None) -> str:
        if seconds is None:
            return ""
        return format_si(seconds, "s") + (f" (x{ratio:.4g})" if ratio is not None else "")

    shown = []
    for r in rows:
        if not r.part:
            shown.append({"part failed": _article(r.kind), "which": "none in this design",
                          "class": "", f"{collective}": "", "step": ""})
            continue
        cables = f", {r.cables} cables" if r.cables > 1 else ""
        lost = f"; {r.unroutable_flows:,} flows without a path" if r.unroutable_flows else ""
        algorithm = f" [{r.algorithm}]" if r.algorithm else ""
        shown.append({
            "part failed": _article(r.kind), "which": f"{r.part} ({r.model}, {r.tier}{cables})",
            "class": f"{EFFECT_TEXT.get(r.on_failure, r.on_failure)} ({r.class_entry})",
            f"{collective}": time(r.collective_s, r.collective_ratio) + algorithm + lost,
            "step": time(r.step_s, r.step_ratio)})
    return Table("Single-failure what-ifs", shown, single_failure_records(rows),
                 name="single_failures")


def single_failure_section(rows: Sequence[SingleFailure], collective: str) -> Section:
    """The review section: the table and how to read it."""
    healthy = next((r for r in rows), None)
    base = []
    if healthy is not None and healthy.healthy_collective_s is not None:
        base.append(f"{collective} {format_si(healthy.healthy_collective_s, 's')}")
    if healthy is not None and healthy.healthy_step_s is not None:
        base.append(f"step {format_si(healthy.healthy_step_s, 's')}")
    stepped = healthy is not None and healthy.healthy_step_s is not None
    return Section("single-failures", "Single-failure what-ifs", (
        Text("One part of each kind failed at a time (the first of its kind in the job's"
             " footprint; the most numerous optic), and the featured collective"
             + (" and the training step" if stepped else "") + " routed again around it"
             " by the same router as the healthy"
             " run: on a Clos the structured router with failures, exact at any size."
             " Times are against the healthy run (" + (", ".join(base) or "no run")
             + "). The class is the part's failure class in the catalog (a single point"
             " of failure stops the job whatever its class): for a part that stops the"
             " job the times say what it would run at without the part."),
        TableBlock(single_failure_table(rows, collective))))


def _article(kind: str) -> str:
    """``a spine``, ``an optic``."""
    return ("an " if kind[:1] in "aeiou" else "a ") + kind
