"""``topomodel review DESIGN -o DIR``: the design review: every number a review of the
design needs (tiers, bisection, collectives, with a model the step and its goodput,
BOM, power, optics, assumptions, provenance) as HTML, Markdown and JSON with diagrams."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from topomodel.cli.options import goodput_from_args, inputs_from_args
from topomodel.cli.shared import Stages, fabric_with_whatifs, job_from_args, usage
from topomodel.report.output import FILE_FORMATS, Report, Table, refuse_nonfinite

if TYPE_CHECKING:
    from topomodel.analysis.serving.serve import ServingJob

REVIEW_WORKERS = 1
"""Worker processes of ``review`` without ``--workers``: one, every piece in the CLI's
process, where the pieces share the views, kept routes and freed memory the step and
the earlier pieces left (the fewest fresh pages, as ``compare``'s default)."""


def run(args: argparse.Namespace) -> Report:
    from topomodel.cli.shared import size_option
    from topomodel.files import refuse_output_folder
    from topomodel.report.review import collect_review
    from topomodel.report.review.render import write_review

    refuse_output_folder(args.output)  # before any work
    sections = _sections(args)
    given = [size_option(text) for text in args.size]
    sizes = [size for size, _ in given]
    size_warnings = [warning for _, warning in given if warning]
    if any(size <= 0 for size in sizes):
        raise usage("--size must be greater than zero")
    stages = Stages.of(args, "review")
    with stages(f"{args.design}: build"):
        job = job_from_args(args, args.design) if args.model else None
        if job is not None:
            fabric, inputs = job.fabric, job.inputs
        else:  # the fabric only: the same what-ifs as step, without the model
            inputs = inputs_from_args(args, require_model=False)
            fabric = fabric_with_whatifs(args.design, args.catalog, inputs,
                                         catalog_dirs=args.catalog_dir)
    serving = _serving(args) if args.serve else None
    work = "collectives, failure what-ifs" + (
        "" if job is None else ", step" + ("" if args.no_goodput else
                                           ", goodput (a step with each kind of part failed)"))
    # every piece here, in turn, unless --workers N asks for N processes: a pool's
    # workers, forked once the step is live, each build their own failed copies' views
    # and back their own peaks afresh; on the 98k examples with 2 cores that cost 2-3 s
    # more user time and twice the system time for the same report
    # (benchmarks/README.md, "review")
    workers = args.workers or REVIEW_WORKERS
    with stages(f"{args.design}: {work}"):
        review = collect_review(
            fabric, model=job.model if job else None, layout=job.layout if job else None,
            assumptions=job.assumptions if job else None,
            time_model=inputs.assumptions.time, routing=inputs.routing, seed=inputs.seed,
            sizes_bytes=sizes or None, failed=(*inputs.fail, *inputs.fail_domain),
            goodput_assumptions=goodput_from_args(args) if job else None,
            goodput=not args.no_goodput, cost_assumptions=inputs.cost, serving=serving,
            workers=workers, sections=sections)
    # before anything is written: a report holding an infinity is an error, not a file
    refuse_nonfinite(Report("review", review.data, review.tables))
    try:
        with stages(f"write {args.output} (HTML, Markdown, JSON, figures)"):
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


def _serving(args: argparse.Namespace) -> ServingJob:
    """The serving job of ``--serve`` (it needs ``--model``)."""
    from topomodel.analysis.options import COST_OPTIONS
    from topomodel.analysis.serving.serve import ServingJob
    from topomodel.cli.options import SERVE_JOB
    from topomodel.inputs.measured.requests import read_mooncake_trace

    if not args.model:
        raise usage("--serve needs --model")
    inputs = inputs_from_args(args, ("model", *SERVE_JOB, *COST_OPTIONS))
    trace = read_mooncake_trace(args.trace) if args.trace else None
    return ServingJob(inputs.serve, inputs.decode, trace, inputs.cost)


def _sections(args: argparse.Namespace) -> tuple[Any, ...]:
    """The review's sections: every default one, with ``--scorecard`` the scorecard
    before the assumptions."""
    from topomodel.report.review import SECTIONS
    from topomodel.report.review.scorecard_section import SCORECARD
    from topomodel.report.review.sections import ASSUMPTIONS

    if not args.scorecard:
        return SECTIONS
    if not args.model:
        raise usage("--scorecard needs a model: give --model M")
    at = SECTIONS.index(ASSUMPTIONS)
    return (*SECTIONS[:at], SCORECARD, *SECTIONS[at:])
