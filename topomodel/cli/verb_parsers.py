"""The parsers of the verbs whose flags take more than a few lines: one ``add_<verb>``
function each, which :func:`topomodel.cli.parser.build_parser` calls."""

from __future__ import annotations

import argparse

from topomodel.analysis.options import COST_OPTIONS, DECODE_OPTIONS, STEP_OPTIONS
from topomodel.cli.flags import (
    ALGORITHM_HELP,
    Verb,
    Verbs,
    format_arg,
    positive,
    progress_arg,
    step_args,
)
from topomodel.cli.options import (
    DECODE_KEYS,
    FABRIC_OPTIONS,
    SERVE_KEYS,
    add_goodput_options,
    add_serve_options,
    add_step_options,
)
from topomodel.cli.shared import add_catalog_args
from topomodel.report.output import FORMATS
from topomodel.vocabulary import SCORECARD_PARTS


def add_check_nccl(verbs: Verbs[argparse.ArgumentParser]) -> None:
    from topomodel.analysis.assumptions import COLUMNS, DEFAULT_SHORTFALL

    check = verbs.add_parser(
        "check-nccl", help="an nccl-tests log beside the model: busbw and time per size",
        description="Read the output of nccl-tests (all_reduce_perf, all_gather_perf,"
        " reduce_scatter_perf, alltoall_perf, sendrecv_perf) and print, per size, the"
        " measured busbw and time beside the model's for the same communicator on the"
        " design; flag the sizes measured below the model by more than --threshold and"
        " name the tier the model says saturates. See docs/check-nccl.md.")
    check.add_argument("log", help="nccl-tests output (text, or its -J JSON file)")
    check.add_argument("--design", required=True, help="design file (YAML)")
    check.add_argument("--ranks", metavar="SPEC",
                       help="the design's accelerators the log's ranks ran on, in rank"
                       " order, as one group spec (0-15, 0,1,8,9, ...); default: the"
                       " log's hosts as systems 0, 1, ... and each rank's CUDA device as"
                       " its accelerator; a log without device lines as its command line"
                       " launches it (one process's GPUs per system, processes spread one"
                       " per system under a host file)")
    check.add_argument("--collective",
                       help="allreduce, allgather, reducescatter, alltoall or sendrecv"
                       " (default: the test the log names, else what its rows fit)")
    check.add_argument("--threshold", type=float, default=DEFAULT_SHORTFALL, metavar="F",
                       help="flag a size whose measured busbw is below the model's by more"
                       f" than this share (default {DEFAULT_SHORTFALL:g}: beyond the"
                       " model's validated 10%% and run-to-run noise)")
    check.add_argument("--algorithm",
                       help="the model's algorithm, as route's --algorithm (default: the"
                       " NCCL_ALGO the log sets, else auto); " + ALGORITHM_HELP)
    check.add_argument("--column", choices=COLUMNS, default="best",
                       help="measured column compared: the better of out-of-place and"
                       " in-place (default), or one of them")
    check.add_argument("-o", "--plot", metavar="FILE",
                       help="write measured and modelled busbw against size (PNG, SVG or"
                       " PDF)")
    add_step_options(check, FABRIC_OPTIONS)
    add_catalog_args(check)
    format_arg(check, tables_dir=False)  # its -o is the plot
    check.set_defaults(run=Verb("design_verbs.check_nccl"))


def add_calibrate(verbs: Verbs[argparse.ArgumentParser]) -> None:
    cal = verbs.add_parser(
        "calibrate", help="fit the model's link figures to measured runs: a catalog overlay",
        description="Read measured runs and fit the figures the model uses (the"
        " efficiency of the link class that bounds the measured sizes, the system's"
        " launch latency) so that the model's own time of each measured collective on the"
        " design reproduces them: nccl-tests text logs or -J JSON files (several runs of"
        " one binary, or the cycles of -N, are taken at their median per size) and a"
        " job's PyTorch profiler traces (files or folders; each NCCL collective kind and"
        " group size a curve); every curve is fitted at once, so a figure two inputs"
        " bound is fitted on both. NCCL topology dumps (NCCL_TOPO_DUMP_FILE) become"
        " catalog systems in the same overlay. Write one catalog overlay (provenance"
        " measured) that every verb takes with --catalog, and print the figures before and"
        " after, the residuals, and what was left as it was and why. See docs/calibrate.md.")
    cal.add_argument("inputs", nargs="+", metavar="INPUT",
                     help="measurement files: nccl-tests output (text) or its -J JSON, a"
                     " PyTorch profiler trace or a folder of one job's traces, an NCCL"
                     " topology dump (XML); the kind is recognised from the file")
    cal.add_argument("--design", required=True, help="design file (YAML)")
    cal.add_argument("-o", "--output", required=True, metavar="FILE",
                     help="the catalog overlay to write (YAML)")
    cal.add_argument("--ranks", metavar="SPEC",
                     help="the design's accelerators the nccl-tests runs' ranks ran on, as"
                     " check-nccl's --ranks (default: as check-nccl places them)")
    cal.add_argument("--collective",
                     help="the nccl-tests runs' collective: allreduce, allgather,"
                     " reducescatter, alltoall or sendrecv (default: the test the runs"
                     " name)")
    cal.add_argument("--algorithm",
                     help="the model's algorithm for the nccl-tests runs, as route's"
                     " --algorithm (default: the NCCL_ALGO the runs set, else auto); "
                     + ALGORITHM_HELP)
    cal.add_argument("--accelerator", metavar="ID",
                     help="the catalog accelerator of a topology dump's GPUs, as catalog"
                     " import-nccl-topo's (default: identified from the dump)")
    cal.add_argument("--explain", action="store_true",
                     help="print the model against the measurements before and after the"
                     " overlay: per measured curve, and with traces and --model (and the"
                     " job's layout) per collective kind per step and per step part")
    step_args(cal, model_required=False, tables_dir=False)  # its -o is the overlay
    cal.set_defaults(run=Verb("design_verbs.calibrate"))


def add_check_trace(verbs: Verbs[argparse.ArgumentParser]) -> None:
    from topomodel.analysis.assumptions import DEFAULT_COMM_THRESHOLD

    check = verbs.add_parser(
        "check-trace", help="PyTorch profiler traces beside the model: collectives and"
        " step parts", description="Read PyTorch profiler traces of a training job"
        " (Kineto Chrome-trace JSON, one file per rank or a folder of them, .json or"
        " .json.gz) and print, per collective kind and size, the measured time and busbw"
        " beside the collective model's on the design, per collective kind the time per"
        " step, and per part of the step (compute, exposed communication, wait) the"
        " measured median beside the step model of the same model and layout; and whether"
        " the job is communication-bound by the rule of thumb. See docs/check-trace.md.")
    check.add_argument("traces", nargs="+", metavar="TRACE", help="trace files or folders")
    check.add_argument("--design", required=True, help="design file (YAML)")
    check.add_argument("--threshold", type=float, default=DEFAULT_COMM_THRESHOLD, metavar="F",
                       help="communication-bound at exposed communication and wait of at"
                       f" least this share of the step (default {DEFAULT_COMM_THRESHOLD:g})")
    step_args(check)
    check.set_defaults(run=Verb("job_verbs.check_trace"))


def add_advise(verbs: Verbs[argparse.ArgumentParser]) -> None:
    from topomodel.analysis.assumptions import DEFAULT_COMM_THRESHOLD

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
    advise.set_defaults(run=Verb("job_verbs.advise"))


def add_decode(verbs: Verbs[argparse.ArgumentParser]) -> None:
    decode = verbs.add_parser(
        "decode", help="inference decode: tokens/s per accelerator, HBM and comm walls",
        description="Model one inference decode step of a model on the design: the"
        " seconds it spends reading the weights and the KV cache from HBM, the compute"
        " floor, and the exposed TP all-reduces and EP all-to-alls routed on the fabric;"
        " tokens/s per accelerator, per system and per sequence, and the wall that binds."
        " An upper bound on tokens/s. DP (replicas) fills the design unless given. See"
        " docs/decode.md.")
    decode.add_argument("design", help="design file (YAML)")
    add_step_options(decode, DECODE_OPTIONS + DECODE_KEYS + FABRIC_OPTIONS)
    add_catalog_args(decode)
    format_arg(decode)
    decode.set_defaults(run=Verb("job_verbs.decode"))


def add_serve(verbs: Verbs[argparse.ArgumentParser]) -> None:
    serve = verbs.add_parser(
        "serve", help="serving (disaggregated or aggregated): TTFT, TPOT, tokens/s, $/Mtok,"
        " the KV hand-off's links",
        description="Model serving on the design: prefill and decode pools"
        " placed on its accelerators, M/D/1 queueing per prefill replica, prefill from"
        " compute and its collectives, each request's KV cache routed from prefill to"
        " decode ranks with the other hand-offs in flight, decode at the batch the rate"
        " gives; TTFT, TPOT, tokens/s, memory per rank, the network's share of a request"
        " and the link tier bounding it, cost per million output tokens and energy per"
        " output token; with --placement aggregated one pool prefills and decodes, chunked"
        " prefill sharing its steps. See docs/serve.md.")
    serve.add_argument("design", help="design file (YAML)")
    add_serve_options(serve)
    add_step_options(serve, SERVE_KEYS + FABRIC_OPTIONS + COST_OPTIONS)
    add_catalog_args(serve)
    format_arg(serve)
    serve.set_defaults(run=Verb("job_verbs.serve"))


def fixed_pair(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` (``--fixed``) as (key with underscores, value)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or not value.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. pp=16), got {text!r}")
    return key.strip().replace("-", "_"), value.strip()


def add_plan(verbs: Verbs[argparse.ArgumentParser]) -> None:
    """``plan``: the space, the search, and every step option the space does not
    search."""
    from topomodel.plan.defaults import (
        DEFAULT_MAX_CP,
        DEFAULT_MAX_INTERLEAVE,
        DEFAULT_MAX_MICRO_BATCH,
        OBJECTIVES,
        SEARCHED,
    )

    plan = verbs.add_parser(
        "plan", help="search every valid parallel layout of a model on a design; best first",
        description="Enumerate every valid layout of a model on all accelerators of a"
        " design (TP, PP, DP, EP, CP, micro-batch, interleave, schedule, recomputation,"
        " ZeRO stage, sequence parallelism, rank order), discard those the step model"
        " refuses or that do not fit the memory, model the step of the rest on the"
        " fabric, and print the best with step time, MFU, tokens/s, memory, the four"
        " walls and why the best beats the runner-up. See docs/plan.md.")
    plan.add_argument("design", help="design file (YAML)")
    plan.add_argument("--compare", metavar="DESIGN_B",
                      help="also plan this design and show the best layout of each side by"
                      " side")
    plan.add_argument("--objective", choices=list(OBJECTIVES), default="tokens_per_s",
                      help="what to rank by (default tokens_per_s; tokens_per_J over the"
                      " whole fabric's power; cost_per_token: US dollars per million"
                      " tokens of the whole fabric, docs/cost.md)")
    plan.add_argument("--top", type=positive, default=5, metavar="N",
                      help="distinct layouts to show, each at its best interleave and rank"
                      " order (default 5)")
    plan.add_argument("--accelerators", type=int, metavar="N",
                      help="plan a job of N accelerators (default: every accelerator, or,"
                      " when no layout uses them all, the largest job of whole systems"
                      " that has one; the output says how many are left idle)")
    plan.add_argument("--fixed", action="append", type=fixed_pair, default=[],
                      metavar="KEY=VALUE",
                      help=f"pin a searched dimension ({', '.join(SEARCHED)}); repeatable")
    plan.add_argument("--max-tp", type=positive, metavar="N", help="largest TP searched")
    plan.add_argument("--max-pp", type=positive, metavar="N", help="largest PP searched")
    plan.add_argument("--max-cp", type=positive, default=DEFAULT_MAX_CP, metavar="N",
                      help=f"largest CP searched (default {DEFAULT_MAX_CP})")
    plan.add_argument("--max-ep", type=positive, metavar="N", help="largest EP searched")
    plan.add_argument("--max-micro-batch", type=positive, default=DEFAULT_MAX_MICRO_BATCH,
                      metavar="N", help="largest micro-batch searched, sequences (default"
                      f" {DEFAULT_MAX_MICRO_BATCH})")
    plan.add_argument("--max-interleave", type=positive, default=DEFAULT_MAX_INTERLEAVE,
                      metavar="N", help="largest interleave depth searched (default"
                      f" {DEFAULT_MAX_INTERLEAVE})")
    plan.add_argument("--memory-headroom", type=float, default=0.0, metavar="F",
                      help="share of each accelerator's HBM left free, 0-1 (default 0:"
                      " a layout fits as the step model says)")
    plan.add_argument("--workers", type=int, metavar="N",
                      help="local worker processes (default 1)")
    plan.add_argument("--scheduler", metavar="ADDRESS",
                      help="run on a Dask cluster, e.g. tcp://host:8786")
    plan.add_argument("--no-progress", action="store_true",
                      help="no progress bar (shown only when stderr is a terminal)")
    plan.add_argument("-o", "--output", metavar="FILE",
                      help="write the ranked layouts to FILE: CSV, Parquet (.parquet or"
                      " --format parquet) or, for a .json file, the document --format"
                      " json prints")
    add_step_options(plan, [*(k for k in STEP_OPTIONS if k not in SEARCHED), *COST_OPTIONS])
    add_catalog_args(plan)
    plan.add_argument("--format", choices=FORMATS, default="table",
                      help="output format (default: table; parquet needs -o)")
    plan.set_defaults(run=Verb("job_verbs.plan"), writes_parquet=True)  # -o FILE takes the parquet


def add_scorecard(verbs: Verbs[argparse.ArgumentParser]) -> None:
    """``scorecard``: the step options, a second design, claims and the output file."""
    card = verbs.add_parser(
        "scorecard", help="the figures a design should publish, each with its origin",
        description="The communication scorecard of a design: tokens/s, scaling efficiency"
        " at 128, 1,024 and 4,096 accelerators and full size (each at its best layout"
        " unless a layout is given), the step's compute / communication / wait, busbw and"
        " latency of the four collectives with their tail, bandwidth and latency per"
        " network level, MFU per parallel strategy, MFU under expert imbalance (MoE),"
        " interruptions, recovery and effective time; each figure modelled, measured or"
        " published. -o FILE writes it (.json, .csv, .md or .html).")
    card.add_argument("design", help="design file (YAML)")
    card.add_argument("--compare", metavar="DESIGN_B",
                      help="a second design: every figure for both, and their ratio")
    card.add_argument("--only", action="append", choices=SCORECARD_PARTS[1:], metavar="PART",
                      help="only these parts besides the step's (repeatable: "
                      + ", ".join(SCORECARD_PARTS[1:]) + "; default all): scaling without a"
                      " layout and strategies run the planner, most of a 100k scorecard's"
                      " time")
    card.add_argument("--claim", action="append", metavar="'KEY OP NUMBER'",
                      help="check a claim on the scorecard, e.g. 'comm_share >= 0.40', or"
                      " 'mfu_ratio >= 2.75' (the second design's over the first's); where"
                      " it does not hold, the nearest assumptions under which it would"
                      " (repeatable)")
    card.add_argument("-o", "--output", metavar="FILE",
                      help="write the scorecard to FILE; its extension picks the format"
                      " (.json, .csv, .md, .html)")
    step_args(card, tables_dir=False)
    add_goodput_options(card)
    progress_arg(card)
    card.set_defaults(run=Verb("job_verbs.scorecard"))
