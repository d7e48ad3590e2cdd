"""``topomodel check-nccl LOG --design DESIGN``: does a measured nccl-tests log agree
with the model, size by size, and where it falls short, which tier does the model say
saturates?"""

from __future__ import annotations

import argparse

from topomodel.cli.shared import writable
from topomodel.inputs.records import check_share
from topomodel.report.output import Report


def run(args: argparse.Namespace) -> Report:
    from topomodel.analysis.collectives.measured import check_nccl
    from topomodel.calibrate.inputs import input_kind
    from topomodel.cli.options import FABRIC_OPTIONS, inputs_from_args
    from topomodel.cli.shared import collective_name, fabric_with_whatifs
    from topomodel.errors import UsageError
    from topomodel.report.measured import nccl_check_report

    if args.plot:  # refused now, not after the model has run
        from topomodel.draw.io import figure_format

        figure_format(args.plot)
        writable(args.plot)
    check_share(args.threshold, "threshold", low_open=True, high_open=True)
    kind = input_kind(args.log)  # the text log, or nccl-tests' -J JSON file
    if kind.fit != "nccl-tests":
        raise UsageError(f"{args.log}: a {kind.name}, not nccl-tests output")
    log = kind.read(args.log)
    inputs = inputs_from_args(args, FABRIC_OPTIONS, require_model=False)
    fabric = fabric_with_whatifs(args.design, args.catalog, inputs,
                                 catalog_dirs=args.catalog_dir)
    check = check_nccl(fabric, log,
                       collective=collective_name(args.collective) if args.collective else None,
                       ranks=args.ranks, threshold=args.threshold, column=args.column,
                       routing=inputs.routing, seed=inputs.seed,
                       time_model=inputs.assumptions.time, algorithm=args.algorithm,
                       protocol=args.protocol)
    name = fabric.design.name or args.design
    from topomodel.cli.shared import measured_figures

    measured = measured_figures(fabric, inputs.assumptions.time)
    report = nccl_check_report(check, log, design_name=name, link_rates=measured)
    if args.plot:
        from topomodel.draw.io import save_figure
        from topomodel.draw.measured import nccl_check_figure

        path = save_figure(nccl_check_figure(
            check, title=f"{name}: {check.collective}, {check.ranks} ranks, measured vs"
            " model"), args.plot)
        report.data["plot"] = str(path)
    return report
