"""``topomodel export DESIGN --to FORMAT -o PATH``: the built fabric in another tool's
format (GraphML, node-link JSON, CSV or Parquet tables, ASTRA-sim, Calculon, a Slurm
topology.conf, a Kueue Topology and its node labels)."""

from __future__ import annotations

import argparse

from topomodel.cli.shared import usage
from topomodel.inputs.records import check_share
from topomodel.report.output import Report


def run(args: argparse.Namespace) -> Report:
    from topomodel.export import export_fabric
    from topomodel.fabric.build import build_fabric
    from topomodel.files import refuse_output_folder
    from topomodel.inputs.design import load_design

    if args.to in ("csv", "parquet", "kueue"):
        refuse_output_folder(args.output)  # before any work
    if args.compute_efficiency is not None:
        check_share(args.compute_efficiency, "compute_efficiency", low_open=True)
    design, catalog = load_design(args.design, extra_catalogs=args.catalog,
                                   catalog_dirs=args.catalog_dir)
    fabric = build_fabric(design, catalog)
    try:
        files = export_fabric(fabric, args.to, args.output,
                              compute_efficiency=args.compute_efficiency,
                              hostnames=args.hostnames, label_prefix=args.label_prefix)
    except OSError as exc:
        raise usage(f"{args.output}: cannot write: {exc.strerror or exc}") from None
    names = [str(f) for f in files]
    return Report("export", {"format": args.to, "files": names,
                             "nodes": len(fabric.nodes), "links": len(fabric.links)},
                  text="\n".join(f"wrote {n}" for n in names))
