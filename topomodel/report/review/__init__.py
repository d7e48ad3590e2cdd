"""The design review: :func:`collect_review` gathers every result into a
:class:`~topomodel.report.review.document.Review`; :mod:`.render` writes it as HTML,
Markdown and JSON.

The review is the sections of :data:`SECTIONS`, in order; each is a
:class:`~topomodel.report.review.schedule.ReviewSection` that names the work it needs
and builds itself from those results (see "Walk-through: a new review section" in
docs/architecture.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from topomodel.analysis.reliability.goodput import GoodputAssumptions, degradation_routed
from topomodel.errors import UsageError
from topomodel.fabric.tables import Fabric
from topomodel.report.review.collect import shared_views, timing_views
from topomodel.report.review.cost import COST
from topomodel.report.review.document import Review, ReviewFigure
from topomodel.report.review.domains import FAILURE_DOMAINS
from topomodel.report.review.failures import SINGLE_FAILURES
from topomodel.report.review.innetwork import IN_NETWORK
from topomodel.report.review.schedule import ReviewContext, ReviewSection, run_work
from topomodel.report.review.sections import (
    ASSUMPTIONS,
    BISECTION,
    COLLECTIVES,
    GOODPUT,
    MATERIALS,
    PROVENANCE,
    STEP,
    SUMMARY,
    TOPOLOGY,
    WARNINGS,
)
from topomodel.report.serving.section import SERVING

if TYPE_CHECKING:
    from topomodel.analysis.assumptions import CostAssumptions
    from topomodel.analysis.collectives.timing import TimeModel
    from topomodel.analysis.serving.serve import ServingJob
    from topomodel.analysis.training.step import StepAssumptions
    from topomodel.inputs.parts import Model
    from topomodel.traffic.layout import Layout

SECTIONS: tuple[ReviewSection, ...] = (
    SUMMARY, WARNINGS, TOPOLOGY, BISECTION, COLLECTIVES, IN_NETWORK, STEP, GOODPUT, SERVING,
    SINGLE_FAILURES, FAILURE_DOMAINS, MATERIALS, COST, ASSUMPTIONS, PROVENANCE)
"""The review's sections, in the order of the report."""

REPORT_KEYS = ("design", "summary", "build", "levels", "collectives", "step", "goodput",
               "hotspots", "assumptions", "provenance", "bibliography", "inputs",
               "figures", "notes", "single_failures")
"""The order of report.json's keys (``version: 1``, as written before the sections
were one list); a key of a section not among them follows, in the order of
:data:`SECTIONS`."""


# PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
def collect_review(fabric: Fabric, *, model: Model | None = None,  # noqa: PLR0913
                   layout: Layout | None = None, assumptions: StepAssumptions | None = None,
                   time_model: TimeModel | None = None, routing: str = "ecmp", seed: int = 0,
                   sizes_bytes: Sequence[float] | None = None,
                   failed: Sequence[str] = (),
                   goodput_assumptions: GoodputAssumptions | None = None,
                   cost_assumptions: CostAssumptions | None = None,
                   goodput: bool = True,
                   serving: ServingJob | None = None,
                   workers: int | None = None,
                   sections: Sequence[ReviewSection] = SECTIONS) -> Review:
    """Everything the review shows, for ``fabric`` (and ``model`` with ``layout``).

    ``time_model`` times the collectives (default: ``assumptions.time`` with a model,
    else :class:`~topomodel.analysis.collectives.timing.TimeModel`); ``sizes_bytes``
    replaces the default collective sizes; ``failed`` names the parts the caller
    failed (for the warnings); ``goodput_assumptions`` are those of the goodput
    section (with a model; ``goodput=False`` leaves it out, and the steps with a part
    failed that only it needs). The ``sections`` name their work; the union of it goes
    to ``workers`` processes (default every core; the same review with one), one pool
    for all of it; ``cost_assumptions`` those of the cost section (default:
    :class:`~topomodel.analysis.assumptions.CostAssumptions`); ``serving`` a serving
    job (:class:`~topomodel.analysis.serving.serve.ServingJob`) the serving section runs
    with the model
    (:func:`~topomodel.report.review.schedule.run_work`): first the step and the
    collective table's runs, then the build report, the levels and the steps with one
    part failed (each run once for the goodput section and the single-failure
    what-ifs); the featured collective with the figures, and each what-if part failed
    (the featured collective's run and the step, on one copy of the fabric), are
    planned from the table and go ahead of what has not started yet.

    Raises
    ------
    UsageError
        If the layout does not fit the fabric or the model.
    """
    from topomodel.analysis.collectives.timing import TimeModel
    from topomodel.analysis.reliability.goodput import (
        component_lines,
        degraded_lines,
        share_failure_views,
    )
    from topomodel.analysis.reliability.single_failures import what_if_lines
    from topomodel.analysis.training.step import StepAssumptions
    from topomodel.fabric.scaleout import scaleout_kind
    from topomodel.parallel import beside
    from topomodel.routing.structured import structured_supported

    if model is not None and layout is None:
        raise UsageError("a model needs a layout")
    step_assumptions = assumptions or StepAssumptions()
    timing = time_model or (step_assumptions.time if model is not None else TimeModel())
    has_model = model is not None and layout is not None
    what_ifs = bool(scaleout_kind(fabric.structure).what_if_parts)
    # the views the workers share, built before the pool forks on both cores: first in
    # a thread beside the structured router's view and the planning here, then the
    # views of a part failed (which read both) beside the timing's
    with beside(lambda: shared_views(fabric, failures=what_ifs or has_model)):
        structured_supported(fabric)
        lines = component_lines(fabric, cast("Layout", layout).world) if has_model else None
        if what_ifs and lines is None:  # the what-ifs' parts come from every accelerator
            lines = component_lines(fabric, fabric.accelerator_count)
        kinds = what_if_lines(fabric, lines=lines) if what_ifs else {}
        shown = [ln.representative for ln in kinds.values()]
        # the what-ifs in the pool longest first: a NIC's flows detour through the
        # general router, which takes longest
        nic = kinds["nic"].representative if "nic" in kinds else None
        # The steps with one part failed that the goodput section (one per redundant
        # tier) and the single-failure what-ifs (a spine, a leaf, an optic, a NIC) both
        # need, each run once: where the two fail the same part, it is the same step.
        goodput_parts: list[str] = []
        if goodput and has_model and lines is not None and layout is not None:
            goodput_parts = [ln.representative for ln in degraded_lines(lines)
                             ] if degradation_routed(fabric, layout) else []
        parts = list(dict.fromkeys([*goodput_parts, *shown])) if has_model else []
        context = ReviewContext(
            fabric, model, layout, step_assumptions, timing, routing, seed, sizes_bytes,
            failed, goodput_assumptions, workers, lines,
            what_if_parts=tuple(sorted(shown, key=lambda part: part != nic)),
            goodput_parts=tuple(goodput_parts), step_parts=tuple(parts), goodput=goodput,
            cost_assumptions=cost_assumptions, serving=serving)
        works = {section.id: list(section.work(context)) for section in sections}

    with beside(lambda: share_failure_views(fabric, parts or shown)):
        timing_views(fabric, timing)
    results = run_work([work for named in works.values() for work in named],
                       workers=workers)
    built = [section.build(context, {work.name: results[work.name]
                                     for work in works[section.id]})
             for section in sections]
    data: dict[str, Any] = {}
    figures: dict[str, ReviewFigure] = {}
    for part in built:
        data.update(part.data)
        figures.update(part.figures)
    data["figures"] = [{"name": f.name, "file": f.file, "caption": f.caption}
                       for f in figures.values()]
    data = {**{key: data[key] for key in REPORT_KEYS if key in data}, **data}
    inputs = data["inputs"]
    design = fabric.design
    subtitle = (f"{fabric.accelerator_count:,} accelerators, design file {design.file}"
                + (f"; model {model.id}" if model is not None else "")
                + f"; written {inputs['generated_utc']} by topomodel"
                f" {inputs['topomodel_version']}")
    return Review(f"Design review: {context.name}", subtitle,
                  tuple(part.section for part in built if part.section is not None),
                  figures, data, tuple(w for part in built for w in part.warnings),
                  tuple(row for part in built for row in part.headline),
                  tuple(table for part in built for table in part.tables))
