"""``topomodel goodput DESIGN --model M ...``: how often is the job interrupted, how
often should it checkpoint, and what share of its time and tokens/s survive?"""

from __future__ import annotations

import argparse

from topomodel.cli.shared import Stages, goodput_part, job_from_args
from topomodel.report.output import Report, Table


def run(args: argparse.Namespace) -> Report:
    from topomodel.inputs.units import format_si
    from topomodel.report.step import batch_text, step_record

    stages = Stages.of(args, "goodput")
    with stages(f"{args.design}: build"):
        job = job_from_args(args, args.design)
    with stages("step, and a step with each kind of part failed"):
        result, tables, data = goodput_part(args, job, None, keep_routes=False)
    lay, name = result.layout, job.fabric.design.name or job.fabric.design.file
    summary = Table("Job", [
        {"item": "design / model", "value": f"{name} / {result.model}"},
        {"item": "layout", "value": f"TP {lay.tp} x PP {lay.pp} x DP {lay.dp} x CP {lay.cp}"
         f" ({lay.world} accelerators)"},
        {"item": "global batch", "value": batch_text(result)},
        {"item": "step time", "value": format_si(result.step_time_s, "s")}],
        [step_record(result, name)])
    data = {"design": name, "model": result.model, "accelerators": lay.world,
            "step_time_s": result.step_time_s, **data}
    return Report("goodput", data, [summary, *tables], list(result.warnings))
