"""``topomodel check-trace TRACE... --design D --model M [layout]``: do a job's PyTorch
profiler traces agree with the model of the same job, collective by collective and part
by part of the step, and is the job communication-bound by the 30 % rule of thumb?"""

from __future__ import annotations

import argparse
from typing import Any

from topomodel.inputs.records import check_share
from topomodel.report.output import Report, Table


def _si(value: float | None, unit: str) -> str:
    from topomodel.inputs.units import format_si

    return "" if value is None else format_si(value, unit)


def _gbps(rate_Bps: float | None) -> str:
    return "" if rate_Bps is None else f"{rate_Bps / 1e9:.3g}"


def _collective_rows(check: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows, records = [], []
    for c in check.collectives:
        m = c.measured
        ratio = c.busbw_ratio
        rows.append({"collective": m.kind, "size": _si(m.size_bytes, "B"),
                     "group": m.group_size or "", "calls": m.calls,
                     "time": _si(m.time_s, "s"), "fastest rank": _si(m.transfer_s, "s"),
                     "busbw GB/s": _gbps(m.busbw_Bps), "model time": _si(c.model_time_s, "s"),
                     "model busbw GB/s": _gbps(c.model_busbw_Bps),
                     "measured / model": "" if ratio is None else (
                         f"{ratio:.0%}" if ratio >= 0.01 else f"{ratio:.2%}"),
                     "algorithm (traced; model)": "; ".join(
                         x for x in (m.algorithms, c.model_algorithm) if x),
                     "note": c.note})
        records.append({"collective": m.kind, "size_bytes": m.size_bytes,
                        "group_size": m.group_size, "calls": m.calls,
                        "time_s": m.time_s, "fastest_rank_time_s": m.transfer_s,
                        "algbw_Bps": m.algbw_Bps, "busbw_Bps": m.busbw_Bps,
                        "traced_algorithms": m.algorithms, "model_time_s": c.model_time_s,
                        "model_busbw_Bps": c.model_busbw_Bps,
                        "model_algorithm": c.model_algorithm, "busbw_ratio": ratio,
                        "note": c.note})
    return rows, records


def trace_check_report(check: Any, *, design_name: str) -> Report:
    """Tables and JSON of a :class:`~topomodel.calibrate.trace.TraceCheck`."""
    from topomodel.analysis.assumptions import DEFAULT_COMM_THRESHOLD

    measure, step = check.measure, check.step
    model_share, measured_share = step.comm_share, check.measured_share
    summary = [
        {"item": "traces", "value": f"{len(measure.files)} ({measure.device},"
         f" {measure.backend or 'backend not named'}), ranks"
         f" {', '.join(str(r) for r in measure.ranks)}"},
        {"item": "steps measured", "value": f"{len(measure.steps)} rank-steps (medians"
         " over them)"},
        {"item": "design", "value": design_name},
        {"item": "model, layout", "value": f"{step.model}, tp {step.layout.tp} pp"
         f" {step.layout.pp} dp {step.layout.dp} ep {step.layout.ep}"},
        {"item": "communication share (exposed + wait)", "value":
         f"measured {measured_share:.1%} ({check.verdict(measured_share)}), model"
         f" {model_share:.1%} ({check.verdict(model_share)})"},
        {"item": "rule of thumb", "value": f"{check.threshold:.0%} or more of the step in"
         " exposed communication and wait means the network is the bottleneck (a"
         " practitioners' rule, not a measurement"
         + ("" if check.threshold == DEFAULT_COMM_THRESHOLD else
            f"; --threshold given, default {DEFAULT_COMM_THRESHOLD:.0%}") + ")"},
    ]
    rows, records = _collective_rows(check)
    kinds = [{"collective": k.kind, "model calls": k.model_calls,
              "model time": _si(k.model_time_s, "s"), "model exposed": _si(k.model_exposed_s, "s"),
              "measured time": _si(k.measured_time_s, "s"), "model runs it for": k.model_uses}
             for k in check.kinds]
    kind_records = [{"collective": k.kind, "model_calls": k.model_calls,
                     "model_time_s": k.model_time_s, "model_exposed_s": k.model_exposed_s,
                     "measured_time_s": k.measured_time_s, "model_uses": k.model_uses}
                    for k in check.kinds]
    model_step, measured_step = step.step_time_s, measure.median("step_s")
    parts = [{"part": p.part, "model": _si(p.model_s, "s"), "measured": _si(p.measured_s, "s"),
              "model share": f"{p.model_s / model_step:.1%}" if model_step else "",
              "measured share": f"{p.measured_s / measured_step:.1%}" if measured_step else ""}
             for p in check.parts]
    part_records = [{"part": p.part, "model_s": p.model_s, "measured_s": p.measured_s}
                    for p in check.parts]
    step_rows = [{"rank": s.rank, "step": s.step, "step_s": s.step_s, "compute_s": s.compute_s,
                  "comm_s": s.comm_s, "exposed_comm_s": s.exposed_comm_s, "wait_s": s.wait_s,
                  "idle_s": s.idle_s, "comm_share": s.comm_share} for s in measure.steps]
    data = {"traces": list(measure.files), "ranks": list(measure.ranks),
            "device": measure.device, "backend": measure.backend, "design": design_name,
            "model": step.model, "threshold": check.threshold,
            "measured_comm_share": measured_share, "model_comm_share": model_share,
            "measured_verdict": check.verdict(measured_share),
            "model_verdict": check.verdict(model_share),
            "collectives": records, "per_step_by_collective": kind_records,
            "step_parts": part_records, "steps": step_rows}
    tables = [Table("Trace check", summary, name="summary"),
              Table("Collectives: measured (median per call) and the model", rows, records,
                    name="collectives"),
              Table("Per step, per collective kind", kinds, kind_records,
                    name="per_step_by_collective"),
              Table("Step parts (median over rank-steps)", parts, part_records,
                    name="step_parts"),
              Table("Steps as traced", [{k: (f"{v:.4g}" if isinstance(v, float) else v)
                                         for k, v in r.items()} for r in step_rows],
                    step_rows, name="steps")]
    return Report("check-trace", data, tables,
                  list(measure.warnings) + list(check.warnings))


def run(args: argparse.Namespace) -> Report:
    from topomodel.calibrate.trace import check_trace
    from topomodel.calibrate.tracesteps import measure_traces
    from topomodel.cli.shared import job_from_args
    from topomodel.inputs.measured.kineto import read_traces

    check_share(args.threshold, "threshold", low_open=True, high_open=True)
    measure = measure_traces(read_traces(args.traces))  # bad traces fail before the model
    job = job_from_args(args, args.design)
    check = check_trace(job.fabric, measure, job.step(), routing=job.inputs.routing,
                        seed=job.inputs.seed, time_model=job.assumptions.time,
                        threshold=args.threshold)
    return trace_check_report(check, design_name=job.fabric.design.name or args.design)
