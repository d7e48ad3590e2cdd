"""``topomodel calibrate INPUT... --design DESIGN -o overlay.yaml``: which physical
figures of the model (link efficiencies, latencies) make it reproduce what a running
cluster measured, written as a catalog overlay every verb takes with ``--catalog``?"""

from __future__ import annotations

import argparse

from topomodel.report.output import Report, Table


def run(args: argparse.Namespace) -> Report:
    from topomodel.calibrate.inputs import read_inputs
    from topomodel.calibrate.nccl import calibrate_nccl
    from topomodel.calibrate.overlay import write_overlay
    from topomodel.cli.options import FABRIC_OPTIONS, inputs_from_args
    from topomodel.cli.shared import collective_name, fabric_with_whatifs, writable
    from topomodel.errors import UsageError

    writable(args.output)
    groups = read_inputs(args.inputs)
    logs = groups.pop("nccl-tests", [])
    if not logs:
        raise UsageError("no nccl-tests run among the inputs: calibrate fits from them")
    inputs = inputs_from_args(args, FABRIC_OPTIONS, require_model=False)
    fabric = fabric_with_whatifs(args.design, args.catalog, inputs,
                                 catalog_dirs=args.catalog_dir)
    result = calibrate_nccl(
        fabric, logs,
        collective=collective_name(args.collective) if args.collective else None,
        ranks=args.ranks, routing=inputs.routing, seed=inputs.seed,
        time_model=inputs.assumptions.time, algorithm=args.algorithm)
    warnings = [w for log in logs for w in log.warnings]
    warnings += [f"{len(items)} input(s) of kind {fit!r} are read but not fitted by"
                 " calibrate yet" for fit, items in groups.items()]
    if result.fitted:
        path = str(write_overlay(args.output, fabric.catalog, result.fitted))
    else:
        path = ""
        warnings.append("nothing could be fitted from these sizes: no overlay written")
    def shown(key: str, value: float) -> str:
        return f"{value * 1e6:.3g} us" if key == "launch_latency" else f"{value:.4g}"

    fitted = [{"figure": f"{f.section}.{f.entry}.{f.key}", "before": shown(f.key, f.before),
               "after": shown(f.key, f.after), "provenance": f.provenance,
               "fitted on": f"{len(f.sizes)} sizes, {f.sizes[0]:,}-{f.sizes[-1]:,} B",
               "residual before": f"{f.rms_before:.1%}", "residual after": f"{f.rms_after:.1%}"}
              for f in result.fitted]
    kept = [{"figure": k.what, "value": k.value, "why": k.why} for k in result.kept]
    fitted_sizes = {s for f in result.fitted for s in f.sizes}
    after = {s.size_bytes: s for s in result.after.sizes}
    before = {s.size_bytes: s for s in result.before.sizes}
    sizes = [{"size (B)": f"{p.size_bytes:,}", "runs": p.timings,
              "measured time": f"{p.time_s * 1e6:.1f} us", "spread": f"{p.spread:.1%}",
              "model before": f"{before[p.size_bytes].model_time_s * 1e6:.1f} us",
              "model after": f"{after[p.size_bytes].model_time_s * 1e6:.1f} us",
              "residual after": f"{after[p.size_bytes].model_time_s / p.time_s - 1:+.1%}",
              "fitted": "yes" if p.size_bytes in fitted_sizes else ""}
             for p in result.points]
    data = {"collective": result.collective, "ranks": result.ranks,
            "inputs": list(result.files), "overlay": path,
            "spread": result.spread,
            "fitted": [{"section": f.section, "entry": f.entry, "key": f.key,
                        "tiers": list(f.tiers), "before": f.before, "after": f.after,
                        "provenance": f.provenance, "files": list(f.files),
                        "sizes_bytes": list(f.sizes),
                        "residual_before": list(f.residual_before),
                        "residual_after": list(f.residual_after)} for f in result.fitted],
            "kept": [{"figure": k.what, "value": k.value, "why": k.why}
                     for k in result.kept],
            "sizes": [{"size_bytes": p.size_bytes, "time_s": p.time_s, "spread": p.spread,
                       "timings": p.timings,
                       "model_before_s": before[p.size_bytes].model_time_s,
                       "model_after_s": after[p.size_bytes].model_time_s}
                      for p in result.points]}
    summary = (f"{result.collective}, {result.ranks} ranks, {len(logs)} run(s):"
            f" {len(result.fitted)} figure(s) fitted"
            + (f"; overlay written to {path} (give it with --catalog)" if path else ""))
    return Report("calibrate", data, [Table("Calibration", [{"item": "result",
                                                             "value": summary}]),
                                      Table("Fitted (provenance measured)", fitted),
                                      Table("Left as it was", kept),
                                      Table("Per size", sizes)], warnings)
