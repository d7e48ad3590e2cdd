"""The ``topomodel step`` report and its JSON (``schema: topomodel.step``)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from topomodel.analysis.options import software_text
from topomodel.analysis.training.step import StepAssumptions, StepResult
from topomodel.analysis.training.syncwait import SyncWait, sync_wait
from topomodel.report.output import Report, Table
from topomodel.routing.policy import RoutingChoice
from topomodel.traffic.layout import BATCH_RULE


def step_json(result: StepResult, assumptions: StepAssumptions) -> dict[str, Any]:
    """Plain-type JSON of a step result (``schema: topomodel.step``)."""
    return {
        "model": result.model, "layout": asdict(result.layout),
        "step_time_s": result.step_time_s, "compute_s": result.compute_s,
        "bubble_s": result.bubble_s, "exposed_comm_s": result.exposed_comm_s,
        "imbalance_s": result.imbalance_s, "pipeline_s": result.pipeline_s,
        "global_batch": result.global_batch, "microbatches": result.microbatches,
        "stage_busy_s": list(result.stage_busy_s), "slowest_stage": result.slowest_stage,
        "stage_memory_bytes": list(result.stage_memory_bytes),
        "wait_s": result.wait_s, "mfu": result.mfu, "hfu": result.hfu,
        "tokens_per_s": result.tokens_per_s, "comm_share": result.comm_share,
        "walls": result.walls,
        "comm": [{**asdict(c), "exposed_s": c.exposed_s} for c in result.comm],
        "memory": result.memory, "fits": result.fits,
        "assumptions": asdict(assumptions),
        "software": software_text(result.layout, assumptions),
    }


def batch_text(result: StepResult) -> str:
    """The global batch a step ran, in words: sequences, tokens, microbatches per
    pipeline, and whether it was given or the default rule (:data:`BATCH_RULE`)."""
    tokens = result.tokens_per_s * result.step_time_s
    return (f"{result.global_batch:,} sequences ({tokens:,.0f} tokens),"
            f" {result.microbatches:,} microbatches per pipeline; "
            + ("given" if result.layout.global_batch else f"default: {BATCH_RULE}"))


def memory_text(result: StepResult) -> str:
    """Whether the step fits its accelerators' memory, in words (worst stage)."""
    need = result.memory["total_bytes"]
    hbm = result.hbm_bytes
    if result.fits:
        return f"fits: {need / 1e9:.1f} GB of {hbm / 1e9:.0f} GB per accelerator"
    return (f"DOES NOT FIT: needs {need / 1e9:.1f} GB per accelerator, has"
            f" {hbm / 1e9:.0f} GB")


def step_report(result: StepResult, assumptions: StepAssumptions, *,
                design_name: str, routing: RoutingChoice | None = None,
                measured: str = "") -> Report:
    """The ``topomodel step`` report: summary, walls, communication, memory; with the
    routing applied (``routing``), the wait's assumptions and the figures a calibration
    set (``measured``: "as measured (FILE)"), one line each."""
    from topomodel.inputs.units import format_si, format_size

    def part(value_s: float) -> str:  # a part of the step, its residue printed as 0
        return format_si(value_s, "s", of=result.step_time_s)

    lay = result.layout
    wait = sync_wait(assumptions, lay.world)
    shape = (f"TP {lay.tp} x PP {lay.pp} x DP {lay.dp} x CP {lay.cp}"
             + (f", EP {lay.ep}" if lay.ep > 1 else ""))
    rows = [
        {"item": "design / model", "value": f"{design_name} / {result.model}"},
        {"item": "layout", "value": f"{shape} ({lay.world:,} accelerators, order {lay.order})"},
        {"item": "software", "value": software_text(lay, assumptions)},
        {"item": "memory", "value": memory_text(result)},
        {"item": "step time", "value": format_si(result.step_time_s, "s")},
        {"item": "global batch", "value": batch_text(result)},
        {"item": "schedule", "value": f"{lay.schedule}" + (
            f", {lay.interleave} virtual stages" if lay.interleave > 1 else "")
         + f"; slowest stage {result.slowest_stage} (stages 0-{lay.pp - 1})"},
        {"item": "  compute", "value": part(result.compute_s)},
        {"item": "  hot-expert imbalance", "value": part(result.imbalance_s)},
        {"item": "  pipeline bubble", "value": part(result.bubble_s)},
        {"item": "  exposed communication", "value": part(result.exposed_comm_s)},
        {"item": "  synchronisation wait", "value": part(result.wait_s)},
        {"item": "wait assumed", "value": wait.text},
        *([{"item": "routing", "value": routing.text}] if routing else []),
        *([{"item": "figures as measured", "value": measured}] if measured else []),
        {"item": "tokens/s", "value": f"{result.tokens_per_s:,.0f}"},
        {"item": "MFU" + (" / HFU" if lay.recompute != "none" else ""),
         "value": f"{result.mfu:.1%}" + (f" / {result.hfu:.1%}" if lay.recompute != "none"
                                         else "")},
        {"item": "communication share (exposed + wait)", "value": f"{result.comm_share:.1%}"},
    ]
    walls = [{"wall": k.removesuffix("_s"), "time": part(v),
              "share of step": f"{v / result.step_time_s:.1%}",
              "from": _wall_source(k, wait, routing)} for k, v in result.walls.items()]
    comm = [{"kind": c.kind, "collective": f"{c.collective} ({c.algorithm})",
             "size": format_size(c.size_bytes),
             "calls/step": f"{c.calls:,}", "time": format_si(c.time_s, "s"),
             "overlap": f"{c.overlap:.0%}", "exposed": format_si(c.exposed_s, "s"),
             "leaves scale-up": "yes" if c.spills else "no",
             "timed by": "measured curve" if c.measured else "model"} for c in result.comm]
    memory = [{"part": k.removesuffix("_bytes"), "per accelerator": format_size(v)}
              for k, v in result.memory.items()]
    data = step_json(result, assumptions)
    data["design"] = design_name
    data["sync_wait"] = {**asdict(wait), "share_of_compute": wait.share, "text": wait.text}
    if routing is not None:
        data["routing"] = {"routing": routing.routing, "reason": routing.reason}
    records = {
        "step": [step_record(result, design_name)],
        "walls": [{"wall": k.removesuffix("_s"), "time_s": v,
                   "share_of_step": v / result.step_time_s} for k, v in result.walls.items()],
        "communication": data["comm"],
        "memory": [{"part": k.removesuffix("_bytes"), "per_accelerator_bytes": v}
                   for k, v in result.memory.items()]}
    return Report("step", data, [Table("Step", rows, records["step"]),
                                 Table("Walls", walls, records["walls"]),
                                 Table("Communication", comm, records["communication"]),
                                 Table("Memory", memory, records["memory"])],
                  list(result.warnings), text=_measured_text(result))


def _wall_source(wall: str, wait: SyncWait, routing: RoutingChoice | None) -> str:
    """What a wall's time comes from, in a few words (the sync wall: its assumptions)."""
    if wall == "sync_s":
        return wait.text
    if wall == "topology_s" and routing is not None:
        return f"routing: {routing.text}"
    return ""


def _measured_text(result: StepResult) -> str | None:
    """Which collectives a measured nccl-tests curve timed, in words (None: none)."""
    notes = list(dict.fromkeys(f"{c.kind.upper()} {c.measured}" for c in result.comm
                               if c.measured))
    return "; ".join(notes) + "." if notes else None


def step_record(result: StepResult, design_name: str) -> dict[str, Any]:
    """The headline numbers of a step as one row of plain numbers (units in the names):
    the Step table of ``--format csv``, and the step part of compare."""
    lay = result.layout
    return {"design": design_name, "model": result.model, "accelerators": lay.world,
            "tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "cp": lay.cp, "ep": lay.ep,
            "global_batch": result.global_batch, "microbatches": result.microbatches,
            "step_time_s": result.step_time_s, "compute_s": result.compute_s,
            "imbalance_s": result.imbalance_s, "bubble_s": result.bubble_s,
            "exposed_comm_s": result.exposed_comm_s, "wait_s": result.wait_s,
            **{f"{k.removesuffix('_s')}_wall_s": v for k, v in result.walls.items()},
            "comm_share": result.comm_share, "mfu": result.mfu, "hfu": result.hfu,
            "tokens_per_s": result.tokens_per_s, "fits": result.fits}
