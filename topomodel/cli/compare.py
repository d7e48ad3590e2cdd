"""``topomodel compare``: one job on two or more designs (library: report.compare)."""

from __future__ import annotations

import argparse

from topomodel.cli.commands import _usage
from topomodel.cli.step_commands import _goodput, job_from_args
from topomodel.report.output import Report


def _cmd_compare(args: argparse.Namespace) -> Report:
    import dataclasses

    from topomodel.analysis.bisection import bisection
    from topomodel.analysis.bom import bill_of_materials, power_summary
    from topomodel.report.compare import ComparedDesign, compare_report

    if len(args.designs) < 2:
        raise _usage("compare takes two or more design files")
    compared = []
    for path in args.designs:
        job = job_from_args(args, path)
        result = job.step()
        _, goodput = _goodput(args, job, result)
        bom = bill_of_materials(job.fabric)
        compared.append(ComparedDesign(
            job.fabric.design.name or path, path, result, job.assumptions, goodput, bom,
            power_summary(bom, job.fabric.accelerator_count),
            dataclasses.asdict(bisection(job.fabric))))
    return compare_report(compared)
