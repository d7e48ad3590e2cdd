"""The argument parser of every verb."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, NoReturn, cast

from topomodel.analysis.options import COST_OPTIONS, STEP_OPTIONS
from topomodel.cli.flags import (
    ALGORITHM_HELP,
    Verb,
    count,
    format_arg,
    no_goodput_arg,
    positive,
    progress_arg,
    step_args,
    workers_arg,
)
from topomodel.cli.options import (
    FABRIC_OPTIONS,
    add_goodput_options,
    add_serve_options,
    add_step_options,
)
from topomodel.cli.shared import add_catalog_args
from topomodel.cli.verb_parsers import (
    add_advise,
    add_calibrate,
    add_check_nccl,
    add_check_trace,
    add_decode,
    add_plan,
    add_scorecard,
    add_serve,
)
from topomodel.errors import short_words
from topomodel.limits import DEFAULT_MAX_SWEEP_POINTS


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


class _Unused:
    """What a verb's flags are added to while another verb runs: nothing is kept
    (argparse spends tens of microseconds on each of the other verbs' 800-odd flags:
    about 15 ms of every process, ``benchmarks/README.md``)."""

    def __getattr__(self, name: str) -> Any:
        return self._nothing

    def _nothing(self, *args: object, **kwargs: object) -> _Unused:
        return self


class _VerbTable(argparse._SubParsersAction):  # type: ignore[type-arg]
    """The verb table; with ``only`` set, every verb is listed (its name, help and
    parser, for ``--help`` and for a mistyped verb's message) but only that one verb's
    flags are made."""

    only: str | None = None

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().add_parser(name, **kwargs)
        if self.only is None or name == self.only:
            return parser
        return cast(argparse.ArgumentParser, _Unused())


def named_verb(argv: Sequence[str]) -> str | None:
    """The verb a command line names: its first word, unless that is an option
    (``--help``, ``--version``), which then needs every verb's parser."""
    return argv[0] if argv and not argv[0].startswith("-") else None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of every verb (each has help text; a test checks it); its
    verbs' parsers are of its class. ``only``: a verb whose flags are the only ones
    made (the others listed with their help), what one command line needs."""
    parser: argparse.ArgumentParser = _OneLineParser(
        prog="topomodel",
        description="Cluster-network topology and link-budget modeler for AI training"
        " clusters.")
    parser.add_argument("--version", action=_Version)
    verbs = cast(_VerbTable, parser.add_subparsers(dest="verb", metavar="VERB",
                                                   required=True, action=_VerbTable))
    verbs.only = only

    units = verbs.add_parser(
        "units", help="convert or compare quantities with explicit units",
        description="Convert a quantity ('900 GB/s' --to Gb/s) or compare two"
        " ('units compare \"900 GB/s bidir\" \"400 Gb/s /dir\"').")
    units.add_argument("quantity", nargs="+", help="a quantity, or: compare A B")
    units.add_argument("--to", help="target unit, e.g. Gb/s")
    format_arg(units)
    units.set_defaults(run=Verb("design_verbs.units"))

    catalog = verbs.add_parser("catalog", help="browse the hardware catalog",
                               description="Browse the hardware catalog.")
    catalog_verbs = catalog.add_subparsers(dest="catalog_verb", metavar="ACTION", required=True)
    listing = catalog_verbs.add_parser("list", help="list catalog entries",
                                       description="List catalog entries.")
    listing.add_argument("--kind", help="only entries of this kind (e.g. switch, nic)")
    add_catalog_args(listing)
    format_arg(listing)
    listing.set_defaults(run=Verb("design_verbs.catalog"))
    show = catalog_verbs.add_parser("show", help="show one entry with every figure",
                                    description="Show one catalog entry with every figure.")
    show.add_argument("id", help="entry id, e.g. qm9700")
    add_catalog_args(show)
    format_arg(show)
    show.set_defaults(run=Verb("design_verbs.catalog"))
    nccl_topo = catalog_verbs.add_parser(
        "import-nccl-topo", help="turn an NCCL topology dump into a catalog system",
        description="Read NCCL's topology dump (the XML file NCCL_TOPO_DUMP_FILE names) and"
        " write a catalog overlay with one system, the node as NCCL saw it: its GPUs,"
        " NVLink or PCIe wiring and NICs, each a catalog part where the dump identifies"
        " one, provenance 'measured'. Give the overlay to any verb with --catalog and"
        " name the system in a design. See docs/nccl-topology.md.")
    nccl_topo.add_argument("dump", help="the topology dump (XML)")
    nccl_topo.add_argument("-o", "--output", required=True, metavar="FILE",
                           help="the catalog overlay to write (YAML)")
    nccl_topo.add_argument("--id", dest="system_id", metavar="NAME",
                           help="the new system's id (default: nccl- and the dump's name)")
    nccl_topo.add_argument("--accelerator", metavar="ID",
                           help="a catalog accelerator for the GPUs, instead of identifying"
                           " them from the dump")
    add_catalog_args(nccl_topo)
    format_arg(nccl_topo, tables_dir=False)
    nccl_topo.set_defaults(run=Verb("design_verbs.catalog"))

    build = verbs.add_parser(
        "build", help="build a design's fabric: tiers, bisection, BOM, power, optics",
        description="Build the fabric of a design file and report per-tier capacity,"
        " bisection, bill of materials, power and the optical link budget.")
    build.add_argument("design", help="design file (YAML)")
    build.add_argument("--max-flow-nodes", type=count, default=20_000, metavar="N",
                       help="run the exact max-flow bisection check on fabrics of at most"
                       " N nodes (default 20000)")
    build.add_argument("--failure-domains", action="store_true",
                       help="add the blast-radius table: one rack, power feed, cooling"
                       " loop, scale-out plane and site failed each (docs/failure-domains.md)")
    build.add_argument("--every-domain", action="append", metavar="KIND",
                       choices=("rack", "power_feed", "cooling_loop", "plane", "site"),
                       help="fail every domain of KIND in turn and add its worst and median"
                       " rows to the blast-radius table (implies --failure-domains;"
                       " repeatable)")
    add_catalog_args(build)
    format_arg(build)
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
    route.add_argument("--top", type=count, default=10, metavar="N",
                       help="hotspots to list (default 10)")
    add_catalog_args(route)
    progress_arg(route)
    format_arg(route)
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
    step_args(review, model_required=False, tables_dir=False)
    review.add_argument("--scorecard", action="store_true",
                        help="add the scorecard of the job (docs/scorecard.md) as a"
                        " section; it plans each scaling size and strategy family, so it"
                        " takes longer than the rest of the review")
    no_goodput_arg(review)
    add_serve_options(review, switch=True)
    add_goodput_options(review)
    add_step_options(review, COST_OPTIONS)
    workers_arg(review, "the review's pieces (the step, the collective table, the steps"
                " with a part failed, the what-ifs)",
                "1, everything in this process: the fewest fresh pages")
    progress_arg(review)
    review.set_defaults(run=Verb("job_verbs.review"), tables_under_output=True)

    step = verbs.add_parser(
        "step", help="one training step: compute, exposed comm, wait, MFU, four walls",
        description="Model one training step of a model with a parallel layout on the"
        " fabric of a design: compute, pipeline bubble, exposed communication and"
        " synchronisation wait, MFU, tokens/s, memory, and the four walls.")
    step.add_argument("design", help="design file (YAML)")
    step_args(step)
    step.add_argument("--target-comm-share", type=float, metavar="F",
                      help="also find the scale-out bandwidth that brings exposed"
                      " communication + wait to at most this share of the step")
    step.add_argument("--sensitivity", action="store_true",
                      help="also move each assumption low and high and show the effect")
    step.add_argument("--no-goodput", action="store_true",
                      help="leave out the goodput section (interruptions, checkpoints)")
    add_goodput_options(step)
    add_step_options(step, COST_OPTIONS)
    workers_arg(step, "the sensitivity's and the goodput's steps")
    step.set_defaults(run=Verb("job_verbs.step"))

    compare = verbs.add_parser(
        "compare", help="the same model and layout rules on two or more designs, side by"
        " side, with BOM, power and capex deltas",
        description="Run the same model and layout rules on two or more designs and"
        " compare step time, walls, communication share, MFU and goodput, and each"
        " design's bill of materials, power and capex with its change from the first.")
    compare.add_argument("designs", nargs="+", metavar="DESIGN",
                         help="design files (two or more; the first is the baseline)")
    step_args(compare)
    add_step_options(compare, COST_OPTIONS)
    add_serve_options(compare, switch=True)
    no_goodput_arg(compare)
    workers_arg(compare, "each design's degraded steps, the designs one after another",
                "1, everything in this process: the fewest fresh pages")
    progress_arg(compare)
    compare.set_defaults(run=Verb("job_verbs.compare"))

    add_scorecard(verbs)

    goodput = verbs.add_parser(
        "goodput", help="interruptions, checkpoint interval, effective time and goodput",
        description="From the parts of a job's footprint and their failure rates: expected"
        " interruptions per day, the Young/Daly checkpoint interval, downtime, the"
        " effective training-time share, throughput while redundant parts are down, and"
        " goodput (tokens/s), with what-ifs (optics, spares, checkpoint bandwidth).")
    goodput.add_argument("design", help="design file (YAML)")
    step_args(goodput)
    add_goodput_options(goodput)
    workers_arg(goodput, "the degraded steps")
    progress_arg(goodput)
    goodput.set_defaults(run=Verb("job_verbs.goodput"))

    scale = verbs.add_parser(
        "scale", help="throughput, scaling efficiency and MFU against accelerator count",
        description="Sweep the accelerator count of a design (DP grows, the rest of the"
        " layout stays) and report throughput, scaling efficiency and MFU.")
    scale.add_argument("design", help="design file (YAML)")
    step_args(scale)
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
    format_arg(draw, tables_dir=False)
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
    format_arg(export, tables_dir=False)
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
    sweep.add_argument("--max-points", type=positive, default=DEFAULT_MAX_SWEEP_POINTS,
                       metavar="N", help="refuse a sweep of more than N points, counted"
                       f" before any runs (default {DEFAULT_MAX_SWEEP_POINTS:,})")
    add_catalog_args(sweep)
    format_arg(sweep, tables_dir=False)
    sweep.set_defaults(run=Verb("job_verbs.sweep"))

    add_check_nccl(verbs)
    add_calibrate(verbs)
    add_check_trace(verbs)
    add_advise(verbs)
    add_decode(verbs)
    add_serve(verbs)

    options = verbs.add_parser(
        "options", help="list the options of a job: sweep key, flag, default and meaning",
        description="List every option of a job (a training step's layout, assumptions"
        " and what-ifs, the goodput model's and decode's) with its sweep-file key,"
        " command-line flag, default, meaning and the model it feeds; step, goodput,"
        " compare, scale, review, advise, plan, decode and sweeps read this one table"
        " (sweeps take no decode option: they run the step).")
    format_arg(options)
    options.set_defaults(run=Verb("job_verbs.options"))

    add_plan(verbs)

    schema = verbs.add_parser(
        "schema", help="print the JSON Schema of design, catalog or sweep files",
        description="Print the JSON Schema (draft 2020-12) of an input format: design"
        " files, catalog files or sweep files. --format json (the default) prints the bare"
        " schema, as editors want it; table, md, csv and parquet list every key with its"
        " type, default and meaning.")
    schema.add_argument("what", choices=["design", "catalog", "sweep"], help="which format")
    format_arg(schema)
    schema.set_defaults(run=Verb("design_verbs.schema"), format="json")
    return parser
