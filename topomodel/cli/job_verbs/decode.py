"""``topomodel decode DESIGN --model M ...``: how many tokens/s can inference decode
reach per accelerator, per system and per sequence, bounded by HBM, compute and the
TP/EP collectives routed on the fabric, and which wall binds?"""

from __future__ import annotations

import argparse

from topomodel.report.output import Report


def run(args: argparse.Namespace) -> Report:
    from topomodel.analysis.options import DECODE_OPTIONS
    from topomodel.analysis.serving.decode import decode_step
    from topomodel.cli.options import DECODE_KEYS, FABRIC_OPTIONS, inputs_from_args
    from topomodel.cli.shared import fabric_with_whatifs
    from topomodel.inputs.parts import Model
    from topomodel.report.serving.decode import decode_report

    inputs = inputs_from_args(args, DECODE_OPTIONS + DECODE_KEYS + FABRIC_OPTIONS)
    fabric = fabric_with_whatifs(args.design, args.catalog, inputs,
                                 catalog_dirs=args.catalog_dir)
    model = fabric.catalog.get(str(inputs.model), Model)
    layout, given = inputs.layout, inputs.decode
    result = decode_step(fabric, model, tp=layout.tp, ep=layout.ep,
                         dp=None if inputs.fill_dp else layout.dp, batch=given.batch,
                         context=given.context, dtype=given.dtype, kv_dtype=given.kv_dtype,
                         compute_efficiency=inputs.assumptions.compute_efficiency,
                         hbm_efficiency=inputs.assumptions.hbm_efficiency,
                         comm_overlap=given.comm_overlap,
                         activation_dtype=given.activation_dtype,
                         time_model=inputs.assumptions.time, routing=inputs.routing,
                         seed=inputs.seed)
    return decode_report(result, design=fabric.design.name or args.design)
