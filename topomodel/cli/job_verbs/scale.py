"""``topomodel scale DESIGN --model M ...``: how do throughput, scaling efficiency and
MFU change as the design grows (DP grows, the rest of the layout stays)?"""

from __future__ import annotations

import argparse
from typing import Any

from topomodel.cli.options import inputs_from_args
from topomodel.cli.shared import usage, writable
from topomodel.report.output import Report, Table


def run(args: argparse.Namespace) -> Report:
    from topomodel.analysis.training.studies import default_counts, scale_curve
    from topomodel.inputs.design import load_design
    from topomodel.inputs.parts import Model, System

    if args.plot:  # refused now, not after the curve
        from topomodel.draw.io import figure_format

        figure_format(args.plot)
        writable(args.plot)
    inputs = inputs_from_args(args)
    if inputs.fail:
        raise usage("--fail: scale builds the design at several sizes, where the named"
                     " parts differ; fail parts with step or compare instead")
    if inputs.fail_domain:
        raise usage("--fail-domain: scale builds the design at several sizes, where the"
                    " domains differ; fail domains with step or compare instead")
    design, catalog = load_design(args.design, extra_catalogs=args.catalog,
                                   catalog_dirs=args.catalog_dir)
    model = catalog.get(str(inputs.model), Model)
    total = int(design.accelerators or (design.systems or 1) * catalog.get(
        design.system, System).accelerators)
    per_system = catalog.get(design.system, System).accelerators
    counts = args.counts or default_counts(total, per_system, inputs.layout)
    if any(c < 1 for c in counts):
        raise usage("--counts: accelerator counts are at least 1")
    counts = sorted({*counts, total})
    points = scale_curve(design, catalog, model, inputs.layout, counts, inputs.assumptions,
                         routing=inputs.routing, seed=inputs.seed,
                         scaleout_factor=inputs.scaleout_factor)
    rows = [{"accelerators": p.accelerators, "DP": p.result.layout.dp,
             "global batch": f"{p.result.global_batch:,}",
             "microbatches": f"{p.result.microbatches:,}",
             "tokens/s": f"{p.result.tokens_per_s:,.0f}",
             "scaling efficiency": f"{p.efficiency:.1%}", "MFU": f"{p.result.mfu:.1%}",
             "communication share": f"{p.result.comm_share:.1%}"} for p in points]
    data: dict[str, Any] = {"points": [
        {"accelerators": p.accelerators, "global_batch": p.result.global_batch,
         "microbatches": p.result.microbatches, "tokens_per_s": p.result.tokens_per_s,
         "scaling_efficiency": p.efficiency, "mfu": p.result.mfu,
         "comm_share": p.result.comm_share} for p in points]}
    if args.plot:
        from topomodel.draw.charts import scaling_figure
        from topomodel.draw.io import save_figure

        save_figure(scaling_figure(points, title=f"{design.name or args.design}: {model.id}"),
                    args.plot)
        data["plot"] = args.plot
    from topomodel.traffic.layout import BATCH_RULE

    batch = (f"{inputs.layout.global_batch // inputs.layout.dp:,} sequences per DP replica"
             " (the given batch per replica, kept as DP grows)" if inputs.layout.global_batch
             else f"default: {BATCH_RULE}")
    data["global_batch_rule"] = batch
    title = f"Scaling (global batch: {batch}; microbatches per pipeline)"
    return Report("scale", data, [Table(title, rows, data["points"])])
