"""``topomodel step DESIGN --model M ...``: how long does one training step take on the
fabric (compute, bubble, exposed communication, wait), at what MFU, which wall binds,
and (optionally) how sensitive is it and what scale-out would bring communication down
to a share?"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from topomodel.cli.shared import cost_part, goodput_part, job_from_args
from topomodel.inputs.records import check_share
from topomodel.report.output import Report, Table


def run(args: argparse.Namespace) -> Report:
    from topomodel.analysis.training.studies import (
        BELOW_RANGE,
        FOUND,
        NO_EFFECT,
        NOT_REACHED,
        required_scaleout_factor,
        sensitivity,
    )
    from topomodel.report.step import step_report

    if args.target_comm_share is not None:
        check_share(args.target_comm_share, "target_comm_share", low_open=True,
                    high_open=True)
    job = job_from_args(args, args.design)
    fabric, inputs = job.fabric, job.inputs
    # the sensitivity and the scale-out search start from the routes the step keeps on
    # this process's fabric: then the step runs here first, else beside the goodput's
    # degraded steps
    alone = args.no_goodput or args.sensitivity or args.target_comm_share
    result = job.step() if alone else None
    goodput_tables: list[Any] = []
    if not args.no_goodput:
        result, goodput_tables, goodput_data = goodput_part(args, job, result)
    assert result is not None
    from topomodel.cli.shared import measured_figures
    from topomodel.routing.policy import resolve_routing

    report = step_report(result, job.assumptions,
                         design_name=fabric.design.name or fabric.design.file,
                         routing=resolve_routing(fabric, inputs.routing),
                         measured=measured_figures(fabric, inputs.assumptions.time))
    tables, data = list(report.tables) + goodput_tables, dict(report.data)
    warnings = list(report.warnings)
    if not args.no_goodput:
        data["goodput"] = goodput_data
    (cost_table, data["cost"]), cost_warnings = cost_part(
        job, goodput_data["goodput_tokens_per_s"] if not args.no_goodput
        else result.tokens_per_s, goodput=not args.no_goodput)
    tables.append(cost_table)
    warnings += cost_warnings
    if args.target_comm_share:
        search = required_scaleout_factor(
            fabric, job.model, job.layout, job.assumptions,
            target_share=args.target_comm_share, routing=inputs.routing, seed=inputs.seed)
        from topomodel.fabric.structure import scaleout_injection_Bps
        from topomodel.inputs.units import format_rate

        now, factor = scaleout_injection_Bps(fabric.injection), search.factor
        text = {FOUND: f"{factor or 0:.3g}x today's: {format_rate((factor or 0) * now)}"
                       " per accelerator",
                NOT_REACHED: f"not reached even at {search.limit:g}x",
                BELOW_RANGE: f"met even at 1/{search.limit:g} of today's",
                NO_EFFECT: "no scale-out factor changes the share (the traffic stays"
                           " inside the scale-up domain)"}[search.outcome]
        data["required_scaleout"] = {"target_comm_share": args.target_comm_share,
                                     "factor": factor, "outcome": search.outcome,
                                     "injection_Bps": now,
                                     "required_Bps": None if factor is None
                                     else factor * now, "mfu": search.result.mfu}
        tables.append(Table(f"Scale-out bandwidth for a communication share of at most"
                            f" {args.target_comm_share:.0%}", [
                                {"item": "today", "value": format_rate(now)},
                                {"item": "required", "value": text},
                                {"item": "MFU there", "value": f"{search.result.mfu:.1%}"}],
                            [data["required_scaleout"]], name="required_scaleout"))
    if args.sensitivity:
        rows = sensitivity(fabric, job.model, job.layout, job.assumptions,
                           routing=inputs.routing, seed=inputs.seed, workers=args.workers)
        tables.append(Table("Sensitivity of the communication share", [
            {"assumption": r.assumption, "low": f"{r.low_value:g}", "high": f"{r.high_value:g}",
             "share at low": f"{r.low:.1%}", "base": f"{r.base:.1%}",
             "share at high": f"{r.high:.1%}"} for r in rows],
            [dataclasses.asdict(r) for r in rows], name="sensitivity"))
        data["sensitivity"] = [dataclasses.asdict(r) for r in rows]
    return Report(report.kind, data, tables, warnings)
