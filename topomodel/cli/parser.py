"""The argument parser of every verb."""

from __future__ import annotations

import argparse
import importlib
from typing import NoReturn

from topomodel.analysis.options import COST_OPTIONS, DECODE_OPTIONS, STEP_OPTIONS
from topomodel.cli.options import (
    DECODE_KEYS,
    FABRIC_OPTIONS,
    SERVE_KEYS,
    add_goodput_options,
    add_serve_options,
    add_step_options,
)
from topomodel.cli.shared import add_catalog_args
from topomodel.errors import short_words
from topomodel.limits import DEFAULT_MAX_SWEEP_POINTS
from topomodel.report.output import FORMATS, Report

ALGORITHM_HELP = (
    "ring (NCCL's ring); tree (NCCL's double binary tree); rhd (recursive "
    'halving-doubling); hierarchical (rings inside and across scale-up domains); '
    'innetwork (the switches reduce: NVLS, SHARP); nvlstree (NVLS inside, tree across); '
    'torus (bucket algorithm on torus domains); direct (every pair at once); pairwise '
    '(n-1 shifted exchanges); p2p (point-to-point); or auto (the fastest of those NCCL '
    'runs: ring, tree, innetwork, nvlstree, torus, direct, p2p; default)')
"""--algorithm's help: :func:`topomodel.traffic.algorithms.help_text`, written out so the
parser does not import the algorithms (numpy, pandas) for every verb; a test holds the two
equal."""


def _count(text: str) -> int:
    """A count of at least 0 (``--top``)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 0, got {text!r}")
    return value


def _positive(text: str) -> int:
    """A count of at least 1 (``--max-points``, ``--workers``)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def _progress_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress lines on stderr (shown only when stderr is a"
                        " terminal)")


def _no_goodput_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-goodput", action="store_true",
                        help="leave out the goodput (interruptions, checkpoints, effective"
                        " time): the failed-part steps it runs are most of a large job's"
                        " time")


def _workers_arg(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--workers", type=_positive, metavar="N",
                        help=f"worker processes for {what} (default: every core; 1 runs"
                        " everything in this process; the results are the same)")


def _format_arg(parser: argparse.ArgumentParser, *, tables_dir: bool = True) -> None:
    """``--format``, and (``tables_dir``, for a verb without an ``-o`` of its own)
    ``-o DIR`` for one CSV or Parquet file per table."""
    parser.add_argument("--format", choices=FORMATS, default="table",
                        help="output format (default: table); csv is one tidy table with a"
                        " 'table' column, plain numbers, units in the column names;"
                        " parquet writes files (needs -o DIR)")
    if tables_dir:
        parser.add_argument("-o", "--output", dest="tables_dir", metavar="DIR",
                            help="with --format csv or parquet: write one file per table"
                            " into DIR (DIR/<table>.csv or .parquet)")


def _step_args(step: argparse.ArgumentParser, *, model_required: bool = True,
               tables_dir: bool = True) -> None:
    """The step options (model, layout, assumptions, what-ifs), from the one table."""
    add_step_options(step, model_required=model_required)
    add_catalog_args(step)
    _format_arg(step, tables_dir=tables_dir)


class Verb:
    """A verb's ``run``: ``run(args)`` of the verb's module (``design_verbs.build``), which
    is imported when the verb runs, not to parse or print help."""

    def __init__(self, module: str) -> None:
        self.module = f"topomodel.cli.{module}"

    def __call__(self, args: argparse.Namespace) -> Report:
        report: Report = importlib.import_module(self.module).run(args)
        return report

    def __repr__(self) -> str:
        return f"Verb({self.module!r})"


class _Version(argparse.Action):
    """``--version``: the installed version, looked up only when asked for (reading the
    package metadata costs every other command start-up time)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                 **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show the program's version and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        from topomodel import __version__

        print(f"topomodel {__version__}")
        parser.exit()


class _OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line, as every other error of the
    command line is (the usage itself is what ``--help`` prints): exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, short_words(f"{self.prog}: error: {message} (see {self.prog} --help)")
                  + "\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every verb (each has help text; a test checks it); its
    verbs' parsers are of its class."""
    parser: argparse.ArgumentParser = _OneLineParser(
        prog="topomodel",
        description="Cluster-network topology and link-budget modeler for AI training"
        " clusters.")
    parser.add_argument("--version", action=_Version)
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    units = verbs.add_parser(
        "units", help="convert or compare quantities with explicit units",
        description="Convert a quantity ('900 GB/s' --to Gb/s) or compare two"
        " ('units compare \"900 GB/s bidir\" \"400 Gb/s /dir\"').")
    units.add_argument("quantity", nargs="+", help="a quantity, or: compare A B")
    units.add_argument("--to", help="target unit, e.g. Gb/s")
    _format_arg(units)
    units.set_defaults(run=Verb("design_verbs.units"))

    catalog = verbs.add_parser("catalog", help="browse the hardware catalog",
                               description="Browse the hardware catalog.")
    catalog_verbs = catalog.add_subparsers(dest="catalog_verb", metavar="ACTION", required=True)
    listing = catalog_verbs.add_parser("list", help="list catalog entries",
                                       description="List catalog entries.")
    listing.add_argument("--kind", help="only entries of this kind (e.g. switch, nic)")
    add_catalog_args(listing)
    _format_arg(listing)
    listing.set_defaults(run=Verb("design_verbs.catalog"))
    show = catalog_verbs.add_parser("show", help="show one entry with every figure",
                                    description="Show one catalog entry with every figure.")
    show.add_argument("id", help="entry id, e.g. qm9700")
    add_catalog_args(show)
    _format_arg(show)
    show.set_defaults(run=Verb("design_verbs.catalog"))

    build = verbs.add_parser(
        "build", help="build a design's fabric: tiers, bisection, BOM, power, optics",
        description="Build the fabric of a design file and report per-tier capacity,"
        " bisection, bill of materials, power and the optical link budget.")
    build.add_argument("design", help="design file (YAML)")
    build.add_argument("--max-flow-nodes", type=_count, default=20_000, metavar="N",
                       help="run the exact max-flow bisection check on fabrics of at most"
                       " N nodes (default 20000)")
    build.add_argument("--failure-domains", action="store_true",
                       help="add the blast-radius table: one rack, power feed, cooling"
                       " loop, scale-out plane and site failed each (docs/failure-domains.md)")
    add_catalog_args(build)
    _format_arg(build)
    build.set_defaults(run=Verb("design_verbs.build"))

    route = verbs.add_parser(
        "route", help="route one collective: time, algbw, busbw, tiers, hotspots",
        description="Route a collective over the fabric of a design and report its time"
        " (latency, bandwidth, topology), algbw and busbw, per-tier load and hotspots.")
    route.add_argument("design", help="design file (YAML)")
    route.add_argument("--collective", required=True,
                       help="allreduce, allgather, reducescatter, alltoall, broadcast,"
                       " reduce or sendrecv")
    route.add_argument("--size", required=True,
                       help="message size with a unit, nccl-tests convention (e.g. '1 GiB')")
    route.add_argument("--group", action="append", metavar="SPEC",
                       help="communicators: all, domain, system, rail, block:N, stride:K,"
                       " A-B or A,B,C (repeat to run several group sets at once)")
    route.add_argument("--algorithm", default="auto",
                       help=ALGORITHM_HELP)
    route.add_argument("--router", default="auto", choices=["auto", "general", "structured"],
                       help="router implementation (default: structured where it applies)")
    route.add_argument("--fail-link", action="append", default=[], metavar="'A -- B'",
                       help="fail the link between two named nodes; repeatable")
    add_step_options(route, FABRIC_OPTIONS)
    route.add_argument("--top", type=_count, default=10, metavar="N",
                       help="hotspots to list (default 10)")
    add_catalog_args(route)
    _progress_arg(route)
    _format_arg(route)
    route.set_defaults(run=Verb("design_verbs.route"))

    review = verbs.add_parser(
        "review", help="the design-review report: HTML, Markdown and JSON with diagrams",
        description="Write a design review of a design into a directory: report.html (one"
        " self-contained page that opens offline), report.md with figures/*.png, and"
        " report.json. It has the headline numbers, warnings, topology diagram and tiers,"
        " bisection, collectives on the design's natural groups with hotspots, the"
        " training step and its four walls (with --model), bill of materials, power,"
        " optics, every assumption and the provenance of every input figure.")
    review.add_argument("design", help="design file (YAML)")
    review.add_argument("-o", "--output", required=True, metavar="DIR",
                        help="directory for the report (created or updated)")
    review.add_argument("--size", action="append", default=[], metavar="SIZE",
                        help="collective size with a unit (repeatable; default 1 MiB,"
                        " 64 MiB, 1 GiB; 1 GiB only above 2048 accelerators)")
    _step_args(review, model_required=False, tables_dir=False)
    _no_goodput_arg(review)
    add_serve_options(review, switch=True)
    add_goodput_options(review)
    add_step_options(review, COST_OPTIONS)
    _workers_arg(review, "the goodput's degraded steps")
    _progress_arg(review)
    review.set_defaults(run=Verb("job_verbs.review"), tables_under_output=True)

    step = verbs.add_parser(
        "step", help="one training step: compute, exposed comm, wait, MFU, four walls",
        description="Model one training step of a model with a parallel layout on the"
        " fabric of a design: compute, pipeline bubble, exposed communication and"
        " synchronisation wait, MFU, tokens/s, memory, and the four walls.")
    step.add_argument("design", help="design file (YAML)")
    _step_args(step)
    step.add_argument("--target-comm-share", type=float, metavar="F",
                      help="also find the scale-out bandwidth that brings exposed"
                      " communication + wait to at most this share of the step")
    step.add_argument("--sensitivity", action="store_true",
                      help="also move each assumption low and high and show the effect")
    step.add_argument("--no-goodput", action="store_true",
                      help="leave out the goodput section (interruptions, checkpoints)")
    add_goodput_options(step)
    add_step_options(step, COST_OPTIONS)
    _workers_arg(step, "the sensitivity's and the goodput's steps")
    step.set_defaults(run=Verb("job_verbs.step"))

    compare = verbs.add_parser(
        "compare", help="the same model and layout rules on two or more designs, side by"
        " side, with BOM, power and capex deltas",
        description="Run the same model and layout rules on two or more designs and"
        " compare step time, walls, communication share, MFU and goodput, and each"
        " design's bill of materials, power and capex with its change from the first.")
    compare.add_argument("designs", nargs="+", metavar="DESIGN",
                         help="design files (two or more; the first is the baseline)")
    _step_args(compare)
    add_step_options(compare, COST_OPTIONS)
    add_serve_options(compare, switch=True)
    _no_goodput_arg(compare)
    _workers_arg(compare, "the designs")
    _progress_arg(compare)
    compare.set_defaults(run=Verb("job_verbs.compare"))

    goodput = verbs.add_parser(
        "goodput", help="interruptions, checkpoint interval, effective time and goodput",
        description="From the parts of a job's footprint and their failure rates: expected"
        " interruptions per day, the Young/Daly checkpoint interval, downtime, the"
        " effective training-time share, throughput while redundant parts are down, and"
        " goodput (tokens/s), with what-ifs (optics, spares, checkpoint bandwidth).")
    goodput.add_argument("design", help="design file (YAML)")
    _step_args(goodput)
    add_goodput_options(goodput)
    _workers_arg(goodput, "the degraded steps")
    _progress_arg(goodput)
    goodput.set_defaults(run=Verb("job_verbs.goodput"))

    scale = verbs.add_parser(
        "scale", help="throughput, scaling efficiency and MFU against accelerator count",
        description="Sweep the accelerator count of a design (DP grows, the rest of the"
        " layout stays) and report throughput, scaling efficiency and MFU.")
    scale.add_argument("design", help="design file (YAML)")
    _step_args(scale)
    scale.add_argument("--counts", type=int, nargs="+", metavar="N",
                       help="accelerator counts (default six, spaced geometrically from"
                       " one system or one model-parallel group to the design's size)")
    scale.add_argument("--plot", metavar="FILE", help="write the scaling curve (PNG, SVG or PDF)")
    scale.set_defaults(run=Verb("job_verbs.scale"))

    draw = verbs.add_parser(
        "draw", help="draw the topology (PNG, SVG or PDF); with --route, link load as colour",
        description="Draw a design's tiered topology to a PNG, SVG or PDF file (by the"
        " suffix): node by node for small fabrics, one box per tier and group of"
        " scale-up domains for large ones, link bundles labelled cables x rate. With"
        " --route, run one collective and colour the links by utilisation; --what tiers"
        " draws its per-tier utilisation bars instead.")
    draw.add_argument("design", help="design file (YAML)")
    draw.add_argument("-o", "--output", required=True, metavar="FILE",
                      help="image file ending in .png, .svg or .pdf")
    draw.add_argument("--what", default="topology", choices=["topology", "tiers"],
                      help="topology diagram (default) or per-tier utilisation bars"
                      " (needs --route)")
    draw.add_argument("--detail", default="auto", choices=["auto", "full", "aggregate"],
                      help="node by node, aggregated, or auto by size (default)")
    draw.add_argument("--route", metavar="COLLECTIVE",
                      help="run this collective (allreduce, allgather, reducescatter,"
                      " alltoall, ...) and colour links by its load")
    draw.add_argument("--size", help="message size of --route with a unit (e.g. '1 GiB')")
    draw.add_argument("--group", action="append", metavar="SPEC",
                      help="communicators of --route: all (default), domain, system, rail,"
                      " block:N, stride:K, A-B (repeatable)")
    draw.add_argument("--algorithm", default="auto", help="algorithm of --route (default auto)")
    add_step_options(draw, FABRIC_OPTIONS)
    draw.add_argument("--title", help="figure title (default: design name and load)")
    add_catalog_args(draw)
    _format_arg(draw, tables_dir=False)
    draw.set_defaults(run=Verb("design_verbs.draw"))

    export = verbs.add_parser(
        "export", help="write the fabric as a graph, tables, simulator or scheduler input",
        description="Build a design's fabric and export it for other tools: GraphML or"
        " node-link JSON (one arc per link direction, attributes with units in their"
        " names); nodes and links tables as CSV or Parquet in a directory; an ASTRA-sim"
        " analytical network (YAML; its GB/s is 2^30 bytes/s) or a Calculon system file"
        " (JSON); a Slurm topology.conf for the tree or block plugin; a Kueue Topology"
        " and its node labels; Keysight InfraGraph (JSON); a Chakra execution trace of"
        " one modelled training step (a protobuf file per rank; needs --model and"
        " protobuf). See docs/exports.md for the schema and what each approximates.")
    export.add_argument("design", help="design file (YAML)")
    export.add_argument("--to", required=True,
                        choices=["graphml", "json", "csv", "parquet", "astra-sim", "calculon",
                                 "slurm", "slurm-block", "kueue", "infragraph", "chakra"],
                        help="export format")
    export.add_argument("-o", "--output", required=True, metavar="PATH",
                        help="output file (graphml, json, astra-sim, calculon, slurm,"
                        " slurm-block, infragraph) or directory (csv, parquet, kueue, chakra)")
    export.add_argument("--compute-efficiency", type=float, metavar="F",
                        help="calculon, chakra: one flat GEMM efficiency (0-1) instead of the"
                        " accelerator's measured GEMM curve (needed where the catalog has"
                        " none)")
    export.add_argument("--hostnames", metavar="PATTERN",
                        help="slurm, slurm-block, kueue: host names, PREFIX{n} or"
                        " PREFIX{n:0Wd} with n the host number from 0 (default"
                        " node{n:04d}: node0000, node0001, ...)")
    export.add_argument("--label-prefix", metavar="DOMAIN",
                        help="kueue: prefix of the node label keys (default"
                        " topology.topomodel.io: topology.topomodel.io/leaf-group, ...)")
    # chakra's step: the step options, but --compute-efficiency is the one above
    add_step_options(export, [k for k in STEP_OPTIONS if k != "compute_efficiency"],
                     model_required=False)
    add_catalog_args(export)
    _format_arg(export, tables_dir=False)
    export.set_defaults(run=Verb("design_verbs.export"))

    sweep = verbs.add_parser(
        "sweep", help="design-space sweep: many designs and layouts, one row per point",
        description="Run the step model at every point of a sweep file (design fields,"
        " model, layout, what-ifs) on a local process pool or a Dask cluster; write one"
        " row per point to Parquet or CSV, resumably; print the best points and the"
        " Pareto front. See docs/sweeps.md.")
    sweep.add_argument("sweep", help="sweep file (YAML)")
    sweep.add_argument("-o", "--output", metavar="RESULTS",
                       help="results file: .parquet (default) or .csv")
    sweep.add_argument("--results-format", choices=["parquet", "csv"],
                       help="results format (default: by the suffix, else parquet)")
    sweep.add_argument("--workers", type=int, metavar="N",
                       help="local worker processes (default: every core; 1 runs here)")
    sweep.add_argument("--scheduler", metavar="ADDRESS",
                       help="run on this Dask scheduler (tcp://host:8786, tls://host:8786;"
                       " default $TOPOMODEL_DASK_SCHEDULER) instead; the cluster must be"
                       " trusted")
    sweep.add_argument("--use-file-scheduler", action="store_true",
                       help="run on the Dask scheduler the sweep file names (refused"
                       " without this or --scheduler)")
    sweep.add_argument("--resume", action="store_true",
                       help="skip the points an earlier, interrupted or shorter run finished")
    sweep.add_argument("--retry-failed", action="store_true",
                       help="resume, and run again the points that recorded an error")
    sweep.add_argument("--overwrite", action="store_true",
                       help="start over even if results or a journal exist")
    sweep.add_argument("--pareto", nargs=2, metavar=("X", "Y"),
                       help="print the Pareto-optimal points of two metrics; X:min, X:max"
                       " or +X (larger is better) override the direction")
    sweep.add_argument("--plot", metavar="FILE",
                       help="draw the Pareto front (PNG, SVG or PDF)")
    sweep.add_argument("--dry-run", action="store_true",
                       help="check the sweep file and list its points without running")
    sweep.add_argument("--max-points", type=_positive, default=DEFAULT_MAX_SWEEP_POINTS,
                       metavar="N", help="refuse a sweep of more than N points, counted"
                       f" before any runs (default {DEFAULT_MAX_SWEEP_POINTS:,})")
    add_catalog_args(sweep)
    _format_arg(sweep, tables_dir=False)
    sweep.set_defaults(run=Verb("job_verbs.sweep"))

    _add_check_nccl(verbs)
    _add_advise(verbs)
    _add_decode(verbs)
    _add_serve(verbs)

    options = verbs.add_parser(
        "options", help="list the options of a job: sweep key, flag, default and meaning",
        description="List every option of a job (a training step's layout, assumptions"
        " and what-ifs, the goodput model's and decode's) with its sweep-file key,"
        " command-line flag, default, meaning and the model it feeds; step, goodput,"
        " compare, scale, review, advise, plan, decode and sweeps read this one table"
        " (sweeps take no decode option: they run the step).")
    _format_arg(options)
    options.set_defaults(run=Verb("job_verbs.options"))

    _add_plan(verbs)

    schema = verbs.add_parser(
        "schema", help="print the JSON Schema of design, catalog or sweep files",
        description="Print the JSON Schema (draft 2020-12) of an input format: design"
        " files, catalog files or sweep files. --format json (the default) prints the bare"
        " schema, as editors want it; table, md, csv and parquet list every key with its"
        " type, default and meaning.")
    schema.add_argument("what", choices=["design", "catalog", "sweep"], help="which format")
    _format_arg(schema)
    schema.set_defaults(run=Verb("design_verbs.schema"), format="json")
    return parser


Verbs = argparse._SubParsersAction  # the verb table build_parser adds to


def _add_check_nccl(verbs: Verbs[argparse.ArgumentParser]) -> None:
    from topomodel.analysis.assumptions import COLUMNS, DEFAULT_SHORTFALL

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
    _format_arg(check, tables_dir=False)  # its -o is the plot
    check.set_defaults(run=Verb("design_verbs.check_nccl"))


def _add_advise(verbs: Verbs[argparse.ArgumentParser]) -> None:
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
    _step_args(advise)
    advise.set_defaults(run=Verb("job_verbs.advise"))


def _add_decode(verbs: Verbs[argparse.ArgumentParser]) -> None:
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
    _format_arg(decode)
    decode.set_defaults(run=Verb("job_verbs.decode"))


def _add_serve(verbs: Verbs[argparse.ArgumentParser]) -> None:
    serve = verbs.add_parser(
        "serve", help="disaggregated serving: TTFT, TPOT, tokens/s, the KV hand-off's links",
        description="Model disaggregated serving on the design: prefill and decode pools"
        " placed on its accelerators, M/D/1 queueing per prefill replica, prefill from"
        " compute and its collectives, each request's KV cache routed from prefill to"
        " decode ranks with the other hand-offs in flight, decode at the batch the rate"
        " gives; TTFT, TPOT, tokens/s, memory per rank, the network's share of a request"
        " and the link tier bounding it. See docs/serve.md.")
    serve.add_argument("design", help="design file (YAML)")
    add_serve_options(serve)
    add_step_options(serve, SERVE_KEYS + FABRIC_OPTIONS)
    add_catalog_args(serve)
    _format_arg(serve)
    serve.set_defaults(run=Verb("job_verbs.serve"))


def _fixed_pair(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` (``--fixed``) as (key with underscores, value)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or not value.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. pp=16), got {text!r}")
    return key.strip().replace("-", "_"), value.strip()


def _add_plan(verbs: Verbs[argparse.ArgumentParser]) -> None:
    """``plan``: the space, the search, and every step option the space does not
    search."""
    from topomodel.plan.space import (
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
    plan.add_argument("--top", type=_positive, default=5, metavar="N",
                      help="distinct layouts to show, each at its best interleave and rank"
                      " order (default 5)")
    plan.add_argument("--accelerators", type=int, metavar="N",
                      help="plan a job of N accelerators (default: every accelerator, or,"
                      " when no layout uses them all, the largest job of whole systems"
                      " that has one; the output says how many are left idle)")
    plan.add_argument("--fixed", action="append", type=_fixed_pair, default=[],
                      metavar="KEY=VALUE",
                      help=f"pin a searched dimension ({', '.join(SEARCHED)}); repeatable")
    plan.add_argument("--max-tp", type=_positive, metavar="N", help="largest TP searched")
    plan.add_argument("--max-pp", type=_positive, metavar="N", help="largest PP searched")
    plan.add_argument("--max-cp", type=_positive, default=DEFAULT_MAX_CP, metavar="N",
                      help=f"largest CP searched (default {DEFAULT_MAX_CP})")
    plan.add_argument("--max-ep", type=_positive, metavar="N", help="largest EP searched")
    plan.add_argument("--max-micro-batch", type=_positive, default=DEFAULT_MAX_MICRO_BATCH,
                      metavar="N", help="largest micro-batch searched, sequences (default"
                      f" {DEFAULT_MAX_MICRO_BATCH})")
    plan.add_argument("--max-interleave", type=_positive, default=DEFAULT_MAX_INTERLEAVE,
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
                      help="write the ranked layouts to FILE (needed by --format parquet)")
    add_step_options(plan, [*(k for k in STEP_OPTIONS if k not in SEARCHED), *COST_OPTIONS])
    add_catalog_args(plan)
    plan.add_argument("--format", choices=FORMATS, default="table",
                      help="output format (default: table; parquet needs -o)")
    plan.set_defaults(run=Verb("job_verbs.plan"), writes_parquet=True)  # -o FILE takes the parquet
