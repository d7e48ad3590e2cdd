"""``topomodel draw DESIGN -o FILE``: what does the topology look like, and (with
``--route``) where does one collective load it?"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from topomodel.cli.shared import collective_name, size_option, usage
from topomodel.report.output import Report


def run(args: argparse.Namespace) -> Report:
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
        routed = run_collective(fabric, collective_name(args.route), size, args.group or ["all"],
                             algorithm=args.algorithm, routing=inputs.routing,
                             seed=inputs.seed, time_model=model)
        utilization = link_utilization(routed.timing)
        title = title or (f"{name}: {routed.collective} ({routed.algorithm}) of"
                          f" {format_size(routed.size_bytes)}, {format_si(routed.time_s, 's')}")
        data.update(collective=routed.collective, algorithm=routed.algorithm,
                    size_bytes=routed.size_bytes, time_s=routed.time_s,
                    peak_utilization=float(utilization.max(initial=0.0)))
        if args.what == "tiers":
            tiers = [dataclasses.asdict(t) for t in tier_loads(fabric, routed.timing)]
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
