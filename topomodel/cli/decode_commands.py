"""The ``decode`` verb: inference decode tokens/s on a design, bounded by HBM bandwidth,
with the TP/EP collectives of every step routed on the fabric."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from topomodel.report.output import Report

ParserHook = Callable[[argparse.ArgumentParser], None]

DECODE_KEYS = ("model", "tp", "ep", "dp", "hbm_efficiency")
"""Step options the decode verb shares with the step (same flags, readers and help)."""


def add_decode_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser], *,
                    catalog_args: ParserHook, format_arg: ParserHook) -> None:
    """Add ``decode`` to the verb table."""
    from topomodel.analysis.serving.decode_assumptions import (
        DEFAULT_BATCH,
        DEFAULT_COMM_OVERLAP,
        DEFAULT_DTYPE,
    )
    from topomodel.analysis.training.model import BYTES
    from topomodel.cli.options import FABRIC_OPTIONS, add_step_options

    decode = verbs.add_parser(
        "decode", help="inference decode: tokens/s per accelerator, HBM and comm walls",
        description="Model one inference decode step of a model on the design: the"
        " seconds it spends reading the weights and the KV cache from HBM, the compute"
        " floor, and the exposed TP all-reduces and EP all-to-alls routed on the fabric;"
        " tokens/s per accelerator, per system and per sequence, and the wall that binds."
        " An upper bound on tokens/s. DP (replicas) fills the design unless given. See"
        " docs/decode.md.")
    decode.add_argument("design", help="design file (YAML)")
    decode.add_argument("--batch", type=int, default=DEFAULT_BATCH, metavar="B",
                        help="sequences each replica (DP rank) decodes at once (default"
                        f" {DEFAULT_BATCH})")
    decode.add_argument("--context", type=int, metavar="T",
                        help="tokens already in each sequence's KV cache (default: the"
                        " model's training sequence)")
    decode.add_argument("--dtype", default=DEFAULT_DTYPE, choices=list(BYTES),
                        help=f"weight data type (default {DEFAULT_DTYPE})")
    decode.add_argument("--kv-dtype", choices=list(BYTES),
                        help="KV cache data type (default: --dtype)")
    decode.add_argument("--comm-overlap", type=float, default=DEFAULT_COMM_OVERLAP,
                        metavar="F", help="share of the communication hidden behind"
                        f" compute (default {DEFAULT_COMM_OVERLAP:g})")
    add_step_options(decode, DECODE_KEYS + FABRIC_OPTIONS)
    catalog_args(decode)
    format_arg(decode)
    decode.set_defaults(run=_cmd_decode)


def _cmd_decode(args: argparse.Namespace) -> Report:
    from topomodel.analysis.serving.decode import decode_step
    from topomodel.cli.options import FABRIC_OPTIONS, inputs_from_args
    from topomodel.cli.shared import fabric_with_whatifs
    from topomodel.inputs.parts import Model
    from topomodel.report.decode import decode_report

    inputs = inputs_from_args(args, DECODE_KEYS + FABRIC_OPTIONS)
    fabric = fabric_with_whatifs(args.design, args.catalog, inputs)
    model = fabric.catalog.get(str(inputs.model), Model)
    layout = inputs.layout
    result = decode_step(fabric, model, tp=layout.tp, ep=layout.ep,
                         dp=None if inputs.fill_dp else layout.dp, batch=args.batch,
                         context=args.context, dtype=args.dtype, kv_dtype=args.kv_dtype,
                         hbm_efficiency=inputs.assumptions.hbm_efficiency,
                         comm_overlap=args.comm_overlap, time_model=inputs.assumptions.time,
                         routing=inputs.routing, seed=inputs.seed)
    return decode_report(result, design=fabric.design.name or args.design)
