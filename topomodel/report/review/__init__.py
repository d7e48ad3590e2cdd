"""The design review: :func:`collect_review` gathers every result into a
:class:`~topomodel.report.review.document.Review`; :mod:`.render` writes it as HTML,
Markdown and JSON."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from topomodel.analysis.goodput import GoodputAssumptions, degradation_routed
from topomodel.errors import UsageError
from topomodel.fabric.tables import Fabric
from topomodel.report.goodput import goodput_section
from topomodel.report.output import Table

if TYPE_CHECKING:
    from topomodel.analysis.step import StepAssumptions, StepResult
    from topomodel.analysis.timing import TimeModel
    from topomodel.catalog import Model
    from topomodel.traffic.layout import Layout
from topomodel.report.review.assumptions import review_assumptions
from topomodel.report.review.collect import (
    HOTSPOT_COUNT,
    _collect_rows,
    _featured_run,
    _figures,
    _levels,
    _measured_run,
    _plan_collectives,
    _step_figure,
    _warnings,
)
from topomodel.report.review.document import (
    Review,
    ReviewFigure,
    Section,
    TableBlock,
)
from topomodel.report.review.provenance import (
    review_bibliography,
    review_inputs,
    review_provenance,
)
from topomodel.report.review.sections import _headline, _sections


def collect_review(fabric: Fabric, *, model: Model | None = None,
                   layout: Layout | None = None, assumptions: StepAssumptions | None = None,
                   time_model: TimeModel | None = None, routing: str = "ecmp", seed: int = 0,
                   sizes_bytes: Sequence[float] | None = None,
                   failed: Sequence[str] = (),
                   goodput_assumptions: GoodputAssumptions | None = None,
                   workers: int | None = None) -> Review:
    """Everything the review shows, for ``fabric`` (and ``model`` with ``layout``).

    ``time_model`` times the collectives (default: ``assumptions.time`` with a model,
    else :class:`~topomodel.analysis.timing.TimeModel`); ``sizes_bytes`` replaces the default
    collective sizes; ``failed`` names the parts the caller failed (for the warnings);
    ``goodput_assumptions`` are those of the goodput section (with a model). The
    independent work goes to ``workers`` processes (default every core; the same review
    with one): first the build report, the steps with one part failed (each run once
    for the goodput section and the single-failure what-ifs), the collective table's
    runs, the levels and the step's figure; then the featured collective with its
    figures beside the what-ifs' collective runs.

    Raises
    ------
    UsageError
        If the layout does not fit the fabric or the model.
    """
    from topomodel.analysis.bisection import bisection
    from topomodel.analysis.goodput import (
        component_lines,
        degraded_lines,
        share_failure_views,
        with_part_failed,
    )
    from topomodel.analysis.single_failures import what_if_lines
    from topomodel.analysis.step import StepAssumptions, step_time
    from topomodel.analysis.timing import TimeModel
    from topomodel.parallel import parallel_map
    from topomodel.report.build import build_report
    from topomodel.report.step import step_report

    if model is not None and layout is None:
        raise UsageError("a model needs a layout")
    step_assumptions = assumptions or StepAssumptions()
    timing = time_model or (step_assumptions.time if model is not None else TimeModel())
    design = fabric.design
    name = design.name or design.file
    step: StepResult | None = None
    step_rep = None
    lines = None
    if model is not None and layout is not None:
        step = step_time(fabric, model, layout, step_assumptions, routing=routing, seed=seed)
        step_rep = step_report(step, step_assumptions, design_name=name)
        lines = component_lines(fabric, layout.world)
    what_ifs = fabric.structure.scaleout.kind != "none"
    # The steps with one part failed that the goodput section (one per redundant tier)
    # and the single-failure what-ifs (a spine, a leaf, an optic, a NIC) both need, each
    # run once: where the two fail the same part, it is the same step.
    parts: list[str] = []
    if step is not None and lines is not None:
        goodput_lines = degraded_lines(lines) if degradation_routed(fabric, layout) else []
        shown = what_if_lines(fabric, lines=lines).values() if what_ifs else ()
        parts = list(dict.fromkeys(ln.representative for ln in [*goodput_lines, *shown]))
    plan = _plan_collectives(fabric, sizes_bytes)

    def failed_step(part: str) -> StepResult:  # parts are listed only with a model
        return step_time(with_part_failed(fabric, part), cast("Model", model),
                         cast("Layout", layout), step_assumptions, routing=routing,
                         seed=seed)

    # Every independent piece on the workers at once, the longest first (the build
    # report with its bisection, the failed steps, the collective table's runs, the
    # levels): with one worker they run here in turn.
    pieces: list[Callable[[], Any]] = [
        lambda: build_report(fabric, bisection_result=bisection(fabric)),
        *(functools.partial(failed_step, part) for part in parts),
        *(functools.partial(_measured_run, fabric, timing, routing, seed, item)
          for item in plan.runs),
        lambda: _levels(fabric, timing),
        lambda: None if step is None else _step_figure(step)]
    share_failure_views(fabric, parts)
    done = parallel_map(_call, pieces, workers=workers)
    build, failed_steps, levels, step_figure = (done[0], done[1:1 + len(parts)], done[-2],
                                                done[-1])
    collectives = _collect_rows(plan, done[1 + len(parts):-2])
    stepped = dict(zip(parts, failed_steps, strict=True))
    goodput = None
    if step is not None and model is not None and layout is not None:
        goodput = goodput_section(fabric, model, layout, step_assumptions, step,
                                  goodput_assumptions or GoodputAssumptions(),
                                  routing=routing, seed=seed, workers=workers, lines=lines,
                                  known_tokens_per_s={p: r.tokens_per_s
                                                      for p, r in stepped.items()})

    def featured_part() -> tuple[Any, dict[str, ReviewFigure]]:
        """The featured collective routed again (its link loads stay on the worker),
        its report and the figures."""
        from topomodel.report.route import route_report

        item = collectives.featured_item
        if item is None:
            return None, _figures(fabric, collectives, None, step_figure)
        run = _featured_run(fabric, timing, routing, seed, item)
        report = route_report(fabric, run, routing=routing, top=HOTSPOT_COUNT, model=timing)
        return report, _figures(fabric, dataclasses.replace(collectives, featured=run),
                                report, step_figure)

    def failures_part() -> tuple[list[dict[str, Any]], Section | None]:
        return _single_failures(fabric, collectives, timing, model, layout,
                                step_assumptions, step, routing, seed, workers, lines,
                                {p: r.step_time_s for p, r in stepped.items()})

    # the what-ifs' collective re-runs beside the featured run and the figures
    ended = parallel_map(_call, [featured_part, failures_part] if what_ifs
                         else [featured_part], workers=workers)
    featured_rep, figures = ended[0]
    failures, failure_table = ended[1] if what_ifs else ([], None)
    warnings = _warnings(fabric, build.warnings, step, layout, featured_rep, failed,
                         collectives)
    assumptions_rows = review_assumptions(
        fabric, timing, step_assumptions if step else None, routing=routing,
        goodput=(goodput_assumptions or GoodputAssumptions()) if goodput else None)
    provenance = review_provenance(fabric, model, [] if goodput is None else [
        str(line[key]) for line in goodput[1]["components"]
        for key in ("rate_entry", "class_entry") if line[key] in fabric.catalog])
    bibliography = review_bibliography(provenance)
    inputs = review_inputs(fabric)
    good = None if goodput is None else goodput[1]
    headline, summary = _headline(fabric, build.data, step, good)
    data: dict[str, Any] = {
        "design": {"name": design.name, "file": design.file, "system": design.system},
        "summary": summary,
        "build": build.data,
        "levels": levels,
        "collectives": {
            "sizes_bytes": list(collectives.sizes),
            "groups": collectives.groups,
            "rows": collectives.rows,
            "skipped": collectives.skipped,
            "featured": None if featured_rep is None else featured_rep.data,
        },
        "step": None if step_rep is None else step_rep.data,
        "goodput": None if goodput is None else goodput[1],
        "hotspots": [] if featured_rep is None else featured_rep.data["hotspots"],
        "assumptions": assumptions_rows,
        "provenance": provenance,
        "bibliography": bibliography,
        "inputs": inputs,
        "figures": [{"name": f.name, "file": f.file, "caption": f.caption}
                    for f in figures.values()],
        "notes": collectives.notes,
    }
    sections = _sections(fabric, build, collectives, featured_rep, step, step_rep,
                         levels, assumptions_rows, provenance, warnings, goodput,
                         bibliography, inputs)
    data["single_failures"] = failures
    if failure_table is not None:
        after = max(k for k, sec in enumerate(sections) if sec.id in ("step", "goodput"))
        sections.insert(after + 1, failure_table)
    subtitle = (f"{fabric.accelerator_count:,} accelerators, design file {design.file}"
                + (f"; model {model.id}" if model is not None else "")
                + f"; written {inputs['generated_utc']} by topomodel"
                f" {inputs['topomodel_version']}")
    tables = _machine_tables(build, featured_rep, step_rep, goodput, collectives.rows,
                             assumptions_rows, provenance, bibliography, inputs)
    if failure_table is not None:
        tables += tuple(block.table for block in failure_table.blocks
                        if isinstance(block, TableBlock))
    return Review(f"Design review: {name}", subtitle, tuple(sections), figures, data,
                  tuple(warnings), tuple(headline), tables)


def _single_failures(fabric: Fabric, collectives: Any, timing: TimeModel,
                     model: Model | None, layout: Layout | None,
                     assumptions: StepAssumptions, step: StepResult | None, routing: str,
                     seed: int, workers: int | None, lines: Any = None,
                     known_step_s: dict[str, float] | None = None
                     ) -> tuple[list[dict[str, Any]], Section | None]:
    """The single-failure what-ifs (a spine, a leaf, an optic, a NIC failed) of the
    featured collective and the step: their records and section; none on a fabric
    without a scale-out network (nothing of those kinds to fail). ``known_step_s``:
    the steps already run with a part failed, by part."""
    from topomodel.analysis.single_failures import (
        CollectiveSpec,
        single_failure_records,
        single_failures,
    )
    from topomodel.report.review.document import size_text
    from topomodel.report.review.failures import single_failure_section

    if fabric.structure.scaleout.kind == "none":
        return [], None
    row = collectives.featured_row
    run = None if row is None else CollectiveSpec(row["collective"], row["size_bytes"],
                                                  row["algorithm"], row["time_s"])
    rows = single_failures(fabric, collective=run, group=collectives.featured_group,
                           time_model=timing, model=model, layout=layout,
                           assumptions=assumptions, step=step, routing=routing, seed=seed,
                           workers=workers, lines=lines, known_step_s=known_step_s)
    label = ("collective" if run is None else
             f"{run.collective} {size_text(run.size_bytes)} on {collectives.featured_group}")
    return single_failure_records(rows), single_failure_section(rows, label)


def _call(part: Callable[[], Any]) -> Any:
    return part()


def _machine_tables(build: Any, featured: Any, step: Any,
                    goodput: tuple[list[Table], dict[str, Any]] | None,
                    collectives: list[dict[str, Any]], assumptions: list[dict[str, Any]],
                    provenance: list[dict[str, Any]], bibliography: list[dict[str, Any]],
                    inputs: dict[str, Any]) -> tuple[Table, ...]:
    """Every table of the review with plain records, each named once (the build's,
    featured collective's, step's and goodput's tables prefixed), for --format csv and
    parquet."""
    out: list[Table] = []
    for prefix, tables in (("build_", build.tables),
                           ("featured_", featured.tables if featured else ()),
                           ("step_", step.tables if step else ()),
                           ("", goodput[0] if goodput else ())):
        out += [dataclasses.replace(t, name=prefix + t.key) for t in tables]
    figures = [{"entry": e["id"], **f} for e in provenance for f in e["figures"]]
    out += [Table("Collectives", collectives, collectives),
            Table("Assumptions", assumptions, assumptions),
            Table("Figures", figures, figures, name="provenance"),
            Table("Bibliography", bibliography, bibliography),
            Table("Inputs", inputs["files"], [{**f, "generated_utc": inputs["generated_utc"],
                                               "topomodel_version": inputs["topomodel_version"]}
                                              for f in inputs["files"]])]
    return tuple(out)
