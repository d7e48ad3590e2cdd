"""The ``topomodel`` command: parse, call one library function, render, and turn every
input error into one line per problem with exit status 2."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from topomodel.errors import TopomodelError
from topomodel.report.output import Report, Table


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
    from topomodel.report.catalog import catalog_list

    return catalog_list(load_catalog(args.catalog), args.kind)


def _cmd_catalog_show(args: argparse.Namespace) -> Report:
    from topomodel.catalog import load_catalog
    from topomodel.report.catalog import catalog_show

    return catalog_show(load_catalog(args.catalog), args.id)


def _cmd_build(args: argparse.Namespace) -> Report:
    from topomodel.analysis.bisection import bisection
    from topomodel.design import load_design
    from topomodel.fabric.build import build_fabric
    from topomodel.report.build import build_report

    design, catalog = load_design(args.design, extra_catalogs=args.catalog)
    fabric = build_fabric(design, catalog)
    limit = args.max_flow_nodes
    return build_report(fabric, bisection_result=bisection(fabric, max_flow_node_limit=limit))


def _cmd_route(args: argparse.Namespace) -> Report:
    from topomodel.analysis.collective import run_collective
    from topomodel.analysis.timing import TimeModel
    from topomodel.design import load_design
    from topomodel.fabric.build import build_fabric
    from topomodel.fabric.failures import with_failures
    from topomodel.report.route import route_report
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
    from topomodel.design import load_design
    from topomodel.fabric.build import build_fabric
    from topomodel.fabric.failures import with_failures

    design, catalog = load_design(design_file, extra_catalogs=args.catalog)
    fabric = build_fabric(design, catalog)
    if args.fail:
        fabric = with_failures(fabric, args.fail)
    if args.scaleout_factor != 1.0:
        from topomodel.analysis.studies import scale_scaleout

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

    from topomodel.analysis.step import StepAssumptions
    from topomodel.analysis.studies import fill_dp
    from topomodel.analysis.timing import TimeModel
    from topomodel.catalog import Model
    from topomodel.traffic.layout import Layout
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
    from topomodel.report.review import collect_review
    from topomodel.report.review.render import write_review
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
        from topomodel.analysis.timing import TimeModel

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
    from topomodel.analysis.step import step_time
    from topomodel.analysis.studies import required_scaleout_factor, sensitivity
    from topomodel.report.output import Table
    from topomodel.report.step import step_report

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
        from topomodel.analysis.bisection import injection_Bps
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
    from topomodel.report.goodput import goodput_section

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
    from topomodel.analysis.goodput import GoodputAssumptions
    from topomodel.units import parse

    if args.spare_systems is not None and args.spare_systems < 0:
        raise _usage("--spare-systems cannot be negative")
    given = {field: parse(getattr(args, option), kind)
             for option, field, kind in _GOODPUT_OPTIONS if getattr(args, option)}
    return GoodputAssumptions(spare_systems=args.spare_systems, **given)


def _cmd_goodput(args: argparse.Namespace) -> Report:
    from topomodel.analysis.step import step_time
    from topomodel.report.output import Table
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
    from topomodel.analysis.goodput import job_goodput
    from topomodel.analysis.step import StepResult, step_time
    from topomodel.report.output import Table
    from topomodel.report.step import step_json
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
    from topomodel.analysis.studies import scale_curve
    from topomodel.catalog import Model
    from topomodel.design import load_design
    from topomodel.report.output import Table

    if args.plot:  # refused now, not after the curve
        from topomodel.draw.io import figure_format

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
        from topomodel.draw.charts import scaling_figure
        from topomodel.draw.io import save_figure

        save_figure(scaling_figure(points, title=f"{design.name or args.design}: {model.id}"),
                    args.plot)
        data["plot"] = args.plot
    return Report("scale", data, [Table("Scaling", rows)])


def _cmd_draw(args: argparse.Namespace) -> Report:
    from topomodel.design import load_design
    from topomodel.draw.charts import tier_utilisation_figure
    from topomodel.draw.io import figure_format, save_figure
    from topomodel.draw.layout import resolve_detail
    from topomodel.draw.topology import topology_figure
    from topomodel.fabric.build import build_fabric
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
        from topomodel.analysis.collective import run_collective
        from topomodel.report.route import route_report

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
    from topomodel.design import load_design
    from topomodel.export import export_fabric
    from topomodel.fabric.build import build_fabric

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

    from topomodel.report.sweep import dry_run_report, sweep_report
    from topomodel.sweep import (
        journal_path,
        load_sweep,
        pareto_objectives,
        results_format_for,
        run_sweep,
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
    if args.plot:
        from topomodel.draw.io import figure_format

        figure_format(args.plot)
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
    from topomodel.schema import design_schema

    schema = design_schema()
    return Report("schema", schema, text=__import__("json").dumps(schema, indent=2))


def _usage(message: str) -> TopomodelError:
    from topomodel.errors import UsageError

    return UsageError(message)

