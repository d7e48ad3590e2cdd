"""``topomodel calibrate INPUT... --design DESIGN -o overlay.yaml``: which physical
figures of the model (link efficiencies, latencies) make it reproduce what a running
cluster measured (nccl-tests runs, a job's profiler traces), and what is each node as
NCCL saw it (its topology dump), written as one catalog overlay every verb takes with
``--catalog``?"""

from __future__ import annotations

import argparse
from typing import Any

from topomodel.report.output import Report, Table


def _shown(key: str, value: float) -> str:
    return f"{value * 1e6:.3g} us" if key == "launch_latency" else f"{value:.4g}"


def _fitted_rows(fitted: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows, records = [], []
    for f in fitted:
        both = f" ({len(f.curves)} curves together: {'; '.join(f.curves)})" if len(
            f.curves) > 1 else f" ({f.curves[0]})" if f.curves else ""
        rows.append({"figure": f"{f.section}.{f.entry}.{f.key}",
                     "before": _shown(f.key, f.before), "after": _shown(f.key, f.after),
                     "provenance": f.provenance,
                     "fitted on": f"{len(f.sizes)} sizes, {min(f.sizes):,}-{max(f.sizes):,}"
                                  f" B{both}",
                     "residual before": f"{f.rms_before:.1%}",
                     "residual after": f"{f.rms_after:.1%}",
                     "spread, move": _spread_and_move(f)})
        records.append({"section": f.section, "entry": f.entry, "key": f.key,
                        "tiers": list(f.tiers), "before": f.before, "after": f.after,
                        "provenance": f.provenance, "files": list(f.files),
                        "curves": list(f.curves), "sizes_bytes": list(f.sizes),
                        "residual_before": list(f.residual_before),
                        "residual_after": list(f.residual_after),
                        "spread": list(f.spreads), "move": list(f.moves),
                        "within_spread": f.within_spread})
    return rows, records


def _span(values: Any) -> str:
    low, high = min(values), max(values)
    return f"{low:.1%}" if f"{low:.1%}" == f"{high:.1%}" else f"{low:.1%}-{high:.1%}"


def _spread_and_move(f: Any) -> str:
    """The log's run-to-run spread and the overlay's move of the model over the sizes
    the figure was fitted on (docs/calibrate.md, "On a healthy log")."""
    return (f"run-to-run spread {_span(f.spreads)}, the move"
            f" {_span([abs(m) for m in f.moves])} (within the spread at"
            f" {f.within_spread} of {len(f.moves)} sizes)")


def _size_rows(result: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    fitted = {(c, s) for f in result.fit.fitted for c in f.curves for s in f.sizes}
    rows, records = [], []
    for curve in result.fit.curves:
        label = curve.series.label
        before = {s.size_bytes: s for s in curve.before.sizes}
        after = {s.size_bytes: s for s in curve.after.sizes}
        for p in curve.series.points:
            b, a = before[p.size_bytes].model_time_s, after[p.size_bytes].model_time_s
            rows.append({"curve": label, "size (B)": f"{p.size_bytes:,}", "runs": p.timings,
                         "measured time": f"{p.time_s * 1e6:.1f} us",
                         "spread": f"{p.spread:.1%}", "model before": f"{b * 1e6:.1f} us",
                         "model after": f"{a * 1e6:.1f} us",
                         "residual after": f"{a / p.time_s - 1:+.1%}",
                         "fitted": "yes" if (label, p.size_bytes) in fitted else ""})
            records.append({"curve": label, "size_bytes": p.size_bytes, "time_s": p.time_s,
                            "spread": p.spread, "timings": p.timings,
                            "model_before_s": b, "model_after_s": a})
    return rows, records


def _check_loads(args: argparse.Namespace, text: str, files: tuple[str, ...]) -> None:
    """The overlay must load as a catalog beside the design's before it is written."""
    import tempfile
    from pathlib import Path

    from topomodel.errors import InputError, UsageError
    from topomodel.inputs.catalog import load_catalog

    with tempfile.TemporaryDirectory() as folder:
        trial = Path(folder) / Path(args.output).name
        trial.write_text(text, encoding="utf-8")
        try:
            load_catalog([*args.catalog, trial])
        except InputError as exc:  # said of the inputs, not of a temporary file
            first = exc.problems[0]
            where = f"{first.key_path}: " if first.key_path else ""
            raise UsageError(f"{', '.join(files)}: the overlay made of them is not a valid"
                             f" catalog: {where}{first.message}") from None


def _pct(value: float) -> str:
    return f"{value:+.1%}"


def _explain(args: argparse.Namespace, result: Any, path: str
             ) -> tuple[list[Table], dict[str, Any], list[str]]:
    """``--explain``: each curve, and with traces and ``--model`` the step, before and
    after the overlay (:mod:`topomodel.calibrate.explain`)."""
    from topomodel.calibrate.explain import explain_curves

    curves = explain_curves(result.fit)
    rows = [{"curve": c.curve, "sizes": f"{c.sizes} ({c.smallest_bytes:,}-"
             f"{c.largest_bytes:,} B)", "spread": f"{c.spread:.1%}",
             "model/measured - 1, median: before": _pct(c.median_before),
             "after": _pct(c.median_after), "largest: before": _pct(c.worst_before),
             "largest: after": _pct(c.worst_after)} for c in curves]
    records: dict[str, Any] = {"curves": [vars(c) for c in curves]}
    tables = [Table("Explain: model against measured per curve (time), before and after"
                    " the overlay", rows, records["curves"], name="explain_curves")]
    if result.trace is None:
        return tables, records, []
    if args.model is None:
        return tables, records, ["--explain: give --model and the job's layout (as"
                                 " check-trace's) for the step's parts before and after"]
    step = _explain_step(args, result, path)
    parts = [{"part": p, "measured": f"{m * 1e3:.4g} ms", "model before": f"{b * 1e3:.4g} ms",
              "model after": f"{a * 1e3:.4g} ms"} for p, m, b, a in step.parts]
    kinds = [{"collective per step": k, "measured": f"{m * 1e3:.4g} ms",
              "model before": f"{b * 1e3:.4g} ms", "model after": f"{a * 1e3:.4g} ms"}
             for k, m, b, a in step.kinds]
    share = dict(zip(("measured", "model_before", "model_after"), step.share, strict=True))
    records.update(
        parts=[dict(zip(("part", "measured_s", "model_before_s", "model_after_s"), p,
                        strict=True)) for p in step.parts],
        kinds=[dict(zip(("collective", "measured_s", "model_before_s", "model_after_s"), k,
                        strict=True)) for k in step.kinds],
        comm_share=share)
    parts.append({"part": "communication share (exposed + wait)",
                  "measured": f"{step.share[0]:.1%}", "model before": f"{step.share[1]:.1%}",
                  "model after": f"{step.share[2]:.1%}"})
    tables += [Table("Explain: per collective kind per step", kinds, records["kinds"],
                     name="explain_kinds"),
               Table("Explain: step parts (median over rank-steps)", parts,
                     records["parts"], name="explain_parts")]
    return tables, records, []


def _explain_step(args: argparse.Namespace, result: Any, path: str) -> Any:
    from dataclasses import replace

    from topomodel.calibrate.explain import explain_step
    from topomodel.calibrate.trace import check_trace
    from topomodel.cli.shared import Job, fabric_with_whatifs, job_from_args

    job = job_from_args(args, args.design)
    assumptions = replace(job.assumptions,
                          time=replace(job.assumptions.time, measured_curves=False))
    before = replace(job, assumptions=assumptions)
    after = before
    if path:
        fabric = fabric_with_whatifs(args.design, [*args.catalog, path], job.inputs,
                                     catalog_dirs=args.catalog_dir)
        after = Job(fabric, job.model, job.layout, assumptions, job.inputs)
    checks = [check_trace(j.fabric, result.trace, j.step(), routing=j.inputs.routing,
                          seed=j.inputs.seed, time_model=assumptions.time)
              for j in (before, after)]
    return explain_step(result.trace, *checks)


def run(args: argparse.Namespace) -> Report:
    from topomodel.calibrate.calibration import calibrate_inputs
    from topomodel.calibrate.inputs import read_inputs
    from topomodel.calibrate.overlay import overlay_text
    from topomodel.cli.options import FABRIC_OPTIONS, inputs_from_args
    from topomodel.cli.shared import collective_name, fabric_with_whatifs, writable
    from topomodel.files import atomic_bytes

    writable(args.output)
    groups = read_inputs(args.inputs)
    inputs = inputs_from_args(args, FABRIC_OPTIONS, require_model=False)
    fabric = fabric_with_whatifs(args.design, args.catalog, inputs,
                                 catalog_dirs=args.catalog_dir)
    result = calibrate_inputs(
        fabric, groups,
        collective=collective_name(args.collective) if args.collective else None,
        ranks=args.ranks, routing=inputs.routing, seed=inputs.seed,
        time_model=inputs.assumptions.time, algorithm=args.algorithm,
        accelerator=args.accelerator)
    warnings = [w for log in groups.get("nccl-tests", []) for w in log.warnings]
    warnings += list(result.trace.warnings if result.trace else ()) + list(result.notes)
    path = ""
    if result.fit.fitted or result.systems:
        text = overlay_text(fabric.catalog, result.fit.fitted, result.systems)
        _check_loads(args, text, result.files)
        path = str(atomic_bytes(args.output, text.encode("utf-8")))
    else:
        warnings.append("nothing could be fitted from these sizes: no overlay written")
    fitted, fitted_records = _fitted_rows(result.fit.fitted)
    kept = [{"figure": k.what, "value": k.value, "why": k.why} for k in result.fit.kept]
    sizes, size_records = _size_rows(result)
    systems = [{"system": s.system_id, "from": dump,
                "as NCCL saw it": "; ".join(f"{what}: {how}" for what, how in s.found),
                "not identified": "; ".join(s.not_identified)}
               for s, dump in zip(result.systems, result.dumps, strict=True)]
    curves = [{"curve": c.series.label, "files": list(c.series.files),
               "spread": c.spread} for c in result.fit.curves]
    data: dict[str, Any] = {"inputs": list(result.files), "overlay": path, "curves": curves,
            "fitted": fitted_records, "kept": kept, "systems": systems,
            "sizes": size_records}
    summary = (f"{len(result.fit.curves)} measured curve(s), {len(result.systems)}"
               f" topology dump(s): {len(result.fit.fitted)} figure(s) fitted"
               + (f", {len(result.systems)} system(s) made" if result.systems else "")
               + (f"; overlay written to {path} (give it with --catalog)" if path else ""))
    tables = [Table("Calibration", [{"item": "result", "value": summary}]),
              Table("Fitted (provenance measured)", fitted, fitted_records),
              Table("Left as it was", kept)]
    if systems:
        tables.append(Table("Systems from NCCL topology dumps (provenance measured)",
                            systems))
    tables.append(Table("Per size", sizes, size_records))
    if args.explain:
        more, explained, said = _explain(args, result, path)
        tables += more
        data["explain"] = explained
        warnings += said
    return Report("calibrate", data, tables, warnings)
