"""``topomodel route DESIGN --collective C --size S``: how long does one collective take
on the fabric (latency, bandwidth, topology), at what algbw and busbw, loading which
tiers and links?"""

from __future__ import annotations

import argparse
import dataclasses

from topomodel.cli.shared import collective_name, size_option
from topomodel.report.output import Report


def run(args: argparse.Namespace) -> Report:
    from topomodel.analysis.collectives.collective import run_collective
    from topomodel.cli.options import FABRIC_OPTIONS, inputs_from_args
    from topomodel.cli.shared import Stages, fabric_with_whatifs
    from topomodel.report.route import route_report

    stages = Stages.of(args, "route")
    inputs = inputs_from_args(args, FABRIC_OPTIONS, require_model=False)
    size, warning = size_option(args.size)
    with stages(f"{args.design}: build"):
        fabric = fabric_with_whatifs(args.design, args.catalog, inputs, args.fail_link,
                                     catalog_dirs=args.catalog_dir)
    model = inputs.assumptions.time
    with stages(f"{args.collective}: route and time"):
        routed = run_collective(fabric, collective_name(args.collective), size,
                                args.group or ["all"], algorithm=args.algorithm,
                                routing=inputs.routing, seed=inputs.seed, router=args.router,
                                time_model=model)
    with stages("hotspots and tiers"):
        report = route_report(fabric, routed, routing=inputs.routing, top=args.top,
                              time_model=model)
    if warning:
        report = dataclasses.replace(report, warnings=[warning, *report.warnings])
    return report
