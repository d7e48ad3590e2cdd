"""``topomodel serve DESIGN --model M ...``: what time to first token, time per output
token and tokens/s does disaggregated serving reach on this design, with the prefill and
decode pools where they sit, the KV cache handed between them over the links, and how
much of a request's time is the network's, on which link class?"""

from __future__ import annotations

import argparse

from topomodel.report.output import Report


def run(args: argparse.Namespace) -> Report:
    from topomodel.analysis.options import SERVE_OPTIONS
    from topomodel.analysis.serving.serve import serve
    from topomodel.cli.options import FABRIC_OPTIONS, SERVE_KEYS, inputs_from_args
    from topomodel.cli.shared import fabric_with_whatifs
    from topomodel.inputs.measured.requests import read_mooncake_trace
    from topomodel.inputs.parts import Model
    from topomodel.report.serving.serve import serve_report

    inputs = inputs_from_args(args, SERVE_OPTIONS + SERVE_KEYS + FABRIC_OPTIONS)
    fabric = fabric_with_whatifs(args.design, args.catalog, inputs,
                                 catalog_dirs=args.catalog_dir)
    model = fabric.catalog.get(str(inputs.model), Model)
    trace = read_mooncake_trace(args.trace) if args.trace else None
    result = serve(fabric, model, serving=inputs.serve, decode=inputs.decode,
                   assumptions=inputs.assumptions, trace=trace, routing=inputs.routing,
                   seed=inputs.seed)
    return serve_report(result, design=fabric.design.name or args.design)
