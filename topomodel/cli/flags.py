"""What the verbs' parsers share: counts, the common flags and :class:`Verb` (a verb's
``run``, importing its module only when it runs)."""

from __future__ import annotations

import argparse
import importlib

from topomodel.cli.options import add_step_options
from topomodel.cli.shared import add_catalog_args
from topomodel.report.output import FORMATS, Report

Verbs = argparse._SubParsersAction  # the verb table build_parser adds to

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


def count(text: str) -> int:
    """A count of at least 0 (``--top``)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 0, got {text!r}")
    return value


def positive(text: str) -> int:
    """A count of at least 1 (``--max-points``, ``--workers``)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def progress_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress lines on stderr (shown only when stderr is a"
                        " terminal)")


def no_goodput_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-goodput", action="store_true",
                        help="leave out the goodput (interruptions, checkpoints, effective"
                        " time): the failed-part steps it runs are most of a large job's"
                        " time")


def workers_arg(parser: argparse.ArgumentParser, what: str,
                default: str = "every core; 1 runs everything in this process") -> None:
    parser.add_argument("--workers", type=positive, metavar="N",
                        help=f"worker processes for {what} (default: {default}; the"
                        " results are the same)")


def format_arg(parser: argparse.ArgumentParser, *, tables_dir: bool = True) -> None:
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


def step_args(step: argparse.ArgumentParser, *, model_required: bool = True,
               tables_dir: bool = True) -> None:
    """The step options (model, layout, assumptions, what-ifs), from the one table."""
    add_step_options(step, model_required=model_required)
    add_catalog_args(step)
    format_arg(step, tables_dir=tables_dir)


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
