"""The ``topomodel`` command: parse, call one library function, render, and turn every
input error into one line per problem with exit status 2."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from topomodel.cli.shared import collective_name, size_option, usage
from topomodel.inputs.records import check_share
from topomodel.report.output import Report, Table


def cmd_units(args: argparse.Namespace) -> Report:
    from topomodel.errors import UnitError
    from topomodel.inputs.units import compare, convert, parse, split_direction

    words = args.quantity
    if words[0] == "compare":
        if len(words) != 3:
            raise usage("units compare takes two quantities: units compare A B")
        c = compare(words[1], words[2])
        row = {"a": c.a, "b": c.b, "ratio": round(c.ratio, 6),
               "ratio_per_direction": round(c.ratio_per_direction, 6)}
        text = f"{c.a} is {c.ratio:.4g}x {c.b}"
        return Report("units_compare", row, warnings=[c.warning] if c.warning else [],
                      text=text)
    if len(words) != 1:
        raise usage("give one quantity, e.g. units '900 GB/s' --to Gb/s")
    body, direction = split_direction(words[0])
    targets = [args.to] if args.to else _default_targets(body)
    try:
        results = [convert(words[0], unit) for unit in targets]
    except UnitError as exc:
        if not args.to or exc.text != args.to:
            raise
        raise usage(f"--to: {exc}") from None
    marker = {"bidir": " bidir", "per_direction": " /dir", None: ""}[direction]
    text = " = ".join([words[0]] + [f"{v:.6g} {u}{marker}" for v, u in results])
    data: dict[str, object] = {"input": words[0], "direction": direction,
                               "values": [{"value": v, "unit": u} for v, u in results]}
    if direction == "bidir":
        rate_Bps = parse(body, "rate") / 2
        text += f"\n  per direction: {rate_Bps / 1e9:.6g} GB/s = {rate_Bps * 8 / 1e9:.6g} Gb/s"
        data["per_direction_Bps"] = rate_Bps
    rows = [{"value": v, "unit": u} for v, u in results]
    return Report("units", data, [Table(words[0], rows, name="conversions")], text=text)


def _default_targets(body: str) -> list[str]:
    """Units people would compare a quantity in, with prefixes that suit its size."""
    from topomodel.inputs.units import KINDS, format_si, quantity, registry

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
    from topomodel.inputs.units import format_si

    return format_si(value, unit).split(" ", 1)[1]


def cmd_catalog_list(args: argparse.Namespace) -> Report:
    from topomodel.inputs.catalog import load_catalog
    from topomodel.report.catalog import catalog_list

    return catalog_list(load_catalog(args.catalog), args.kind)


def cmd_catalog_show(args: argparse.Namespace) -> Report:
    from topomodel.inputs.catalog import load_catalog
    from topomodel.report.catalog import catalog_show

    return catalog_show(load_catalog(args.catalog), args.id)


def cmd_build(args: argparse.Namespace) -> Report:
    from topomodel.analysis.bisection import bisection
    from topomodel.fabric.build import build_fabric
    from topomodel.inputs.design import load_design
    from topomodel.report.build import build_report

    design, catalog = load_design(args.design, extra_catalogs=args.catalog,
                                   catalog_dirs=args.catalog_dir)
    fabric = build_fabric(design, catalog)
    limit = args.max_flow_nodes
    return build_report(fabric, bisection_result=bisection(fabric, max_flow_node_limit=limit))


def cmd_route(args: argparse.Namespace) -> Report:
    from topomodel.analysis.collectives.collective import run_collective
    from topomodel.cli.options import FABRIC_OPTIONS, inputs_from_args
    from topomodel.cli.shared import fabric_with_whatifs
    from topomodel.report.route import route_report

    inputs = inputs_from_args(args, FABRIC_OPTIONS, require_model=False)
    fabric = fabric_with_whatifs(args.design, args.catalog, inputs, args.fail_link,
                                 catalog_dirs=args.catalog_dir)
    model = inputs.assumptions.time
    size, warning = size_option(args.size)
    run = run_collective(fabric, collective_name(args.collective), size,
                         args.group or ["all"], algorithm=args.algorithm,
                         routing=inputs.routing, seed=inputs.seed, router=args.router,
                         time_model=model)
    report = route_report(fabric, run, routing=inputs.routing, top=args.top, time_model=model)
    if warning:
        report = dataclasses.replace(report, warnings=[warning, *report.warnings])
    return report


def cmd_draw(args: argparse.Namespace) -> Report:
    from topomodel.cli.options import FABRIC_OPTIONS, inputs_from_args
    from topomodel.cli.shared import fabric_with_whatifs
    from topomodel.draw.charts import tier_utilization_figure
    from topomodel.draw.io import figure_format, save_figure
    from topomodel.draw.layout import resolve_detail
    from topomodel.draw.topology import topology_figure
    from topomodel.inputs.units import format_si, format_size

    figure_format(args.output)  # a bad suffix fails before any work
    if args.what == "tiers" and not args.route:
        raise usage("--what tiers needs a load: add --route COLLECTIVE --size SIZE")
    if args.route and not args.size:
        raise usage("--route needs --size, e.g. --size '1 GiB'")
    inputs = inputs_from_args(args, FABRIC_OPTIONS, require_model=False)
    fabric = fabric_with_whatifs(args.design, args.catalog, inputs,
                                 catalog_dirs=args.catalog_dir)
    model = inputs.assumptions.time  # the same time model and routing as route
    name = fabric.design.name or args.design
    data: dict[str, Any] = {"design": name, "file": args.output, "what": args.what}
    utilization, title, tiers, size_warning = None, args.title, [], None
    if args.route:
        from topomodel.analysis.collectives.collective import run_collective
        from topomodel.analysis.collectives.loads import link_utilization, tier_loads

        size, size_warning = size_option(args.size)
        run = run_collective(fabric, collective_name(args.route), size, args.group or ["all"],
                             algorithm=args.algorithm, routing=inputs.routing,
                             seed=inputs.seed, time_model=model)
        utilization = link_utilization(run.timing)
        title = title or (f"{name}: {run.collective} ({run.algorithm}) of"
                          f" {format_size(run.size_bytes)}, {format_si(run.time_s, 's')}")
        data.update(collective=run.collective, algorithm=run.algorithm,
                    size_bytes=run.size_bytes, time_s=run.time_s,
                    peak_utilization=float(utilization.max(initial=0.0)))
        if args.what == "tiers":
            tiers = [dataclasses.asdict(t) for t in tier_loads(fabric, run.timing)]
    if args.what == "tiers":
        figure = tier_utilization_figure(tiers, title=title)
    else:
        data["detail"] = resolve_detail(fabric, args.detail)
        figure = topology_figure(fabric, link_utilization=utilization, detail=args.detail,
                                 title=title)
    try:
        path = save_figure(figure, args.output)
    except OSError as exc:
        raise usage(f"{args.output}: cannot write: {exc.strerror or exc}") from None
    return Report("draw", data, text=f"wrote {path}",
                  warnings=[size_warning] if args.route and size_warning else [])


def cmd_export(args: argparse.Namespace) -> Report:
    from topomodel.export import export_fabric
    from topomodel.fabric.build import build_fabric
    from topomodel.files import refuse_output_folder
    from topomodel.inputs.design import load_design

    if args.to in ("csv", "parquet"):
        refuse_output_folder(args.output)  # before any work
    if args.compute_efficiency is not None:
        check_share(args.compute_efficiency, "compute_efficiency", low_open=True)
    design, catalog = load_design(args.design, extra_catalogs=args.catalog,
                                   catalog_dirs=args.catalog_dir)
    fabric = build_fabric(design, catalog)
    try:
        files = export_fabric(fabric, args.to, args.output,
                              compute_efficiency=args.compute_efficiency)
    except OSError as exc:
        raise usage(f"{args.output}: cannot write: {exc.strerror or exc}") from None
    names = [str(f) for f in files]
    return Report("export", {"format": args.to, "files": names,
                             "nodes": len(fabric.nodes), "links": len(fabric.links)},
                  text="\n".join(f"wrote {n}" for n in names))


def cmd_options(args: argparse.Namespace) -> Report:
    from topomodel.report.options import options_report

    return options_report()


def cmd_schema(args: argparse.Namespace) -> Report:
    from topomodel.report.schema import schema_report

    return schema_report(args.what)


