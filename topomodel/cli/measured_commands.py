"""Verbs that hold the model against the world: ``check-nccl`` (a measured nccl-tests
log beside the model) and ``advise`` (is communication the bottleneck, and what
scale-out bandwidth would fix it)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from topomodel.cli.shared import writable
from topomodel.inputs.records import check_share
from topomodel.report.output import Report

ParserHook = Callable[..., None]  # a parser, and for format_arg its tables_dir keyword


def add_measured_verbs(verbs: argparse._SubParsersAction[argparse.ArgumentParser], *,
                       catalog_args: ParserHook, format_arg: ParserHook,
                       step_args: ParserHook) -> None:
    """Add ``check-nccl`` and ``advise`` to the verb table."""
    from topomodel.analysis.assumptions import COLUMNS, DEFAULT_COMM_THRESHOLD, DEFAULT_SHORTFALL
    from topomodel.cli.options import FABRIC_OPTIONS, add_step_options

    check = verbs.add_parser(
        "check-nccl", help="an nccl-tests log beside the model: busbw and time per size",
        description="Read the output of nccl-tests (all_reduce_perf, all_gather_perf,"
        " reduce_scatter_perf, alltoall_perf, sendrecv_perf) and print, per size, the"
        " measured busbw and time beside the model's for the same communicator on the"
        " design; flag the sizes measured below the model by more than --threshold and"
        " name the tier the model says saturates. See docs/check-nccl.md.")
    check.add_argument("log", help="nccl-tests output (a text file)")
    check.add_argument("--design", required=True, help="design file (YAML)")
    check.add_argument("--ranks", metavar="SPEC",
                       help="the design's accelerators the log's ranks ran on, in rank"
                       " order, as one group spec (0-15, 0,1,8,9, ...); default: the"
                       " log's hosts as systems 0, 1, ... and each rank's CUDA device as"
                       " its accelerator")
    check.add_argument("--collective",
                       help="allreduce, allgather, reducescatter, alltoall or sendrecv"
                       " (default: the test the log names, else what its rows fit)")
    check.add_argument("--threshold", type=float, default=DEFAULT_SHORTFALL, metavar="F",
                       help="flag a size whose measured busbw is below the model's by more"
                       f" than this share (default {DEFAULT_SHORTFALL:g}: beyond the"
                       " model's validated 10%% and run-to-run noise)")
    check.add_argument("--column", choices=COLUMNS, default="best",
                       help="measured column compared: the better of out-of-place and"
                       " in-place (default), or one of them")
    check.add_argument("-o", "--plot", metavar="FILE",
                       help="write measured and modelled busbw against size (PNG, SVG or"
                       " PDF)")
    add_step_options(check, FABRIC_OPTIONS)
    catalog_args(check)
    format_arg(check, tables_dir=False)  # its -o is the plot
    check.set_defaults(run=_cmd_check_nccl)

    advise = verbs.add_parser(
        "advise", help="is communication the bottleneck, and what scale-out fixes it",
        description="A sizing check: run the training step of a model on the design and"
        " say whether communication is the bottleneck (exposed communication and wait"
        " above --threshold of the step), which wall dominates, and the scale-out"
        " bandwidth that brings it below the threshold; one paragraph, then the numbers."
        " Takes the step options (layout, assumptions, what-ifs); DP fills the design"
        " unless given. See docs/advise.md.")
    advise.add_argument("design", help="design file (YAML)")
    advise.add_argument("--threshold", type=float, default=DEFAULT_COMM_THRESHOLD,
                        metavar="F", help="communication share of the step above which it"
                        f" is the bottleneck (default {DEFAULT_COMM_THRESHOLD:g})")
    step_args(advise)
    advise.set_defaults(run=_cmd_advise)


def _cmd_check_nccl(args: argparse.Namespace) -> Report:
    from topomodel.analysis.collectives.measured import check_nccl
    from topomodel.cli.options import FABRIC_OPTIONS, inputs_from_args
    from topomodel.cli.shared import collective_name, fabric_with_whatifs
    from topomodel.inputs.nccltests import read_nccl_tests
    from topomodel.report.measured import nccl_check_report

    if args.plot:  # refused now, not after the model has run
        from topomodel.draw.io import figure_format

        figure_format(args.plot)
        writable(args.plot)
    check_share(args.threshold, "threshold", low_open=True, high_open=True)
    log = read_nccl_tests(args.log)
    inputs = inputs_from_args(args, FABRIC_OPTIONS, require_model=False)
    fabric = fabric_with_whatifs(args.design, args.catalog, inputs)
    check = check_nccl(fabric, log,
                       collective=collective_name(args.collective) if args.collective else None,
                       ranks=args.ranks, threshold=args.threshold, column=args.column,
                       routing=inputs.routing, seed=inputs.seed,
                       time_model=inputs.assumptions.time)
    name = fabric.design.name or args.design
    report = nccl_check_report(check, log, design_name=name)
    if args.plot:
        from topomodel.draw.io import save_figure
        from topomodel.draw.measured import nccl_check_figure

        path = save_figure(nccl_check_figure(
            check, title=f"{name}: {check.collective}, {check.ranks} ranks, measured vs"
            " model"), args.plot)
        report.data["plot"] = str(path)
    return report


def _cmd_advise(args: argparse.Namespace) -> Report:
    from topomodel.analysis.options import software_text
    from topomodel.analysis.training.advice import advise
    from topomodel.cli.shared import job_from_args
    from topomodel.report.advice import advice_report

    check_share(args.threshold, "threshold", low_open=True, high_open=True)
    job = job_from_args(args, args.design)
    advice = advise(job.fabric, job.model, job.layout, job.assumptions,
                    threshold=args.threshold, routing=job.inputs.routing,
                    seed=job.inputs.seed)
    return advice_report(advice, design=job.fabric.design.name or args.design,
                         model=job.model.id,
                         software=software_text(advice.result.layout, job.assumptions))
