"""The report of ``topomodel decode``: the step's time by part, tokens/s, and the wall."""

from __future__ import annotations

import textwrap
from typing import Any

from topomodel.analysis.serving.decode import DecodeResult
from topomodel.inputs.units import format_rate, format_si, format_size
from topomodel.report.output import Report, Table

_WALLS = {"hbm-weights": "HBM bandwidth reading the weights",
          "hbm-kv-cache": "HBM bandwidth reading the KV cache",
          "compute": ("compute (the step's FLOPs at the best measured GEMM efficiency, or"
                      " the flat --compute-efficiency)"),
          "communication": "communication (exposed TP/EP collectives)"}


def decode_summary(r: DecodeResult, *, design: str) -> str:
    """The result in one sentence."""
    return (f"{r.model} on {design} (TP {r.tp}, EP {r.ep}, batch {r.batch}, context"
            f" {r.context}, {r.dtype}): {format_si(r.step_time_s, 's')} per decode step,"
            f" {r.tokens_per_s_per_accelerator:,.0f} tokens/s per accelerator"
            f" ({r.tokens_per_s_per_sequence:,.1f} per sequence); bound by"
            f" {_WALLS[r.wall]}.")


def decode_report(r: DecodeResult, *, design: str) -> Report:
    """Tables (time split, throughput, collectives) and JSON of one decode step."""
    step = r.step_time_s

    def share(t: float) -> str:
        return f"{t / step:.0%}" if step else ""

    split: list[dict[str, Any]] = [
        {"part": "HBM: weights", "time": format_si(r.hbm_weights_s, "s"),
         "share": share(r.hbm_weights_s), "bytes": format_size(r.weight_bytes_read)},
        {"part": "HBM: KV cache", "time": format_si(r.hbm_kv_s, "s"),
         "share": share(r.hbm_kv_s), "bytes": format_size(r.kv_bytes_read)},
        {"part": "compute (floor)", "time": format_si(r.compute_s, "s"),
         "share": (f"{(r.compute_s - r.hbm_s) / step:.0%} beyond HBM"
                   if r.compute_s > r.hbm_s else "under HBM"),
         "bytes": ""},
        {"part": "communication, exposed", "time": format_si(r.comm_exposed_s, "s"),
         "share": share(r.comm_exposed_s), "bytes": ""},
        {"part": "decode step", "time": format_si(step, "s"), "share": "100%", "bytes": ""},
    ]
    rates = [
        {"item": "tokens/s per accelerator", "value": f"{r.tokens_per_s_per_accelerator:,.1f}"},
        {"item": f"tokens/s per system ({r.accelerators_per_system} accelerators)",
         "value": f"{r.tokens_per_s_per_system:,.1f}"},
        {"item": f"tokens/s, all {r.dp} replicas ({r.dp * r.tp} accelerators)",
         "value": f"{r.tokens_per_s_total:,.1f}"},
        {"item": "tokens/s per sequence", "value": f"{r.tokens_per_s_per_sequence:,.2f}"},
        {"item": "wall", "value": r.wall},
        {"item": "HBM rate used", "value": format_rate(r.hbm_Bps)},
        {"item": "compute efficiency used", "value": f"{r.compute_efficiency:.0%} of peak"
         + (" (flat, --compute-efficiency)" if r.compute_efficiency_flat
            else " (the best measured GEMM)")},
        {"item": "weights + KV cache held", "value":
         f"{format_size(r.memory_bytes)} of {format_size(r.hbm_capacity_bytes)}"},
    ]
    if r.experts_touched:
        rates.append({"item": "routed experts read per step",
                      "value": f"{r.experts_touched:.1%}"})
    comm = [{"kind": c.kind, "collective": c.collective, "algorithm": c.algorithm,
             "size": format_size(c.size_bytes), "calls/step": c.calls,
             "per call": format_si(c.time_s / c.calls, "s"),
             "per step": format_si(c.time_s, "s")} for c in r.comm]
    heading = "\n".join(textwrap.wrap(decode_summary(r, design=design), width=92))
    parts = [("hbm_weights", r.hbm_weights_s, r.weight_bytes_read),
             ("hbm_kv_cache", r.hbm_kv_s, r.kv_bytes_read), ("compute_floor", r.compute_s, None),
             ("communication_exposed", r.comm_exposed_s, None), ("decode_step", step, None)]
    # the compute floor runs beside the HBM reads: no share of the step of its own
    split_records = [{"part": part, "time_s": t,
                      "share_of_step": None if part == "compute_floor" or not step
                      else t / step, "bytes": b} for part, t, b in parts]
    comm_records = [{"kind": c.kind, "collective": c.collective, "algorithm": c.algorithm,
                     "size_bytes": c.size_bytes, "calls_per_step": c.calls,
                     "time_per_call_s": c.time_s / c.calls, "time_per_step_s": c.time_s,
                     "leaves_scaleup": c.spills} for c in r.comm]
    tables = [Table(heading + "\n\ndecode step, per accelerator", split, split_records,
                    name="decode_step"),
              Table("throughput", rates, [decode_record(r, design=design)], name="decode")]
    if comm:
        tables.append(Table("collectives per decode step", comm, comm_records,
                            name="collectives"))
    data = {
        "design": design, "model": r.model, "accelerator": r.accelerator,
        "tp": r.tp, "ep": r.ep, "dp": r.dp, "batch": r.batch, "context_tokens": r.context,
        "dtype": r.dtype, "kv_dtype": r.kv_dtype, "comm_overlap": r.comm_overlap,
        "step_time_s": step, "hbm_weights_s": r.hbm_weights_s, "hbm_kv_s": r.hbm_kv_s,
        "compute_s": r.compute_s, "comm_s": r.comm_s, "comm_exposed_s": r.comm_exposed_s,
        "weight_bytes_read": r.weight_bytes_read, "kv_bytes_read": r.kv_bytes_read,
        "hbm_Bps": r.hbm_Bps, "wall": r.wall,
        "compute_efficiency": r.compute_efficiency,
        "compute_efficiency_flat": r.compute_efficiency_flat,
        "tokens_per_s_per_accelerator": r.tokens_per_s_per_accelerator,
        "tokens_per_s_per_system": r.tokens_per_s_per_system,
        "tokens_per_s_total": r.tokens_per_s_total,
        "tokens_per_s_per_sequence": r.tokens_per_s_per_sequence,
        "accelerators_per_system": r.accelerators_per_system,
        "memory_bytes": r.memory_bytes, "hbm_capacity_bytes": r.hbm_capacity_bytes,
        "fits": r.fits, "experts_touched": r.experts_touched,
        "collectives": [{"kind": c.kind, "collective": c.collective,
                         "algorithm": c.algorithm, "size_bytes": c.size_bytes,
                         "calls": c.calls, "time_s": c.time_s, "spills": c.spills}
                        for c in r.comm],
    }
    data["summary"] = decode_summary(r, design=design)
    # the sentence heads the tables (Report.text would replace them)
    return Report("decode", data, tables, list(r.warnings))


def decode_record(r: DecodeResult, *, design: str) -> dict[str, Any]:
    """The decode step's headline as one row of plain numbers, the unit in each name:
    the ``decode`` table of ``--format csv`` and ``parquet``."""
    return {"design": design, "model": r.model, "accelerator": r.accelerator,
            "tp": r.tp, "ep": r.ep, "dp": r.dp, "accelerators": r.dp * r.tp,
            "batch": r.batch, "context_tokens": r.context, "dtype": r.dtype,
            "kv_dtype": r.kv_dtype, "step_time_s": r.step_time_s,
            "tokens_per_s_per_accelerator": r.tokens_per_s_per_accelerator,
            "tokens_per_s_per_system": r.tokens_per_s_per_system,
            "accelerators_per_system": r.accelerators_per_system,
            "tokens_per_s_total": r.tokens_per_s_total,
            "tokens_per_s_per_sequence": r.tokens_per_s_per_sequence, "wall": r.wall,
            "hbm_Bps": r.hbm_Bps, "compute_efficiency": r.compute_efficiency,
            "compute_efficiency_flat": r.compute_efficiency_flat,
            "memory_bytes": r.memory_bytes, "hbm_capacity_bytes": r.hbm_capacity_bytes,
            "fits": r.fits, "experts_touched": r.experts_touched if r.experts_touched
            else None, "comm_overlap": r.comm_overlap}
