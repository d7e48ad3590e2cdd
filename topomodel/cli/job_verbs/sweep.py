"""``topomodel sweep FILE -o RESULTS``: the step model at every point of a design space
(design fields, model, layout, what-ifs), one row per point, with the best points and
the Pareto front."""

from __future__ import annotations

import argparse
import os
import sys

from topomodel.cli.shared import usage, writable
from topomodel.report.output import Report

SCHEDULER_VARIABLE = "TOPOMODEL_DASK_SCHEDULER"
"""The environment variable naming the Dask scheduler a sweep runs on (``--scheduler``
overrides it)."""


def run(args: argparse.Namespace) -> Report:

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
