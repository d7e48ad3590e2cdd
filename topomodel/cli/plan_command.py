"""The ``plan`` verb: every valid layout of a model on a design, the best first."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from topomodel.analysis.options import OPTIONS, STEP_OPTIONS
from topomodel.cli.options import add_step_options, inputs_from_args
from topomodel.cli.shared import add_catalog_args, usage, writable
from topomodel.report.output import FORMATS, Report


def _searched() -> tuple[str, ...]:
    from topomodel.plan.space import SEARCHED

    return SEARCHED


def _fixed_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or not value.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. pp=16), got {text!r}")
    return key.strip().replace("-", "_"), value.strip()


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def add_plan_parser(verbs: Any) -> None:
    """Add ``plan`` to the verbs (its flags: the space, the search, and every step
    option the space does not search)."""
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
                      " whole fabric's power)")
    plan.add_argument("--top", type=_limit, default=5, metavar="N",
                      help="layouts to show (default 5)")
    plan.add_argument("--fixed", action="append", type=_fixed_pair, default=[],
                      metavar="KEY=VALUE",
                      help=f"pin a searched dimension ({', '.join(SEARCHED)}); repeatable")
    plan.add_argument("--max-tp", type=_limit, metavar="N", help="largest TP searched")
    plan.add_argument("--max-pp", type=_limit, metavar="N", help="largest PP searched")
    plan.add_argument("--max-cp", type=_limit, default=DEFAULT_MAX_CP, metavar="N",
                      help=f"largest CP searched (default {DEFAULT_MAX_CP})")
    plan.add_argument("--max-ep", type=_limit, metavar="N", help="largest EP searched")
    plan.add_argument("--max-micro-batch", type=_limit, default=DEFAULT_MAX_MICRO_BATCH,
                      metavar="N", help="largest micro-batch searched, sequences (default"
                      f" {DEFAULT_MAX_MICRO_BATCH})")
    plan.add_argument("--max-interleave", type=_limit, default=DEFAULT_MAX_INTERLEAVE,
                      metavar="N", help="largest interleave depth searched (default"
                      f" {DEFAULT_MAX_INTERLEAVE})")
    plan.add_argument("--memory-headroom", type=float, default=0.0, metavar="F",
                      help="share of each accelerator's HBM left free, 0-1 (default 0:"
                      " a layout fits as the step model says)")
    plan.add_argument("--workers", type=int, metavar="N",
                      help="local worker processes (default 1)")
    plan.add_argument("--scheduler", metavar="ADDRESS",
                      help="run on a Dask cluster, e.g. tcp://host:8786")
    plan.add_argument("--no-progress", action="store_true", help="no progress bar")
    plan.add_argument("-o", "--output", metavar="FILE",
                      help="write the ranked layouts to FILE (needed by --format parquet)")
    add_step_options(plan, [k for k in STEP_OPTIONS if k not in SEARCHED])
    add_catalog_args(plan)
    plan.add_argument("--format", choices=FORMATS, default="table",
                      help="output format (default: table; parquet needs -o)")
    plan.set_defaults(run=_cmd_plan, writes_parquet=True)  # -o FILE takes the parquet


def _fixed_values(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """``--fixed`` values read as the step options read them."""
    from topomodel.analysis.options import read_value
    from topomodel.inputs.records import Invalid

    out: dict[str, Any] = {}
    for key, text in pairs:
        if key not in _searched():
            raise usage(f"--fixed {key}: not a searched dimension; choose from"
                         f" {', '.join(_searched())}")
        arg = OPTIONS[key].arg
        value: Any = text
        if arg == "int":
            try:
                value = int(text)
            except ValueError:
                raise usage(f"--fixed {key}={text}: expected a whole number") from None
        elif arg == "bool":
            if text.lower() not in ("true", "false", "on", "off", "1", "0"):
                raise usage(f"--fixed {key}={text}: expected true or false")
            value = text.lower() in ("true", "on", "1")
        try:
            out[key] = read_value(key, value)
        except Invalid as exc:
            raise usage(f"--fixed {key}={text}: {exc.message}") from None
    return out


def _cmd_plan(args: argparse.Namespace) -> Report:
    from topomodel.inputs.parts import Model
    from topomodel.plan.search import PlanJob
    from topomodel.plan.space import PlanSpace
    from topomodel.plan.spread import Whatifs, plan_context, plan_spread
    from topomodel.report.plan import compare_report, plan_report, results_frame

    if args.format == "parquet" and not args.output:
        raise usage("--format parquet writes a file: give -o FILE")
    if args.workers is not None and args.workers < 1:
        raise usage("--workers must be at least 1")
    if args.output:
        writable(args.output)
    inputs = inputs_from_args(args, [k for k in STEP_OPTIONS if k not in _searched()])
    space = PlanSpace(max_tp=args.max_tp, max_pp=args.max_pp, max_cp=args.max_cp,
                      max_ep=args.max_ep, max_micro_batch=args.max_micro_batch,
                      max_interleave=args.max_interleave,
                      fixed=_fixed_values(args.fixed))
    whatifs = Whatifs(inputs.fail, inputs.scaleout_factor)
    found = []
    for path in [args.design, *([args.compare] if args.compare else [])]:
        context = plan_context(path, args.catalog, args.catalog_dir)
        model = context.catalog.get(str(inputs.model), Model)
        job = PlanJob(model, inputs.layout, space, inputs.assumptions,
                      objective=args.objective, top=args.top,
                      headroom=args.memory_headroom, routing=inputs.routing,
                      seed=inputs.seed)
        name = str(context.design_data.get("name") or path) if isinstance(
            context.design_data, dict) else path
        bar = _bar(f"plan {name}", not args.no_progress)
        try:
            found.append(plan_spread(context, job, whatifs=whatifs,
                                     workers=args.workers or 1, scheduler=args.scheduler,
                                     design=name, progress=bar.update if bar else None,
                                     total=bar.reset if bar else None))
        finally:
            if bar is not None:
                bar.close()
        if not found[-1].tally.searched:  # only the limits asked for can empty the space
            pinned = " ".join(f"{key}={value}" for key, value in args.fixed)
            raise usage(f"{path}: no layout to search" + (
                f" with --fixed {pinned}" if pinned else "") + ": every layout uses all the"
                " accelerators (TP x PP x CP x DP) within the --max-* limits")
    report = compare_report(found[0], found[1], args.format) if args.compare else (
        plan_report(found[0], args.format))
    if args.output:
        from topomodel.files import atomic_write

        frame = results_frame(found)
        if args.format == "parquet" or args.output.endswith(".parquet"):
            try:
                import pyarrow  # noqa: F401
            except ImportError:
                raise usage("--format parquet needs pyarrow: pip install pyarrow") from None
            atomic_write(args.output, lambda stream: frame.to_parquet(stream, index=False))
        else:
            atomic_write(args.output,
                         lambda stream: stream.write(frame.to_csv(index=False).encode()))
    if args.format == "parquet":
        args.format = "table"  # what is printed beside the file
    return report


def _bar(name: str, show: bool) -> Any:
    if not show:
        return None
    from tqdm import tqdm

    return tqdm(total=0, desc=name, unit="layout", file=sys.stderr, smoothing=0.05,
                disable=None, dynamic_ncols=True)
