"""The review's single-failure what-ifs: one spine, one leaf, one optic, one NIC failed,
the featured collective and the step routed around each (see
:mod:`topomodel.analysis.reliability.single_failures`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from topomodel.analysis.reliability.single_failures import SingleFailure, single_failure_records
from topomodel.fabric.scaleout import scaleout_kind
from topomodel.inputs.units import format_si
from topomodel.report.output import Table
from topomodel.report.review.document import Section, TableBlock, Text, size_text
from topomodel.report.review.schedule import (
    Part,
    Results,
    ReviewContext,
    ReviewSection,
    Work,
)
from topomodel.report.review.work import failed_part_work

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


def _work(c: ReviewContext) -> list[Work]:
    """Each what-if part failed (``failed PART``: the featured collective's run and,
    with a model, the step, on one copy), and the rows from them: none on a fabric
    whose scale-out kind names no part to fail (none without a scale-out network)."""
    if not scaleout_kind(c.fabric.structure).what_if_parts:
        return []
    failed = tuple(f"failed {part}" for part in c.what_if_parts)
    return [*(failed_part_work(c, part) for part in c.what_if_parts),
            Work("single failures", lambda got: _rows(c, got, failed),
                 ("collectives", *(("step",) if c.has_model else ()), *failed), here=True)]


def _rows(c: ReviewContext, got: Results, failed: Sequence[str]) -> tuple[Any, str]:
    """The what-ifs' rows (:func:`~topomodel.analysis.reliability.single_failures.single_failures`,
    from the runs with each part failed, by part) and the featured collective's label."""
    from topomodel.analysis.reliability.single_failures import CollectiveSpec, single_failures

    collectives = got["collectives"]
    ran = {part: got[name] for part, name in zip(c.what_if_parts, failed, strict=True)}
    row = collectives.featured_row
    run = None if row is None else CollectiveSpec(row["collective"], row["size_bytes"],
                                                  row["algorithm"], row["time_s"])
    rows = single_failures(
        c.fabric, collective=run, group=collectives.featured_group, time_model=c.timing,
        model=c.model, layout=c.layout, assumptions=c.assumptions, step=got.get("step"),
        routing=c.routing, seed=c.seed, workers=1, lines=c.lines,
        known_step_s={p: r.step.step_time_s for p, r in ran.items() if r.step is not None},
        known_collectives={p: r.collective for p, r in ran.items()
                           if r.collective is not None})
    label = ("collective" if run is None else
             f"{run.collective} {size_text(run.size_bytes)} on {collectives.featured_group}")
    return rows, label


def _part(c: ReviewContext, got: Results) -> Part:
    if "single failures" not in got:
        return Part(data={"single_failures": []})
    rows, label = got["single failures"]
    return Part(single_failure_section(rows, label),
                {"single_failures": single_failure_records(rows)},
                tables=(single_failure_table(rows, label),))


SINGLE_FAILURES = ReviewSection("single-failures", _work, _part)
"""The single-failure what-ifs (on a fabric with a scale-out network)."""
