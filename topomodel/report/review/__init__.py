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
    from topomodel.analysis.single_failures import FailedCollective
    from topomodel.analysis.step import StepAssumptions, StepResult
    from topomodel.analysis.timing import TimeModel
    from topomodel.catalog import Model
    from topomodel.traffic.layout import Layout
from topomodel.report.review.assumptions import review_assumptions
from topomodel.report.review.collect import (
    HOTSPOT_COUNT,
    _collect_rows,
    _Collectives,
    _featured_run,
    _figures,
    _levels,
    _measured_runs,
    _plan_collectives,
    _run_pieces,
    _shared_views,
    _timing_views,
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
    with one), one pool for all of it: the collective table's runs, then the build
    report, the steps with one part failed (each run once for the goodput section and
    the single-failure what-ifs) and the levels; the featured collective with the
    figures, and each what-if part failed (the featured collective's run and the step,
    on one copy of the fabric), are planned from the table and go ahead of what has not
    started yet.

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
    from topomodel.analysis.single_failures import (
        CollectiveSpec,
        failed_collective,
        what_if_lines,
    )
    from topomodel.analysis.step import StepAssumptions, step_time
    from topomodel.analysis.timing import TimeModel
    from topomodel.parallel import beside, parallel_map_then
    from topomodel.report.build import build_report
    from topomodel.report.step import step_report
    from topomodel.routing.structured import structured_supported

    if model is not None and layout is None:
        raise UsageError("a model needs a layout")
    step_assumptions = assumptions or StepAssumptions()
    timing = time_model or (step_assumptions.time if model is not None else TimeModel())
    design = fabric.design
    name = design.name or design.file
    has_model = model is not None and layout is not None
    what_ifs = fabric.structure.scaleout.kind != "none"
    # the views the workers share, built before the pool forks on both cores: first in
    # a thread beside the structured router's view and the planning here, then the
    # views of a part failed (which read both) beside the timing's
    with beside(lambda: _shared_views(fabric, failures=what_ifs or has_model)):
        structured_supported(fabric)
        lines = component_lines(fabric, cast("Layout", layout).world) if has_model else None
        if what_ifs and lines is None:  # the what-ifs' parts come from every accelerator
            lines = component_lines(fabric, fabric.accelerator_count)
        kinds = what_if_lines(fabric, lines=lines) if what_ifs else {}
        shown = [ln.representative for ln in kinds.values()]
        # the what-ifs in the pool longest first: a NIC's flows detour through the
        # general router, which takes longest
        nic = kinds["nic"].representative if "nic" in kinds else None
        planned_parts = sorted(shown, key=lambda part: part != nic)
        # The steps with one part failed that the goodput section (one per redundant
        # tier) and the single-failure what-ifs (a spine, a leaf, an optic, a NIC) both
        # need, each run once: where the two fail the same part, it is the same step.
        parts: list[str] = []
        if has_model and lines is not None and layout is not None:
            goodput_lines = degraded_lines(lines) if degradation_routed(fabric, layout) else []
            parts = list(dict.fromkeys([*(ln.representative for ln in goodput_lines), *shown]))
        # a what-if part's step runs with its collective, on one copy (the copy's views,
        # a NIC's detours among them, made once): the other parts' steps run on their own
        alone = [part for part in parts if part not in shown]
        plan = _plan_collectives(fabric, sizes_bytes)

    def step_on(failed_copy: Fabric) -> StepResult:
        return step_time(failed_copy, cast("Model", model), cast("Layout", layout),
                         step_assumptions, routing=routing, seed=seed)

    def step_failing(part: str) -> StepResult:  # "": the step itself; only with a model
        return step_on(with_part_failed(fabric, part))

    # One pool for everything (with one worker, all of it here in turn): first the step
    # and the collective table's runs, then the build report with its bisection, the
    # steps with a part failed (but the what-ifs') and the levels. Once the step and the
    # table are in, the featured collective (its figures and the step's beside it) and
    # each what-if part failed (the featured collective's run and the step) go ahead of
    # what has not started, in the workers they warmed.
    pieces = _run_pieces(plan.runs)
    ready = int(has_model) + len(pieces)
    first: list[Callable[[], Any]] = [
        *([functools.partial(step_failing, "")] if has_model else []),
        *(functools.partial(_measured_runs, fabric, timing, routing, seed,
                            [plan.runs[k] for k in piece]) for piece in pieces),
        lambda: build_report(fabric, bisection_result=bisection(fabric)),
        *(functools.partial(step_failing, part) for part in alone),
        lambda: _levels(fabric, timing)]

    tabled: list[_Collectives] = []  # the table, once its runs are in

    def planned(ran: list[Any]) -> list[tuple[str, Any]]:
        rows: list[Any] = [None] * len(plan.runs)
        for piece, got in zip(pieces, ran[int(has_model):], strict=True):
            for k, row in zip(piece, got, strict=True):
                rows[k] = row
        tabled.append(collectives := _collect_rows(plan, rows))
        row = collectives.featured_row
        spec = None if row is None else CollectiveSpec(
            row["collective"], row["size_bytes"], row["algorithm"], row["time_s"])
        return [("featured", (collectives, ran[0] if has_model else None)),
                *(("what-if", (part, spec, collectives.featured_group))
                  for part in planned_parts)]

    def then(piece: tuple[str, Any]) -> Any:
        kind, what = piece
        if kind == "featured":
            table, step = what
            return _featured_part(fabric, table, step, timing, routing, seed)
        part, spec, group = what
        copy = with_part_failed(fabric, part)
        run = None if spec is None else failed_collective(
            copy, spec, group=group, time_model=timing, routing=routing, seed=seed)
        return run, (step_on(copy) if part in parts else None)

    with beside(lambda: share_failure_views(fabric, parts or shown)):
        _timing_views(fabric, timing)
    done, ended = parallel_map_then(_call, first, then, planned, ready=ready,
                                    workers=workers)
    step: StepResult | None = done[0] if has_model else None
    build, failed_steps, levels = done[ready], done[ready + 1:-1], done[-1]
    step_rep = None if step is None else step_report(step, step_assumptions,
                                                     design_name=name)
    collectives = tabled[0]
    featured_rep, figures = ended[0]
    what_ifs_run = dict(zip(planned_parts, ended[1:], strict=True))
    stepped = {**dict(zip(alone, failed_steps, strict=True)),
               **{part: ran[1] for part, ran in what_ifs_run.items() if ran[1] is not None}}
    goodput = None
    if step is not None and model is not None and layout is not None:
        goodput = goodput_section(fabric, model, layout, step_assumptions, step,
                                  goodput_assumptions or GoodputAssumptions(),
                                  routing=routing, seed=seed, workers=workers, lines=lines,
                                  known_tokens_per_s={p: r.tokens_per_s
                                                      for p, r in stepped.items()})[1:]
    failures, failure_table = ([], None) if not what_ifs else _single_failures(
        fabric, collectives, timing, model, layout, step_assumptions, step, routing, seed,
        lines, {p: r.step_time_s for p, r in stepped.items()},
        {part: ran[0] for part, ran in what_ifs_run.items() if ran[0] is not None})
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


def _featured_part(fabric: Fabric, collectives: _Collectives, step: StepResult | None,
                   timing: TimeModel, routing: str, seed: int
                   ) -> tuple[Any, dict[str, ReviewFigure]]:
    """The featured collective routed again (its link loads stay on the worker: sending
    every candidate's back would cost more than this run), its report and the figures,
    the step's among them (one piece draws them all: matplotlib loads once)."""
    from topomodel.report.route import route_report

    item = collectives.featured_item
    if item is None:
        return None, _figures(fabric, collectives, None, step)
    run = _featured_run(fabric, timing, routing, seed, item)
    report = route_report(fabric, run, routing=routing, top=HOTSPOT_COUNT, time_model=timing)
    return report, _figures(fabric, dataclasses.replace(collectives, featured=run), report,
                            step)


def _single_failures(fabric: Fabric, collectives: Any, timing: TimeModel,
                     model: Model | None, layout: Layout | None,
                     assumptions: StepAssumptions, step: StepResult | None, routing: str,
                     seed: int, lines: Any, known_step_s: dict[str, float],
                     known_collectives: dict[str, FailedCollective]
                     ) -> tuple[list[dict[str, Any]], Section | None]:
    """The single-failure what-ifs (a spine, a leaf, an optic, a NIC failed) of the
    featured collective and the step: their records and section, from the steps
    (``known_step_s``) and collective runs (``known_collectives``) already run with
    each part failed, by part; none on a fabric without a scale-out network (nothing of
    those kinds to fail)."""
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
                           workers=1, lines=lines, known_step_s=known_step_s,
                           known_collectives=known_collectives)
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
