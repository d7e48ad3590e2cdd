"""The verbs that model a training step: step, goodput, compare, scale, review, sweep."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import TYPE_CHECKING, Any

from topomodel.cli.options import goodput_from_args, inputs_from_args
from topomodel.cli.shared import (
    fabric_with_whatifs,
    goodput_part,
    job_from_args,
    usage,
    writable,
)
from topomodel.inputs.records import check_share
from topomodel.report.output import FILE_FORMATS, Report, Table, refuse_nonfinite

if TYPE_CHECKING:  # the step model (numpy, pandas, scipy) loads when a verb runs
    pass


def cmd_review(args: argparse.Namespace) -> Report:
    from topomodel.cli.shared import size_option
    from topomodel.files import refuse_output_folder
    from topomodel.report.review import collect_review
    from topomodel.report.review.render import write_review

    refuse_output_folder(args.output)  # before any work
    given = [size_option(text) for text in args.size]
    sizes = [size for size, _ in given]
    size_warnings = [warning for _, warning in given if warning]
    if any(size <= 0 for size in sizes):
        raise usage("--size must be greater than zero")
    job = job_from_args(args, args.design) if args.model else None
    if job is not None:
        fabric, inputs = job.fabric, job.inputs
    else:  # the fabric only: the same what-ifs as step, without the model
        inputs = inputs_from_args(args, require_model=False)
        fabric = fabric_with_whatifs(args.design, args.catalog, inputs,
                                 catalog_dirs=args.catalog_dir)
    review = collect_review(fabric, model=job.model if job else None,
                            layout=job.layout if job else None,
                            assumptions=job.assumptions if job else None,
                            time_model=inputs.assumptions.time, routing=inputs.routing,
                            seed=inputs.seed, sizes_bytes=sizes or None, failed=inputs.fail,
                            goodput_assumptions=goodput_from_args(args) if job else None,
                            workers=args.workers)
    # before anything is written: a report holding an infinity is an error, not a file
    refuse_nonfinite(Report("review", review.data, review.tables))
    try:
        files = write_review(review, args.output)
    except OSError as exc:
        raise usage(f"{args.output}: cannot write: {exc.strerror or exc}") from None
    rows = [*review.headline, {"item": "report", "value": str(files[0])}]
    data = {"directory": args.output, "files": [str(f) for f in files],
            "summary": review.data["summary"]}
    machine = review.tables if args.format in FILE_FORMATS else ()  # files: every table
    return Report("review", data, [Table(review.title, rows, [review.data["summary"]],
                                         name="summary"), *machine],
                  [*size_warnings, *review.warnings])


def cmd_step(args: argparse.Namespace) -> Report:
    from topomodel.analysis.training.studies import (
        BELOW_RANGE,
        FOUND,
        NO_EFFECT,
        NOT_REACHED,
        required_scaleout_factor,
        sensitivity,
    )
    from topomodel.report.step import step_report

    if args.target_comm_share is not None:
        check_share(args.target_comm_share, "target_comm_share", low_open=True,
                    high_open=True)
    job = job_from_args(args, args.design)
    fabric, inputs = job.fabric, job.inputs
    # the sensitivity and the scale-out search start from the routes the step keeps on
    # this process's fabric: then the step runs here first, else beside the goodput's
    # degraded steps
    alone = args.no_goodput or args.sensitivity or args.target_comm_share
    result = job.step() if alone else None
    goodput_tables: list[Any] = []
    if not args.no_goodput:
        result, goodput_tables, goodput_data = goodput_part(args, job, result)
    assert result is not None
    from topomodel.routing.policy import resolve_routing

    report = step_report(result, job.assumptions,
                         design_name=fabric.design.name or fabric.design.file,
                         routing=resolve_routing(fabric, inputs.routing))
    tables, data = list(report.tables) + goodput_tables, dict(report.data)
    if not args.no_goodput:
        data["goodput"] = goodput_data
    if args.target_comm_share:
        search = required_scaleout_factor(
            fabric, job.model, job.layout, job.assumptions,
            target_share=args.target_comm_share, routing=inputs.routing, seed=inputs.seed)
        from topomodel.fabric.structure import scaleout_injection_Bps
        from topomodel.inputs.units import format_rate

        now, factor = scaleout_injection_Bps(fabric.injection), search.factor
        text = {FOUND: f"{factor or 0:.3g}x today's: {format_rate((factor or 0) * now)}"
                       " per accelerator",
                NOT_REACHED: f"not reached even at {search.limit:g}x",
                BELOW_RANGE: f"met even at 1/{search.limit:g} of today's",
                NO_EFFECT: "no scale-out factor changes the share (the traffic stays"
                           " inside the scale-up domain)"}[search.outcome]
        data["required_scaleout"] = {"target_comm_share": args.target_comm_share,
                                     "factor": factor, "outcome": search.outcome,
                                     "injection_Bps": now,
                                     "required_Bps": None if factor is None
                                     else factor * now, "mfu": search.result.mfu}
        tables.append(Table(f"Scale-out bandwidth for a communication share of at most"
                            f" {args.target_comm_share:.0%}", [
                                {"item": "today", "value": format_rate(now)},
                                {"item": "required", "value": text},
                                {"item": "MFU there", "value": f"{search.result.mfu:.1%}"}],
                            [data["required_scaleout"]], name="required_scaleout"))
    if args.sensitivity:
        rows = sensitivity(fabric, job.model, job.layout, job.assumptions,
                           routing=inputs.routing, seed=inputs.seed, workers=args.workers)
        tables.append(Table("Sensitivity of the communication share", [
            {"assumption": r.assumption, "low": f"{r.low_value:g}", "high": f"{r.high_value:g}",
             "share at low": f"{r.low:.1%}", "base": f"{r.base:.1%}",
             "share at high": f"{r.high:.1%}"} for r in rows],
            [dataclasses.asdict(r) for r in rows], name="sensitivity"))
        data["sensitivity"] = [dataclasses.asdict(r) for r in rows]
    return Report(report.kind, data, tables, report.warnings)


def cmd_goodput(args: argparse.Namespace) -> Report:
    from topomodel.inputs.units import format_si
    from topomodel.report.step import step_record

    job = job_from_args(args, args.design)
    result, tables, data = goodput_part(args, job, None)
    lay, name = result.layout, job.fabric.design.name or job.fabric.design.file
    summary = Table("Job", [
        {"item": "design / model", "value": f"{name} / {result.model}"},
        {"item": "layout", "value": f"TP {lay.tp} x PP {lay.pp} x DP {lay.dp} x CP {lay.cp}"
         f" ({lay.world} accelerators)"},
        {"item": "step time", "value": format_si(result.step_time_s, "s")}],
        [step_record(result, name)])
    data = {"design": name, "model": result.model, "accelerators": lay.world,
            "step_time_s": result.step_time_s, **data}
    return Report("goodput", data, [summary, *tables], list(result.warnings))


def cmd_scale(args: argparse.Namespace) -> Report:
    from topomodel.analysis.training.studies import scale_curve
    from topomodel.inputs.design import load_design
    from topomodel.inputs.parts import Model, System

    if args.plot:  # refused now, not after the curve
        from topomodel.draw.io import figure_format

        figure_format(args.plot)
        writable(args.plot)
    inputs = inputs_from_args(args)
    if inputs.fail:
        raise usage("--fail: scale builds the design at several sizes, where the named"
                     " parts differ; fail parts with step or compare instead")
    design, catalog = load_design(args.design, extra_catalogs=args.catalog,
                                   catalog_dirs=args.catalog_dir)
    model = catalog.get(str(inputs.model), Model)
    total = int(design.accelerators or (design.systems or 1) * catalog.get(
        design.system, System).accelerators)
    counts = args.counts or [c for c in (128, 1024, 4096, 16384, 65536, 131072) if c < total]
    if any(c < 1 for c in counts):
        raise usage("--counts: accelerator counts are at least 1")
    counts = sorted({*counts, total})
    points = scale_curve(design, catalog, model, inputs.layout, counts, inputs.assumptions,
                         routing=inputs.routing, seed=inputs.seed,
                         scaleout_factor=inputs.scaleout_factor)
    rows = [{"accelerators": p.accelerators, "DP": p.result.layout.dp,
             "tokens/s": f"{p.result.tokens_per_s:,.0f}",
             "scaling efficiency": f"{p.efficiency:.1%}", "MFU": f"{p.result.mfu:.1%}",
             "communication share": f"{p.result.comm_share:.1%}"} for p in points]
    data: dict[str, Any] = {"points": [
        {"accelerators": p.accelerators, "tokens_per_s": p.result.tokens_per_s,
         "scaling_efficiency": p.efficiency, "mfu": p.result.mfu,
         "comm_share": p.result.comm_share} for p in points]}
    if args.plot:
        from topomodel.draw.charts import scaling_figure
        from topomodel.draw.io import save_figure

        save_figure(scaling_figure(points, title=f"{design.name or args.design}: {model.id}"),
                    args.plot)
        data["plot"] = args.plot
    return Report("scale", data, [Table("Scaling", rows, data["points"])])


SCHEDULER_VARIABLE = "TOPOMODEL_DASK_SCHEDULER"
"""The environment variable naming the Dask scheduler a sweep runs on (``--scheduler``
overrides it)."""


def cmd_sweep(args: argparse.Namespace) -> Report:

    from topomodel.report.sweep import dry_run_report, sweep_report
    from topomodel.sweep import (
        journal_path,
        load_sweep,
        pareto_objectives,
        results_format_for,
        run_sweep,
    )

    sweep = load_sweep(args.sweep, extra_catalogs=args.catalog,
                       catalog_dirs=args.catalog_dir, max_points=args.max_points)
    pareto = pareto_objectives(sweep, args.pareto)  # checked, as the file's, by a dry run
    if args.dry_run:
        return dry_run_report(sweep)
    if not args.output:
        raise usage("give the results file: -o RESULTS (.parquet or .csv)")
    results_format_for(args.output, args.results_format)  # refused before anything runs
    if args.plot and pareto is None:
        raise usage("--plot draws the Pareto front: give --pareto X Y (or pareto: in the"
                     " sweep file)")
    if args.plot:
        from topomodel.draw.io import figure_format

        figure_format(args.plot)
    if args.workers is not None and args.workers < 1:
        raise usage("--workers must be at least 1")
    for path in (args.output, args.plot):  # refused now, not after the whole sweep
        if path:
            writable(path)
    def started() -> None:
        print(f"topomodel: sweep {sweep.name}: {len(sweep.points):,} points"
              f" (limit {args.max_points:,}, --max-points)", file=sys.stderr, flush=True)

    try:
        scheduler = args.scheduler or os.environ.get(SCHEDULER_VARIABLE) or None
        outcome = run_sweep(sweep, args.output, workers=args.workers, scheduler=scheduler,
                            use_file_scheduler=args.use_file_scheduler,
                            resume=args.resume or args.retry_failed,
                            overwrite=args.overwrite, results_format=args.results_format,
                            retry_failed=args.retry_failed, started=started)
    except KeyboardInterrupt:
        print(f"topomodel: interrupted: finished points are kept in"
              f" {journal_path(args.output)}; run again with --resume to go on",
              file=sys.stderr)
        raise SystemExit(130) from None
    return sweep_report(outcome, pareto=pareto, plot=args.plot)
