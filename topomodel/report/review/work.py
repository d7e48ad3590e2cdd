"""The work that more than one section of the review names, each piece by its name (it
runs once, however many sections name it: :func:`~topomodel.report.review.schedule.run_work`):
the build report, the step, the collective table and its featured collective with the
figures, a part failed, the warnings and the goodput."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from topomodel.fabric.tables import Fabric
from topomodel.report.review.collect import (
    HOTSPOT_COUNT,
    CollectiveTable,
    collect_rows,
    featured_run,
    held_featured,
    may_feature,
    measured_runs,
    plan_collectives,
    review_figures,
    review_warnings,
    run_pieces,
)
from topomodel.report.review.document import ReviewFigure
from topomodel.report.review.schedule import Results, ReviewContext, Work

if TYPE_CHECKING:
    from topomodel.analysis.collectives.timing import TimeModel
    from topomodel.analysis.reliability.single_failures import FailedCollective
    from topomodel.analysis.training.step import StepResult
    from topomodel.inputs.parts import Model
    from topomodel.traffic.layout import Layout

# The work that more than one section names (each runs once, by its name:
# :func:`~topomodel.report.review.schedule.run_work`).


def build_work(context: ReviewContext) -> Work:
    """``build``: the ``topomodel build`` report with its bisection."""
    from topomodel.analysis.bisection import bisection
    from topomodel.report.build import build_report

    fabric = context.fabric
    return Work("build", lambda _: build_report(fabric, bisection_result=bisection(fabric)))


def step_work(context: ReviewContext) -> list[Work]:
    """``step``: the training step, with a model (else no work)."""
    from topomodel.analysis.training.step import step_time

    if not context.has_model:
        return []
    c = context
    model, layout = cast("Model", c.model), cast("Layout", c.layout)
    return [Work("step", lambda _: step_time(c.fabric, model, layout, c.assumptions,
                                             routing=c.routing, seed=c.seed))]


def collectives_work(context: ReviewContext) -> list[Work]:
    """``collectives``: the collective table (:class:`CollectiveTable`), from its runs
    (``collectives run K``, one piece per :func:`run_pieces` piece)."""
    c = context
    plan = plan_collectives(c.fabric, c.sizes_bytes)
    pieces = run_pieces(plan.runs)
    names = tuple(f"collectives run {piece[0]}" for piece in pieces)

    def measured(piece: tuple[int, ...]) -> Work:
        items = [plan.runs[k] for k in piece]
        return Work(f"collectives run {piece[0]}", lambda _: measured_runs(
            c.fabric, c.timing, c.routing, c.seed, items,
            may_feature=lambda item: may_feature(plan, item)))

    def table(ran: Results) -> CollectiveTable:
        rows: list[Any] = [None] * len(plan.runs)
        for piece, name in zip(pieces, names, strict=True):
            for k, row in zip(piece, ran[name], strict=True):
                rows[k] = row
        return collect_rows(plan, rows)

    return [*(measured(piece) for piece in pieces),
            Work("collectives", table, names, here=True)]


def featured_work(context: ReviewContext) -> Work:
    """``featured``: the featured collective's ``route`` report (None without one) and
    every figure, the step's among them (one piece draws them all: matplotlib loads
    once); planned from the table, first of the planned work (every figure waits for it)."""
    c = context
    # the step first: the longest piece the plan waits for
    needs = ("step", "collectives") if c.has_model else ("collectives",)
    return Work("featured", lambda got: _featured_part(
        c.fabric, got["collectives"], got.get("step"), c.timing, c.routing, c.seed),
        needs, rank=len(c.what_if_parts) + 1)


def _featured_part(fabric: Fabric, collectives: CollectiveTable, step: StepResult | None,
                   timing: TimeModel, routing: str, seed: int
                   ) -> tuple[Any, dict[str, ReviewFigure]]:
    """The featured collective routed again (its link loads stay on the worker: sending
    every candidate's back would cost more than this run), its report and the figures,
    the step's among them (one piece draws them all: matplotlib loads once)."""
    from topomodel.report.route import route_report

    item = collectives.featured_item
    if item is None:
        return None, review_figures(fabric, collectives, None, step)
    # held where this process ran it among the table's runs, else routed again
    run = held_featured(fabric, timing, routing, seed, item) or featured_run(
        fabric, timing, routing, seed, item)
    report = route_report(fabric, run, routing=routing, top=HOTSPOT_COUNT, time_model=timing)
    return report, review_figures(fabric, dataclasses.replace(collectives, featured=run), report,
                            step)


@dataclass(frozen=True)
class FailedPart:
    """One part failed, on one copy of the fabric: the featured collective run again
    (for a what-if part, where there is a featured collective) and the step (for a part
    of ``step_parts``); None where not run."""

    collective: FailedCollective | None
    step: StepResult | None


def failed_part_work(context: ReviewContext, part: str) -> Work:
    """``failed PART``: :class:`FailedPart`. A what-if part's runs on one copy (the
    copy's views, a NIC's detours among them, made once), planned from the table (the
    NIC's first, the longest, in the order of ``what_if_parts``); any other part's step on
    its own, first."""
    from topomodel.analysis.reliability.goodput import with_part_failed
    from topomodel.analysis.reliability.single_failures import CollectiveSpec, failed_collective
    from topomodel.analysis.training.step import step_time

    c = context
    stepped = part in c.step_parts

    def step_on(copy: Fabric) -> StepResult | None:
        return step_time(copy, cast("Model", c.model), cast("Layout", c.layout),
                         c.assumptions, routing=c.routing, seed=c.seed) if stepped else None

    if part not in c.what_if_parts:  # the first such step warms the pool (the router's
        # intact sections, which the step on the intact fabric reads too)
        first = next((p for p in c.goodput_parts if p not in c.what_if_parts), None)
        return Work(f"failed {part}", lambda _: FailedPart(
            None, step_on(with_part_failed(c.fabric, part))), warm=stepped and part == first)

    def what_if(got: Results) -> FailedPart:
        collectives: CollectiveTable = got["collectives"]
        row = collectives.featured_row
        copy = with_part_failed(c.fabric, part)
        run = None if row is None else failed_collective(
            copy, CollectiveSpec(row["collective"], row["size_bytes"], row["algorithm"],
                                 row["time_s"]),
            group=collectives.featured_group, time_model=c.timing, routing=c.routing,
            seed=c.seed)
        return FailedPart(run, step_on(copy))

    # in the context's order, the NIC's first (the longest), after the featured collective
    return Work(f"failed {part}", what_if, ("collectives",),
                rank=len(c.what_if_parts) - c.what_if_parts.index(part))


def warnings_work(context: ReviewContext) -> Work:
    """``warnings``: every part's warnings, each once (:func:`review_warnings`)."""
    c = context
    needs = ("build", "featured", "collectives") + (("step",) if c.has_model else ())
    return Work("warnings", lambda got: review_warnings(
        c.fabric, got["build"].warnings, got.get("step"), c.layout, got["featured"][0],
        c.failed, got["collectives"]), needs, here=True)


def goodput_work(context: ReviewContext) -> list[Work]:
    """``goodput``: the goodput section's tables and data (its degraded steps are
    ``failed PART`` work: one run each, shared with the what-ifs), with a model (else
    no work)."""
    from topomodel.analysis.reliability.goodput import GoodputAssumptions
    from topomodel.report.goodput import goodput_section

    c = context
    if not c.has_model or not c.goodput:
        return []
    failed = [f"failed {part}" for part in c.goodput_parts]

    def goodput(got: Results) -> tuple[list[Any], dict[str, Any]]:
        known = {part: got[name].step.tokens_per_s
                 for part, name in zip(c.goodput_parts, failed, strict=True)}
        tables, data = goodput_section(
            c.fabric, c.model, c.layout, c.assumptions, got["step"],
            c.goodput_assumptions or GoodputAssumptions(), routing=c.routing, seed=c.seed,
            workers=c.workers, lines=c.lines, known_tokens_per_s=known)[1:]
        return tables, data

    return [*step_work(c), *(failed_part_work(c, part) for part in c.goodput_parts),
            Work("goodput", goodput, ("step", *failed), here=True)]


def failure_domains_work(context: ReviewContext) -> list[Work]:
    """``failure domains``: the blast-radius rows, one per domain kind
    (:func:`~topomodel.analysis.reliability.blast_radius.blast_radius`), then the worst
    and median of every domain of each kind of ``REVIEW_SWEPT_KINDS``; with a model
    the step re-routed around each domain the job survives, against the healthy step
    (so it needs ``step``), and the steps with a part failed that the what-ifs do not
    plan (a goodput's degraded step with a plane failed is the plane row's step: taken,
    not run again). Read by the failure-domains section and the summary."""
    from topomodel.analysis.reliability.blast_radius import REVIEW_SWEPT_KINDS, blast_radius
    from topomodel.analysis.reliability.goodput import with_part_failed

    c = context
    # planned work needs only work with no needs: the parts failed on their own
    parts = [p for p in c.step_parts if p not in c.what_if_parts] if c.has_model else []

    def rows(got: Results) -> list[Any]:
        step = got.get("step")
        known = [(with_part_failed(c.fabric, p).link_arrays["failed"],
                  got[f"failed {p}"].step.step_time_s) for p in parts]
        return blast_radius(c.fabric, model=c.model, layout=c.layout,
                            assumptions=c.assumptions,
                            healthy_step_s=None if step is None else step.step_time_s,
                            routing=c.routing, seed=c.seed, every=REVIEW_SWEPT_KINDS,
                            known_steps=known)

    return [*(failed_part_work(c, p) for p in parts),
            Work("failure domains", rows, ("step", *(f"failed {p}" for p in parts))
                 if c.has_model else ())]
