"""The argument parser of every verb."""

from __future__ import annotations

import argparse
from typing import NoReturn

from topomodel.cli.commands import (
    cmd_build,
    cmd_catalog_list,
    cmd_catalog_show,
    cmd_draw,
    cmd_export,
    cmd_options,
    cmd_route,
    cmd_schema,
    cmd_units,
)
from topomodel.cli.compare import cmd_compare
from topomodel.cli.decode_commands import add_decode_verb
from topomodel.cli.measured_commands import add_measured_verbs
from topomodel.cli.options import (
    FABRIC_OPTIONS,
    add_goodput_options,
    add_step_options,
)
from topomodel.cli.plan_command import add_plan_parser
from topomodel.cli.shared import add_catalog_args
from topomodel.cli.step_commands import cmd_goodput, cmd_review, cmd_scale, cmd_step, cmd_sweep
from topomodel.errors import short_words
from topomodel.limits import DEFAULT_MAX_SWEEP_POINTS
from topomodel.report.output import FORMATS

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
    units.set_defaults(run=cmd_units)

    catalog = verbs.add_parser("catalog", help="browse the hardware catalog",
                               description="Browse the hardware catalog.")
    catalog_verbs = catalog.add_subparsers(dest="catalog_verb", metavar="ACTION", required=True)
    listing = catalog_verbs.add_parser("list", help="list catalog entries",
                                       description="List catalog entries.")
    listing.add_argument("--kind", help="only entries of this kind (e.g. switch, nic)")
    add_catalog_args(listing)
    _format_arg(listing)
    listing.set_defaults(run=cmd_catalog_list)
    show = catalog_verbs.add_parser("show", help="show one entry with every figure",
                                    description="Show one catalog entry with every figure.")
    show.add_argument("id", help="entry id, e.g. qm9700")
    add_catalog_args(show)
    _format_arg(show)
    show.set_defaults(run=cmd_catalog_show)

    build = verbs.add_parser(
        "build", help="build a design's fabric: tiers, bisection, BOM, power, optics",
        description="Build the fabric of a design file and report per-tier capacity,"
        " bisection, bill of materials, power and the optical link budget.")
    build.add_argument("design", help="design file (YAML)")
    build.add_argument("--max-flow-nodes", type=_count, default=20_000, metavar="N",
                       help="run the exact max-flow bisection check on fabrics of at most"
                       " N nodes (default 20000)")
    add_catalog_args(build)
    _format_arg(build)
    build.set_defaults(run=cmd_build)

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
    _format_arg(route)
    route.set_defaults(run=cmd_route)

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
    add_goodput_options(review)
    _workers_arg(review, "the goodput's degraded steps")
    review.set_defaults(run=cmd_review, tables_under_output=True)

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
    _workers_arg(step, "the sensitivity's and the goodput's steps")
    step.set_defaults(run=cmd_step)

    compare = verbs.add_parser(
        "compare", help="the same model and layout rules on two or more designs, side by"
        " side, with BOM, power and capex deltas",
        description="Run the same model and layout rules on two or more designs and"
        " compare step time, walls, communication share, MFU and goodput, and each"
        " design's bill of materials, power and capex with its change from the first.")
    compare.add_argument("designs", nargs="+", metavar="DESIGN",
                         help="design files (two or more; the first is the baseline)")
    _step_args(compare)
    _workers_arg(compare, "the designs")
    compare.set_defaults(run=cmd_compare)

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
    goodput.set_defaults(run=cmd_goodput)

    scale = verbs.add_parser(
        "scale", help="throughput, scaling efficiency and MFU against accelerator count",
        description="Sweep the accelerator count of a design (DP grows, the rest of the"
        " layout stays) and report throughput, scaling efficiency and MFU.")
    scale.add_argument("design", help="design file (YAML)")
    _step_args(scale)
    scale.add_argument("--counts", type=int, nargs="+", metavar="N",
                       help="accelerator counts (default 128, 1024, 4096, ... up to the"
                       " design's size)")
    scale.add_argument("--plot", metavar="FILE", help="write the scaling curve (PNG, SVG or PDF)")
    scale.set_defaults(run=cmd_scale)

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
    draw.set_defaults(run=cmd_draw)

    export = verbs.add_parser(
        "export", help="write the fabric as a graph, tables, or ASTRA-sim/Calculon input",
        description="Build a design's fabric and export it for other tools: GraphML or"
        " node-link JSON (one arc per link direction, attributes with units in their"
        " names); nodes and links tables as CSV or Parquet in a directory; an ASTRA-sim"
        " analytical network (YAML; its GB/s is 2^30 bytes/s) or a Calculon system file"
        " (JSON). See docs/exports.md for the schema and what each approximates.")
    export.add_argument("design", help="design file (YAML)")
    export.add_argument("--to", required=True,
                        choices=["graphml", "json", "csv", "parquet", "astra-sim", "calculon"],
                        help="export format")
    export.add_argument("-o", "--output", required=True, metavar="PATH",
                        help="output file (graphml, json, astra-sim, calculon) or directory"
                        " (csv, parquet)")
    export.add_argument("--compute-efficiency", type=float, metavar="F",
                        help="calculon: one flat GEMM efficiency (0-1) instead of the"
                        " accelerator's measured GEMM curve (needed where the catalog has"
                        " none)")
    add_catalog_args(export)
    _format_arg(export, tables_dir=False)
    export.set_defaults(run=cmd_export)

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
    sweep.set_defaults(run=cmd_sweep)

    add_measured_verbs(verbs, catalog_args=add_catalog_args, format_arg=_format_arg,
                       step_args=_step_args)
    add_decode_verb(verbs, catalog_args=add_catalog_args, format_arg=_format_arg)

    options = verbs.add_parser(
        "options", help="list the step options: sweep key, flag, default and meaning",
        description="List every option of a training step (layout, assumptions,"
        " what-ifs) with its sweep-file key, command-line flag, default and meaning; step,"
        " goodput, compare, scale, review and sweeps share this one table.")
    _format_arg(options)
    options.set_defaults(run=cmd_options)

    add_plan_parser(verbs)

    schema = verbs.add_parser(
        "schema", help="print the JSON Schema of design, catalog or sweep files",
        description="Print the JSON Schema (draft 2020-12) of an input format: design"
        " files, catalog files or sweep files. --format json (the default) prints the bare"
        " schema, as editors want it; table, md, csv and parquet list every key with its"
        " type, default and meaning.")
    schema.add_argument("what", choices=["design", "catalog", "sweep"], help="which format")
    _format_arg(schema)
    schema.set_defaults(run=cmd_schema, format="json")
    return parser
