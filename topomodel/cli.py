"""The ``topomodel`` command: parse, call one library function, render, and turn every
input error into one line per problem with exit status 2."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from topomodel.errors import InputError, TopomodelError
from topomodel.output import FORMATS, Report, Table, render

EXIT_INPUT_ERROR = 2


def _catalog_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--catalog", action="append", default=[], metavar="FILE",
                        help="add a catalog file (repeatable; its entries may override"
                        " built-in ones)")


def _format_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=FORMATS, default="table",
                        help="output format (default: table)")


def _cmd_units(args: argparse.Namespace) -> Report:
    from topomodel.units import compare, convert, parse, split_direction

    words = args.quantity
    if words[0] == "compare":
        if len(words) != 3:
            raise _usage("units compare takes two quantities: units compare A B")
        c = compare(words[1], words[2])
        row = {"a": c.a, "b": c.b, "ratio": round(c.ratio, 6),
               "ratio_per_direction": round(c.ratio_per_direction, 6)}
        text = f"{c.a} is {c.ratio:.4g}x {c.b}"
        return Report("units_compare", row, warnings=[c.warning] if c.warning else [],
                      text=text)
    if len(words) != 1:
        raise _usage("give one quantity, e.g. units '900 GB/s' --to Gb/s")
    body, direction = split_direction(words[0])
    targets = [args.to] if args.to else _default_targets(body)
    results = [convert(words[0], unit) for unit in targets]
    marker = {"bidir": " bidir", "per_direction": " /dir", None: ""}[direction]
    text = " = ".join([words[0]] + [f"{v:.6g} {u}{marker}" for v, u in results])
    data: dict[str, object] = {"input": words[0], "direction": direction,
                               "values": [{"value": v, "unit": u} for v, u in results]}
    if direction == "bidir":
        rate_Bps = parse(body, "rate") / 2
        text += f"\n  per direction: {rate_Bps / 1e9:.6g} GB/s = {rate_Bps * 8 / 1e9:.6g} Gb/s"
        data["per_direction_Bps"] = rate_Bps
    rows = [{"value": v, "unit": u} for v, u in results]
    return Report("units", data, [Table(words[0], rows)], text=text)


def _default_targets(body: str) -> list[str]:
    """Units people would compare a quantity in, with prefixes that suit its size."""
    from topomodel.units import KINDS, format_si, quantity, registry

    q = quantity(body)
    for kind in KINDS.values():
        if q.dimensionality == registry().get_dimensionality(kind.dimensionality):
            canonical = float(q.to(kind.canonical).magnitude)
            if kind.name == "rate":
                return [_prefixed(canonical, "B/s"), _prefixed(canonical * 8, "b/s"),
                        _prefixed(canonical, "iB/s")]
            if kind.name == "size":
                return [_prefixed(canonical, "B"), _prefixed(canonical, "iB"),
                        _prefixed(canonical * 8, "b")]
            if kind.name in ("time", "power", "length", "compute_rate"):
                return [format_si(canonical, kind.canonical).split(" ", 1)[1]]
            return [kind.canonical]
    return [str(q.units)]


def _prefixed(value: float, unit: str) -> str:
    """``unit`` with the decimal (or, for ``iB``, binary) prefix that suits ``value``."""
    if unit.startswith("i"):
        for prefix, factor in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if value >= factor:
                return prefix + unit[1:]
        return unit[1:]
    from topomodel.units import format_si

    return format_si(value, unit).split(" ", 1)[1]


def _cmd_catalog_list(args: argparse.Namespace) -> Report:
    from topomodel.catalog import load_catalog
    from topomodel.catalog_views import catalog_list

    return catalog_list(load_catalog(args.catalog), args.kind)


def _cmd_catalog_show(args: argparse.Namespace) -> Report:
    from topomodel.catalog import load_catalog
    from topomodel.catalog_views import catalog_show

    return catalog_show(load_catalog(args.catalog), args.id)


def _cmd_build(args: argparse.Namespace) -> Report:
    from topomodel.bisection import bisection
    from topomodel.build import build_fabric
    from topomodel.build_report import build_report
    from topomodel.design import load_design

    design, catalog = load_design(args.design, extra_catalogs=args.catalog)
    fabric = build_fabric(design, catalog)
    limit = args.max_flow_nodes
    return build_report(fabric, bisection_result=bisection(fabric, max_flow_node_limit=limit))


def _cmd_route(args: argparse.Namespace) -> Report:
    from topomodel.build import build_fabric, with_failures
    from topomodel.design import load_design
    from topomodel.route_report import route_report, run_collective
    from topomodel.timing import TimeModel
    from topomodel.units import parse

    design, catalog = load_design(args.design, extra_catalogs=args.catalog)
    fabric = build_fabric(design, catalog)
    if args.fail or args.fail_link:
        fabric = with_failures(fabric, args.fail, args.fail_link)
    model = TimeModel(**({"per_message_overhead_s": parse(args.overhead, "time")}
                         if args.overhead else {}),
                      efficiency=dict(_efficiency(e) for e in args.efficiency))
    run = run_collective(fabric, _collective(args.collective),
                         parse(args.size, "size"), args.group or ["all"],
                         algorithm=args.algorithm, routing=args.routing, seed=args.seed,
                         router=args.router, model=model)
    return route_report(fabric, run, routing=args.routing, top=args.top, model=model)


def _fabric_input(args: argparse.Namespace, design_file: str) -> Any:
    """The fabric of a design with the what-ifs of the step-like options applied."""
    from topomodel.build import build_fabric, with_failures
    from topomodel.design import load_design

    design, catalog = load_design(design_file, extra_catalogs=args.catalog)
    fabric = build_fabric(design, catalog)
    if args.fail:
        fabric = with_failures(fabric, args.fail)
    if args.scaleout_factor != 1.0:
        from topomodel.studies import scale_scaleout

        if args.scaleout_factor <= 0:
            raise _usage("--scaleout-factor must be greater than zero")
        fabric = scale_scaleout(fabric, args.scaleout_factor)
    return fabric


def _collective(name: str) -> str:
    """A collective's name as the library spells it (``all-reduce`` -> ``allreduce``)."""
    return name.lower().replace("_", "").replace("-", "")


def _step_inputs(args: argparse.Namespace, design_file: str) -> tuple[Any, Any, Any, Any]:
    """Fabric, model, layout and assumptions from the step-like options."""
    from dataclasses import replace

    from topomodel.catalog import Model
    from topomodel.step import Layout, StepAssumptions
    from topomodel.studies import fill_dp
    from topomodel.timing import TimeModel
    from topomodel.units import parse

    fabric = _fabric_input(args, design_file)
    model = fabric.catalog.get(args.model, Model)
    layout = Layout(tp=args.tp, pp=args.pp, dp=max(args.dp, 1), ep=args.ep, cp=args.cp,
                    micro_batch=args.micro_batch, global_batch=args.global_batch,
                    seq=args.seq, sequence_parallel=not args.no_sequence_parallel,
                    dp_mode=args.dp_mode, interleave=args.interleave,
                    recompute=args.recompute, order=args.order)
    if not args.dp:
        layout = fill_dp(fabric.accelerator_count, layout)
    base = StepAssumptions()
    overlap = dict(base.overlap)
    for text in args.overlap:
        kind, fraction = _efficiency(text)
        overlap[kind] = fraction
    assumptions = replace(
        base, overlap=overlap, grad_dtype=args.grad_precision,
        compute_efficiency=args.compute_efficiency or base.compute_efficiency,
        hot_expert_factor=args.hot_expert or base.hot_expert_factor,
        straggler_share=_share(args.straggler_share, "--straggler-share"),
        straggler_slowdown=_non_negative(args.straggler_slowdown, "--straggler-slowdown"),
        dp_bucket_bytes=parse(args.bucket, "size") if args.bucket else base.dp_bucket_bytes,
        jitter_cv=base.jitter_cv if args.jitter_cv is None else _non_negative(
            args.jitter_cv, "--jitter-cv"),
        time=TimeModel(efficiency=dict(_efficiency(e) for e in args.efficiency),
                       **({"per_message_overhead_s": parse(args.overhead, "time")}
                          if args.overhead else {})))
    return fabric, model, layout, assumptions


def _cmd_review(args: argparse.Namespace) -> Report:
    from topomodel.review import collect_review
    from topomodel.review_render import write_review
    from topomodel.units import parse

    sizes = [parse(text, "size") for text in args.size]
    if any(size <= 0 for size in sizes):
        raise _usage("--size must be greater than zero")
    goodput = None
    if args.model:
        fabric, model, layout, assumptions = _step_inputs(args, args.design)
        timing = assumptions.time
        goodput = _goodput_assumptions(args)
    else:  # the fabric only: the same what-ifs as step, without the model
        from topomodel.timing import TimeModel

        fabric = _fabric_input(args, args.design)
        model = layout = assumptions = None
        timing = TimeModel(efficiency=dict(_efficiency(e) for e in args.efficiency))
    review = collect_review(fabric, model=model, layout=layout, assumptions=assumptions,
                            time_model=timing, routing=args.routing,
                            sizes_bytes=sizes or None, failed=args.fail,
                            goodput_assumptions=goodput)
    try:
        files = write_review(review, args.output)
    except OSError as exc:
        raise _usage(f"{args.output}: cannot write: {exc.strerror or exc}") from None
    rows = [*review.headline, {"item": "report", "value": str(files[0])}]
    data = {"directory": args.output, "files": [str(f) for f in files],
            "summary": review.data["summary"]}
    return Report("review", data, [Table(review.title, rows)], review.warnings)


def _cmd_step(args: argparse.Namespace) -> Report:
    from topomodel.output import Table
    from topomodel.step import step_report, step_time
    from topomodel.studies import required_scaleout_factor, sensitivity

    fabric, model, layout, assumptions = _step_inputs(args, args.design)
    result = step_time(fabric, model, layout, assumptions, routing=args.routing)
    report = step_report(result, assumptions,
                         design_name=fabric.design.name or fabric.design.file)
    tables, data = list(report.tables), dict(report.data)
    if not args.no_goodput:
        # the degradation is bounded here; `topomodel goodput` re-routes it
        goodput_tables, goodput_data = _goodput(args, fabric, model, layout, assumptions,
                                                result, route_degradation=False)
        tables += goodput_tables
        data["goodput"] = goodput_data
    if args.target_comm_share:
        factor, reached = required_scaleout_factor(fabric, model, layout, assumptions,
                                                   target_share=args.target_comm_share)
        from topomodel.bisection import injection_Bps
        from topomodel.units import format_rate

        now = injection_Bps(fabric)
        text = ("not reached even at 64x" if factor is None else
                f"{factor:.3g}x today's: {format_rate(factor * now)} per accelerator")
        tables.append(Table(f"Scale-out bandwidth for a communication share of at most"
                            f" {args.target_comm_share:.0%}", [
                                {"item": "today", "value": format_rate(now)},
                                {"item": "required", "value": text},
                                {"item": "MFU there", "value": f"{reached.mfu:.1%}"}]))
        data["required_scaleout"] = {"target_comm_share": args.target_comm_share,
                                     "factor": factor, "injection_Bps": now,
                                     "required_Bps": None if factor is None
                                     else factor * now}
    if args.sensitivity:
        rows = sensitivity(fabric, model, layout, assumptions)
        tables.append(Table("Sensitivity of the communication share", [
            {"assumption": r.assumption, "low": f"{r.low_value:g}", "high": f"{r.high_value:g}",
             "share at low": f"{r.low:.1%}", "base": f"{r.base:.1%}",
             "share at high": f"{r.high:.1%}"} for r in rows]))
        data["sensitivity"] = [r.__dict__ for r in rows]
    return Report(report.kind, data, tables, report.warnings)


def _goodput(args: argparse.Namespace, fabric: Any, model: Any, layout: Any,
             assumptions: Any, result: Any, *,
             route_degradation: bool = True) -> tuple[list[Any], dict[str, Any]]:
    """The goodput tables and JSON of a step, from the goodput options."""
    from topomodel.goodput import goodput_section

    return goodput_section(fabric, model, layout, assumptions, result,
                           _goodput_assumptions(args), routing=args.routing,
                           route_degradation=route_degradation)


_GOODPUT_OPTIONS = (("checkpoint_size", "checkpoint_bytes", "size"),
                    ("storage_bandwidth", "storage_Bps", "rate"),
                    ("detection_time", "detection_s", "time"),
                    ("restart_time", "restart_s", "time"),
                    ("repair_time", "repair_s", "time"))


def _goodput_assumptions(args: argparse.Namespace) -> Any:
    """GoodputAssumptions from the goodput options (defaults for those not given)."""
    from topomodel.goodput import GoodputAssumptions
    from topomodel.units import parse

    if args.spare_systems is not None and args.spare_systems < 0:
        raise _usage("--spare-systems cannot be negative")
    given = {field: parse(getattr(args, option), kind)
             for option, field, kind in _GOODPUT_OPTIONS if getattr(args, option)}
    return GoodputAssumptions(spare_systems=args.spare_systems, **given)


def _cmd_goodput(args: argparse.Namespace) -> Report:
    from topomodel.output import Table
    from topomodel.step import step_time
    from topomodel.units import format_si

    fabric, model, layout, assumptions = _step_inputs(args, args.design)
    result = step_time(fabric, model, layout, assumptions, routing=args.routing)
    tables, data = _goodput(args, fabric, model, layout, assumptions, result)
    lay, name = result.layout, fabric.design.name or fabric.design.file
    job = Table("Job", [
        {"item": "design / model", "value": f"{name} / {result.model}"},
        {"item": "layout", "value": f"TP {lay.tp} x PP {lay.pp} x DP {lay.dp} x CP {lay.cp}"
         f" ({lay.world} accelerators)"},
        {"item": "step time", "value": format_si(result.step_time_s, "s")}])
    data = {"design": name, "model": result.model, "accelerators": lay.world,
            "step_time_s": result.step_time_s, **data}
    return Report("goodput", data, [job, *tables], list(result.warnings))


def _non_negative(value: float, option: str) -> float:
    if not 0 <= value < float("inf"):  # also refuses NaN
        raise _usage(f"{option} is a finite number of at least 0, got {value:g}")
    return value


def _share(value: float, option: str) -> float:
    if not 0 <= value <= 1:
        raise _usage(f"{option} is a share between 0 and 1, got {value:g}")
    return value


def _cmd_compare(args: argparse.Namespace) -> Report:
    from topomodel.goodput import job_goodput
    from topomodel.output import Table
    from topomodel.step import StepResult, step_json, step_time
    from topomodel.units import format_si

    results, goodputs = [], []
    for path in (args.design_a, args.design_b):
        fabric, model, layout, assumptions = _step_inputs(args, path)
        result = step_time(fabric, model, layout, assumptions, routing=args.routing)
        results.append((fabric.design.name or path, result))
        goodputs.append(job_goodput(fabric, model, layout, assumptions, result,
                                    routing=args.routing, route_degradation=False))
    metrics: list[tuple[str, Callable[[StepResult], str]]] = [
               ("accelerators", lambda r: f"{r.layout.world:,}"),
               ("layout", lambda r: f"TP{r.layout.tp} PP{r.layout.pp} DP{r.layout.dp}"
                f" EP{r.layout.ep} CP{r.layout.cp}"),
               ("step time", lambda r: format_si(r.step_time_s, "s")),
               ("compute", lambda r: format_si(r.compute_s, "s")),
               ("bubble", lambda r: format_si(r.bubble_s, "s")),
               ("exposed communication", lambda r: format_si(r.exposed_comm_s, "s")),
               ("wait", lambda r: format_si(r.wait_s, "s")),
               ("bandwidth wall", lambda r: format_si(r.walls["bandwidth_s"], "s")),
               ("latency wall", lambda r: format_si(r.walls["latency_s"], "s")),
               ("topology wall", lambda r: format_si(r.walls["topology_s"], "s")),
               ("sync wall", lambda r: format_si(r.walls["sync_s"], "s")),
               ("communication share", lambda r: f"{r.comm_share:.1%}"),
               ("MFU", lambda r: f"{r.mfu:.1%}"),
               ("tokens/s", lambda r: f"{r.tokens_per_s:,.0f}")]
    (name_a, a), (name_b, b) = results
    rows = [{"metric": label, name_a: fn(a), name_b: fn(b)} for label, fn in metrics]
    rows.append({"metric": "MFU ratio (B / A)", name_a: "", name_b: f"{b.mfu / a.mfu:.3f}"})
    good_a, good_b = goodputs
    for label, key, fmt in (("interruptions/day", "interruptions_per_day", "{:.3g}"),
                            ("effective training time", "effective_time_fraction", "{:.1%}"),
                            ("goodput tokens/s", "goodput_tokens_per_s", "{:,.0f}")):
        rows.append({"metric": label, name_a: fmt.format(getattr(good_a, key)),
                     name_b: fmt.format(getattr(good_b, key))})
    data = {"a": {"design": name_a, **step_json(a, assumptions),
                  "goodput": _goodput_summary(good_a)},
            "b": {"design": name_b, **step_json(b, assumptions),
                  "goodput": _goodput_summary(good_b)},
            "mfu_ratio": b.mfu / a.mfu}
    return Report("compare", data, [Table("Compare", rows)],
                  [f"{n}: {w}" for n, r in results for w in r.warnings])


def _goodput_summary(result: Any) -> dict[str, float]:
    return {"interruptions_per_day": result.interruptions_per_day,
            "effective_time_fraction": result.effective_time_fraction,
            "goodput_tokens_per_s": result.goodput_tokens_per_s}


def _cmd_scale(args: argparse.Namespace) -> Report:
    from topomodel.catalog import Model
    from topomodel.design import load_design
    from topomodel.output import Table
    from topomodel.studies import scale_curve

    if args.plot:  # refused now, not after the curve
        from topomodel.draw import figure_format

        figure_format(args.plot)
        _writable(args.plot)
    _, model, layout, assumptions = _step_inputs(args, args.design)
    design, catalog = load_design(args.design, extra_catalogs=args.catalog)
    model = catalog.get(args.model, Model)
    total = _accelerators(design, catalog)
    counts = args.counts or [c for c in (128, 1024, 4096, 16384, 65536, 131072) if c < total]
    counts = sorted({*counts, total})
    points = scale_curve(design, catalog, model, layout, counts, assumptions)
    rows = [{"accelerators": p.accelerators, "DP": p.result.layout.dp,
             "tokens/s": f"{p.result.tokens_per_s:,.0f}",
             "scaling efficiency": f"{p.efficiency:.1%}", "MFU": f"{p.result.mfu:.1%}",
             "communication share": f"{p.result.comm_share:.1%}"} for p in points]
    data = {"points": [{"accelerators": p.accelerators, "tokens_per_s": p.result.tokens_per_s,
                        "scaling_efficiency": p.efficiency, "mfu": p.result.mfu,
                        "comm_share": p.result.comm_share} for p in points]}
    if args.plot:
        from topomodel.draw import save_figure, scaling_figure

        save_figure(scaling_figure(points, title=f"{design.name or args.design}: {model.id}"),
                    args.plot)
        data["plot"] = args.plot
    return Report("scale", data, [Table("Scaling", rows)])


def _cmd_draw(args: argparse.Namespace) -> Report:
    from topomodel.build import build_fabric
    from topomodel.design import load_design
    from topomodel.draw import (
        figure_format,
        resolve_detail,
        save_figure,
        tier_utilisation_figure,
        topology_figure,
    )
    from topomodel.units import format_si, format_size, parse

    figure_format(args.output)  # a bad suffix fails before any work
    if args.what == "tiers" and not args.route:
        raise _usage("--what tiers needs a load: add --route COLLECTIVE --size SIZE")
    if args.route and not args.size:
        raise _usage("--route needs --size, e.g. --size '1 GiB'")
    design, catalog = load_design(args.design, extra_catalogs=args.catalog)
    fabric = build_fabric(design, catalog)
    name = design.name or args.design
    data: dict[str, Any] = {"design": name, "file": args.output, "what": args.what}
    utilisation, title, tiers = None, args.title, []
    if args.route:
        from topomodel.route_report import route_report, run_collective

        run = run_collective(fabric, _collective(args.route),
                             parse(args.size, "size"), args.group or ["all"],
                             algorithm=args.algorithm, routing=args.routing)
        utilisation = run.timing.link_busy_s / (run.time_s or 1.0)
        title = title or (f"{name}: {run.collective} ({run.algorithm}) of"
                          f" {format_size(run.size_bytes)}, {format_si(run.time_s, 's')}")
        data.update(collective=run.collective, algorithm=run.algorithm,
                    size_bytes=run.size_bytes, time_s=run.time_s,
                    peak_utilization=float(utilisation.max(initial=0.0)))
        if args.what == "tiers":
            tiers = route_report(fabric, run, routing=args.routing).data["tiers"]
    if args.what == "tiers":
        figure = tier_utilisation_figure(tiers, title=title)
    else:
        data["detail"] = resolve_detail(fabric, args.detail)
        figure = topology_figure(fabric, link_utilisation=utilisation, detail=args.detail,
                                 title=title)
    try:
        path = save_figure(figure, args.output)
    except OSError as exc:
        raise _usage(f"{args.output}: cannot write: {exc.strerror or exc}") from None
    return Report("draw", data, text=f"wrote {path}")


def _accelerators(design: Any, catalog: Any) -> int:
    from topomodel.catalog import System

    per = catalog.get(design.system, System).accelerators
    return int(design.accelerators or design.systems * per)


def _efficiency(text: str) -> tuple[str, float]:
    tier, _, value = text.partition("=")
    try:
        fraction = float(value)
    except ValueError:
        fraction = -1.0
    if not tier or not 0 < fraction <= 1:
        raise _usage(f"expected NAME=FRACTION with a fraction in (0, 1], got {text!r}")
    return tier, fraction


def _cmd_export(args: argparse.Namespace) -> Report:
    from topomodel.build import build_fabric
    from topomodel.design import load_design
    from topomodel.export import export_fabric

    design, catalog = load_design(args.design, extra_catalogs=args.catalog)
    fabric = build_fabric(design, catalog)
    try:
        files = export_fabric(fabric, args.to, args.output)
    except OSError as exc:
        raise _usage(f"{args.output}: cannot write: {exc.strerror or exc}") from None
    names = [str(f) for f in files]
    return Report("export", {"format": args.to, "files": names,
                             "nodes": len(fabric.nodes), "links": len(fabric.links)},
                  text="\n".join(f"wrote {n}" for n in names))


def _cmd_sweep(args: argparse.Namespace) -> Report:
    from pathlib import Path

    from topomodel.sweep import (
        dry_run_report,
        journal_path,
        load_sweep,
        pareto_objectives,
        results_format_for,
        run_sweep,
        sweep_report,
    )

    sweep = load_sweep(args.sweep, extra_catalogs=args.catalog)
    if args.dry_run:
        return dry_run_report(sweep)
    if not args.output:
        raise _usage("give the results file: -o RESULTS (.parquet or .csv)")
    results_format_for(args.output, args.results_format)  # refused before anything runs
    pareto = pareto_objectives(sweep, args.pareto)
    if args.plot and pareto is None:
        raise _usage("--plot draws the Pareto front: give --pareto X Y (or pareto: in the"
                     " sweep file)")
    if args.plot and Path(args.plot).suffix.lower() not in (".png", ".svg", ".pdf"):
        raise _usage(f"{args.plot}: the plot is a .png, .svg or .pdf file")
    if args.workers is not None and args.workers < 1:
        raise _usage("--workers must be at least 1")
    for path in (args.output, args.plot):  # refused now, not after the whole sweep
        if path:
            _writable(path)
    try:
        outcome = run_sweep(sweep, args.output, workers=args.workers,
                            scheduler=args.scheduler, resume=args.resume or args.retry_failed,
                            overwrite=args.overwrite, results_format=args.results_format,
                            retry_failed=args.retry_failed)
    except KeyboardInterrupt:
        print(f"topomodel: interrupted: finished points are kept in"
              f" {journal_path(args.output)}; run again with --resume to go on",
              file=sys.stderr)
        raise SystemExit(130) from None
    return sweep_report(outcome, pareto=pareto, plot=args.plot)


def _writable(path: str) -> None:
    """Refuse an output file path that is a folder or whose folder cannot be made."""
    from pathlib import Path

    target = Path(path)
    if target.is_dir():
        raise _usage(f"{path}: is a folder; give a file name")
    target.parent.mkdir(parents=True, exist_ok=True)  # OSError: reported by main
    if not os.access(target.parent, os.W_OK):
        raise _usage(f"{target.parent}: cannot write there")


def _cmd_schema(args: argparse.Namespace) -> Report:
    from topomodel.design_schema import design_schema

    schema = design_schema()
    return Report("schema", schema, text=__import__("json").dumps(schema, indent=2))


def _usage(message: str) -> TopomodelError:
    from topomodel.errors import UsageError

    return UsageError(message)


def _step_args(step: argparse.ArgumentParser) -> None:
    """Options shared by step, compare and scale: model, layout, what-ifs."""
    step.add_argument("--model", required=True, help="model id from the catalog")
    for name in ("tp", "pp", "ep", "cp"):
        step.add_argument(f"--{name}", type=int, default=1,
                          help=f"{name.upper()} degree (default 1)")
    step.add_argument("--dp", type=int, default=0,
                      help="DP degree (default: fill the design's accelerators)")
    step.add_argument("--micro-batch", type=int, default=1, help="sequences per microbatch")
    step.add_argument("--global-batch", type=int, default=0,
                      help="sequences per step (default dp x micro-batch x 4 x pp)")
    step.add_argument("--seq", type=int, default=0, help="tokens per sequence")
    step.add_argument("--no-sequence-parallel", action="store_true",
                      help="TP all-reduces instead of sequence-parallel gather/scatter")
    step.add_argument("--dp-mode", default="allreduce", choices=["allreduce", "zero"],
                      help="gradient all-reduce, or ZeRO/FSDP reduce-scatter + all-gather")
    step.add_argument("--interleave", type=int, default=1,
                      help="virtual pipeline stages per rank (interleaved 1F1B)")
    step.add_argument("--recompute", action="store_true", help="activation recomputation")
    step.add_argument("--order", default="tp,cp,dp,pp",
                      help="rank placement, innermost dimension first (default tp,cp,dp,pp)")
    step.add_argument("--grad-precision", default="bf16",
                      choices=["fp32", "bf16", "fp16", "fp8", "int8"],
                      help="gradient communication precision (default bf16)")
    step.add_argument("--overlap", action="append", default=[], metavar="KIND=F",
                      help="overlapped fraction of a kind (tp, cp, ep, pp, dp), e.g. dp=0.9")
    step.add_argument("--compute-efficiency", type=float, default=0.0,
                      help="achieved / peak FLOP/s on compute (default 0.6)")
    step.add_argument("--hot-expert", type=float, default=0.0,
                      help="busiest expert's load / mean (default 1.1)")
    step.add_argument("--efficiency", action="append", default=[], metavar="TIER=F",
                      help="effective/nominal rate of a link tier, e.g. leaf=0.96")
    step.add_argument("--bucket", metavar="SIZE",
                      help="DP gradient bucket size with a unit (default 40 MB)")
    step.add_argument("--scaleout-factor", type=float, default=1.0, metavar="F",
                      help="what-if: every scale-out link F times faster (e.g. 2 for"
                      " 800G NICs instead of 400G)")
    step.add_argument("--routing", default="ecmp", choices=["ecmp", "hash", "dmodk"],
                      help="routing policy (default ecmp)")
    step.add_argument("--fail", action="append", default=[], metavar="NODE",
                      help="fail a node by name; repeatable")
    step.add_argument("--jitter-cv", type=float, metavar="F",
                      help="per-rank compute time variation per step (default 0.01)")
    step.add_argument("--overhead", metavar="TIME",
                      help="per-message software overhead (default 5 us)")
    step.add_argument("--straggler-share", type=float, default=0.0, metavar="F",
                      help="share of accelerators that run slow (default 0)")
    step.add_argument("--straggler-slowdown", type=float, default=0.0, metavar="F",
                      help="a slow accelerator's extra compute time, e.g. 0.1 (default 0)")
    _catalog_args(step)
    _format_arg(step)


def _goodput_args(parser: argparse.ArgumentParser) -> None:
    """Options of the goodput model (step and goodput)."""
    parser.add_argument("--checkpoint-size", metavar="SIZE",
                        help="checkpoint size with a unit (default: 14 bytes per parameter)")
    parser.add_argument("--storage-bandwidth", metavar="RATE",
                        help="aggregate checkpoint write bandwidth (default 2 TB/s)")
    parser.add_argument("--detection-time", metavar="TIME",
                        help="time to notice a failure (default 2 min)")
    parser.add_argument("--restart-time", metavar="TIME",
                        help="time to restart from a checkpoint (default 8 min)")
    parser.add_argument("--repair-time", metavar="TIME",
                        help="time a failed system is out of the pool (default 24 h)")
    parser.add_argument("--spare-systems", type=int, metavar="N",
                        help="hot spare systems (default 2%% of the job's, rounded up)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every verb (each has help text; a test checks it)."""
    parser = argparse.ArgumentParser(
        prog="topomodel",
        description="Cluster-network topology and link-budget modeler for AI training"
        " clusters.")
    from topomodel import __version__

    parser.add_argument("--version", action="version", version=f"topomodel {__version__}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    units = verbs.add_parser(
        "units", help="convert or compare quantities with explicit units",
        description="Convert a quantity ('900 GB/s' --to Gb/s) or compare two"
        " ('units compare \"900 GB/s bidir\" \"400 Gb/s /dir\"').")
    units.add_argument("quantity", nargs="+", help="a quantity, or: compare A B")
    units.add_argument("--to", help="target unit, e.g. Gb/s")
    _format_arg(units)
    units.set_defaults(run=_cmd_units)

    catalog = verbs.add_parser("catalog", help="browse the hardware catalog",
                               description="Browse the hardware catalog.")
    catalog_verbs = catalog.add_subparsers(dest="catalog_verb", metavar="ACTION", required=True)
    listing = catalog_verbs.add_parser("list", help="list catalog entries",
                                       description="List catalog entries.")
    listing.add_argument("--kind", help="only entries of this kind (e.g. switch, nic)")
    _catalog_args(listing)
    _format_arg(listing)
    listing.set_defaults(run=_cmd_catalog_list)
    show = catalog_verbs.add_parser("show", help="show one entry with every figure",
                                    description="Show one catalog entry with every figure.")
    show.add_argument("id", help="entry id, e.g. qm9700")
    _catalog_args(show)
    _format_arg(show)
    show.set_defaults(run=_cmd_catalog_show)

    build = verbs.add_parser(
        "build", help="build a design's fabric: tiers, bisection, BOM, power, optics",
        description="Build the fabric of a design file and report per-tier capacity,"
        " bisection, bill of materials, power and the optical link budget.")
    build.add_argument("design", help="design file (YAML)")
    build.add_argument("--max-flow-nodes", type=int, default=20_000, metavar="N",
                       help="run the exact max-flow bisection check on fabrics of at most"
                       " N nodes (default 20000)")
    _catalog_args(build)
    _format_arg(build)
    build.set_defaults(run=_cmd_build)

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
                       help="ring, tree, rhd, direct, pairwise, hierarchical, innetwork, or"
                       " auto (fastest; default)")
    route.add_argument("--routing", default="ecmp", choices=["ecmp", "hash", "dmodk"],
                       help="ECMP even split (default), ECMP by seeded hash, or d-mod-k")
    route.add_argument("--seed", type=int, default=0, help="hash seed (default 0)")
    route.add_argument("--router", default="auto", choices=["auto", "general", "structured"],
                       help="router implementation (default: structured where it applies)")
    route.add_argument("--fail", action="append", default=[], metavar="NODE",
                       help="fail a node (switch, NIC, accelerator) by name; repeatable")
    route.add_argument("--fail-link", action="append", default=[], metavar="'A -- B'",
                       help="fail the link between two named nodes; repeatable")
    route.add_argument("--efficiency", action="append", default=[], metavar="TIER=F",
                       help="effective/nominal rate of a link tier, e.g. leaf=0.96")
    route.add_argument("--overhead", metavar="TIME",
                       help="per-message software overhead (default 5 us)")
    route.add_argument("--top", type=int, default=10, help="hotspots to list (default 10)")
    _catalog_args(route)
    _format_arg(route)
    route.set_defaults(run=_cmd_route)

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
    _step_args(review)
    _goodput_args(review)
    for action in review._actions:
        if action.dest == "model":
            action.required = False
            action.help = "model id from the catalog (optional: adds the training step)"
    review.set_defaults(run=_cmd_review)

    step = verbs.add_parser(
        "step", help="one training step: compute, exposed comm, wait, MFU, four walls",
        description="Model one training step of a model with a parallel layout on the"
        " fabric of a design: compute, pipeline bubble, exposed communication and"
        " synchronisation wait, MFU, tokens/s, memory, and the four walls.")
    step.add_argument("design", help="design file (YAML)")
    _step_args(step)
    step.add_argument("--target-comm-share", type=float, default=0.0, metavar="F",
                      help="also find the scale-out bandwidth that brings exposed"
                      " communication + wait to at most this share of the step")
    step.add_argument("--sensitivity", action="store_true",
                      help="also move each assumption low and high and show the effect")
    step.add_argument("--no-goodput", action="store_true",
                      help="leave out the goodput section (interruptions, checkpoints)")
    _goodput_args(step)
    step.set_defaults(run=_cmd_step)

    compare = verbs.add_parser(
        "compare", help="the same model and layout rules on two designs, side by side",
        description="Run the same model and layout rules on two designs and compare"
        " step time, walls, communication share and MFU.")
    compare.add_argument("design_a", help="first design file")
    compare.add_argument("design_b", help="second design file")
    _step_args(compare)
    compare.set_defaults(run=_cmd_compare)

    goodput = verbs.add_parser(
        "goodput", help="interruptions, checkpoint interval, effective time and goodput",
        description="From the parts of a job's footprint and their failure rates: expected"
        " interruptions per day, the Young/Daly checkpoint interval, downtime, the"
        " effective training-time share, throughput while redundant parts are down, and"
        " goodput (tokens/s), with what-ifs (optics, spares, checkpoint bandwidth).")
    goodput.add_argument("design", help="design file (YAML)")
    _step_args(goodput)
    _goodput_args(goodput)
    goodput.set_defaults(run=_cmd_goodput)

    scale = verbs.add_parser(
        "scale", help="throughput, scaling efficiency and MFU against accelerator count",
        description="Sweep the accelerator count of a design (DP grows, the rest of the"
        " layout stays) and report throughput, scaling efficiency and MFU.")
    scale.add_argument("design", help="design file (YAML)")
    _step_args(scale)
    scale.add_argument("--counts", type=int, nargs="+", metavar="N",
                       help="accelerator counts (default 128, 1024, 4096, ... up to the"
                       " design's size)")
    scale.add_argument("--plot", metavar="FILE", help="write the scaling curve (PNG or SVG)")
    scale.set_defaults(run=_cmd_scale)

    draw = verbs.add_parser(
        "draw", help="draw the topology (PNG or SVG); with --route, link load as colour",
        description="Draw a design's tiered topology to a PNG or SVG file (by the"
        " suffix): node by node for small fabrics, one box per tier and group of"
        " scale-up domains for large ones, link bundles labelled cables x rate. With"
        " --route, run one collective and colour the links by utilisation; --what tiers"
        " draws its per-tier utilisation bars instead.")
    draw.add_argument("design", help="design file (YAML)")
    draw.add_argument("-o", "--output", required=True, metavar="FILE",
                      help="image file ending in .png or .svg")
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
    draw.add_argument("--routing", default="ecmp", choices=["ecmp", "hash", "dmodk"],
                      help="routing policy of --route (default ecmp)")
    draw.add_argument("--title", help="figure title (default: design name and load)")
    _catalog_args(draw)
    _format_arg(draw)
    draw.set_defaults(run=_cmd_draw)

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
    _catalog_args(export)
    _format_arg(export)
    export.set_defaults(run=_cmd_export)

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
                       help="run on this Dask scheduler (e.g. tcp://host:8786) instead")
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
    _catalog_args(sweep)
    _format_arg(sweep)
    sweep.set_defaults(run=_cmd_sweep)

    schema = verbs.add_parser("schema", help="print the JSON Schema of design files",
                              description="Print the JSON Schema of an input format.")
    schema.add_argument("what", choices=["design"], help="which format")
    schema.set_defaults(run=_cmd_schema, format="table")  # the bare schema, as editors want
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    run: Callable[[argparse.Namespace], Report] = args.run
    try:
        report = run(args)
        text = render(report, args.format)
    except InputError as exc:
        for problem in exc.problems:
            print(f"topomodel: error: {problem}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    except TopomodelError as exc:
        print(f"topomodel: error: {exc}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    except OSError as exc:  # an output path that cannot be written
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"topomodel: error: {where}cannot write: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
