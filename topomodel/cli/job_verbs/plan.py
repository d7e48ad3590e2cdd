"""``topomodel plan DESIGN --model M``: which parallel layout of the model is best on the
design (every valid one searched, ranked by an objective), and why does it beat the
runner-up?"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from topomodel.analysis.options import COST_OPTIONS, OPTIONS, STEP_OPTIONS
from topomodel.cli.options import inputs_from_args
from topomodel.cli.shared import usage, writable
from topomodel.report.output import Report, render


def _searched() -> tuple[str, ...]:
    from topomodel.plan.defaults import SEARCHED

    return SEARCHED


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


def run(args: argparse.Namespace) -> Report:
    from topomodel.inputs.parts import Model
    from topomodel.plan.search import PlanJob
    from topomodel.plan.space import PlanSpace
    from topomodel.plan.spread import Whatifs, plan_context, plan_largest
    from topomodel.report.plan import compare_report, plan_report, results_frame

    if args.format == "parquet" and not args.output:
        raise usage("--format parquet writes a file: give -o FILE")
    if args.accelerators is not None and args.accelerators < 1:
        raise usage("--accelerators must be at least 1")
    if args.workers is not None and args.workers < 1:
        raise usage("--workers must be at least 1")
    if args.output:
        writable(args.output)
        written = output_format(args.output, args.format)  # refused before the search
    inputs = inputs_from_args(args, [*(k for k in STEP_OPTIONS if k not in _searched()),
                                     *COST_OPTIONS])
    space = PlanSpace(max_tp=args.max_tp, max_pp=args.max_pp, max_cp=args.max_cp,
                      max_ep=args.max_ep, max_micro_batch=args.max_micro_batch,
                      max_interleave=args.max_interleave,
                      fixed=_fixed_values(args.fixed))
    whatifs = Whatifs(inputs.fail, inputs.scaleout_factor, inputs.fail_domain)
    found = []
    for path in [args.design, *([args.compare] if args.compare else [])]:
        context = plan_context(path, args.catalog, args.catalog_dir)
        model = context.catalog.get(str(inputs.model), Model)
        job = PlanJob(model, inputs.layout, space, inputs.assumptions,
                      objective=args.objective, top=args.top,
                      headroom=args.memory_headroom, routing=inputs.routing,
                      seed=inputs.seed, accelerators=args.accelerators or 0,
                      cost=inputs.cost)
        name = str(context.design_data.get("name") or path) if isinstance(
            context.design_data, dict) else path
        bar = _bar(f"plan {name}", not args.no_progress)
        try:
            found.append(plan_largest(context, job, whatifs=whatifs,
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

        if written == "json":  # the document --format json prints
            text = render(report, "json") + "\n"
            atomic_write(args.output, lambda stream: stream.write(text.encode()))
            return report
        frame = results_frame(found)
        if written == "parquet":
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


def output_format(path: str, fmt: str) -> str:
    """What ``-o FILE`` holds: ``json`` (the document ``--format json`` prints) for a
    ``.json`` file, ``parquet`` for ``.parquet`` or ``--format parquet``, else the ranked
    rows as ``csv``.

    Examples
    --------
    >>> [output_format(p, "table") for p in ("plan.json", "rows.csv", "r.parquet", "r")]
    ['json', 'csv', 'parquet', 'csv']
    """
    suffix = path.lower().rsplit(".", 1)[-1] if "." in path else ""
    if suffix == "json":
        if fmt == "parquet":
            raise usage(f"{path}: a .json file cannot hold --format parquet's rows")
        return "json"
    return "parquet" if fmt == "parquet" or suffix == "parquet" else "csv"


def _bar(name: str, show: bool) -> Any:
    if not show:
        return None
    from tqdm import tqdm

    return tqdm(total=0, desc=name, unit="layout", file=sys.stderr, smoothing=0.05,
                disable=None, dynamic_ncols=True)
