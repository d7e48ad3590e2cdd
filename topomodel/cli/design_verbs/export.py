"""``topomodel export DESIGN --to FORMAT -o PATH``: the built fabric in another tool's
format (GraphML, node-link JSON, CSV or Parquet tables, ASTRA-sim, Calculon, a Slurm
topology.conf, a Kueue Topology and its node labels, InfraGraph), or one modelled
training step as a Chakra execution trace (``--to chakra --model M`` and the step
options)."""

from __future__ import annotations

import argparse

from topomodel.cli.shared import job_from_args, usage
from topomodel.inputs.records import check_share
from topomodel.report.output import Report


def run(args: argparse.Namespace) -> Report:
    from topomodel.export import export_fabric
    from topomodel.fabric.build import build_fabric
    from topomodel.files import refuse_output_folder
    from topomodel.inputs.design import load_design

    if args.to in ("csv", "parquet", "kueue", "chakra"):
        refuse_output_folder(args.output)  # before any work
    if args.compute_efficiency is not None:
        check_share(args.compute_efficiency, "compute_efficiency", low_open=True)
    if args.to == "chakra":
        return _chakra(args)
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
                             "nodes": len(fabric.node_arrays), "links": len(fabric.link_arrays)},
                  text="\n".join(f"wrote {n}" for n in names))


def _chakra(args: argparse.Namespace) -> Report:
    """The step of the step options as a Chakra trace in the folder ``args.output``."""
    from topomodel.export.chakra import chakra_trace, write_chakra

    if args.model is None:
        raise usage("--to chakra needs --model (the step it traces)")
    job = job_from_args(args, args.design)
    trace = chakra_trace(job.fabric, job.model, job.layout, job.assumptions,
                         routing=job.inputs.routing, seed=job.inputs.seed)
    try:
        files = write_chakra(trace, args.output)
    except OSError as exc:
        raise usage(f"{args.output}: cannot write: {exc.strerror or exc}") from None
    ranks = len(files) - 1
    return Report("export", {"format": "chakra", "folder": str(args.output),
                             "ranks": ranks, "nodes": trace.nodes},
                  text=f"wrote {ranks} Chakra trace files ({trace.nodes:,} nodes) and"
                  f" workload.json into {args.output}")
