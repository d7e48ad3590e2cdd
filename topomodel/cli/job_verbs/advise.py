"""``topomodel advise DESIGN --model M ...``: is communication the bottleneck of the
step, which wall dominates, and what scale-out bandwidth brings it below the
threshold?"""

from __future__ import annotations

import argparse

from topomodel.inputs.records import check_share
from topomodel.report.output import Report


def run(args: argparse.Namespace) -> Report:
    from topomodel.analysis.options import software_text
    from topomodel.analysis.training.advice import advise
    from topomodel.cli.shared import job_from_args
    from topomodel.report.advice import advice_report

    check_share(args.threshold, "threshold", low_open=True, high_open=True)
    job = job_from_args(args, args.design)
    advice = advise(job.fabric, job.model, job.layout, job.assumptions,
                    threshold=args.threshold, routing=job.inputs.routing,
                    seed=job.inputs.seed)
    return advice_report(advice, design=job.fabric.design.name or args.design,
                         model=job.model.id,
                         software=software_text(advice.result.layout, job.assumptions))
