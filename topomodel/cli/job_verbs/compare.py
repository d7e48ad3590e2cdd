"""``topomodel compare A B ...``: the same model and layout rules on two or more
designs: which is faster, at what MFU and goodput, and at what change in BOM, power
and capex from the first?"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from topomodel.cli.shared import Stages, goodput_part, job_from_args, usage
from topomodel.report.output import Report

if TYPE_CHECKING:
    from topomodel.report.compare import ComparedDesign


def run(args: argparse.Namespace) -> Report:
    from topomodel.report.compare import compare_report

    if len(args.designs) < 2:
        raise usage("compare takes two or more design files")
    if args.serve:  # the same serving job on each design, one after another
        from topomodel.cli.shared import serve_job
        from topomodel.report.serving.serve import serve_compare_report

        return serve_compare_report([serve_job(args, path) for path in args.designs])
    # the designs one after another in this process, their degraded steps too unless
    # --workers N asks for N processes (forked once a design's step is built): one
    # design's peak of memory at a time, its freed memory reused by the next. A worker
    # per design, with workers of their own, backed each peak afresh in each process,
    # at once: at 98k on 2 cores 41-53 CPU s against 27 here, the same output
    # (benchmarks/README.md, "traffic98k")
    from topomodel.heap import release_freed_memory

    designs: list[ComparedDesign] = []
    for path in args.designs:
        if designs:
            # the last design's freed memory given back: the heap keeps it
            # (topomodel.heap), and the pages the next design does not reuse would stay
            # resident beside its own peak
            release_freed_memory()
        designs.append(_compared(args, path))
    return compare_report(designs)


def _compared(args: argparse.Namespace, path: str) -> ComparedDesign:
    """One design of a comparison: its step, goodput, bill of materials and power."""
    import dataclasses

    from topomodel.analysis.bisection import bisection
    from topomodel.analysis.bom import bill_of_materials, power_summary
    from topomodel.analysis.cost import token_cost
    from topomodel.report.compare import ComparedDesign, busiest_link
    from topomodel.traffic.pxn import release_listings

    stages = Stages.of(args, "compare")
    with stages(f"{path}: build"):
        job = job_from_args(args, path)
    # the step first, here: the designs already fill the cores, and a degraded step
    # starts from what the step built
    with stages(f"{path}: step"):
        result = job.step()
    goodput = None
    if args.no_goodput:  # the pairs the step's PXN traffics hold listed, dropped (the
        release_listings(job.fabric)  # degraded steps read them, then drop them)
    else:
        with stages(f"{path}: goodput (a step with each kind of part failed)"):
            # its degraded steps here unless --workers asks for more (see run)
            serial = argparse.Namespace(**{**vars(args), "workers": args.workers or 1})
            # busiest_link times a collective of its own (all ranks), not the
            # step's traffic: the step's routes are dropped before the degraded steps
            result, _, goodput = goodput_part(serial, job, result, keep_routes=False)
    bom = bill_of_materials(job.fabric)
    power = power_summary(bom, job.fabric.accelerator_count)
    tokens = goodput["goodput_tokens_per_s"] if goodput else result.tokens_per_s
    cost = None if power.capex_USD is None or not tokens else token_cost(
        power.capex_USD, power.total_W, tokens, job.inputs.cost,
        share=job.layout.world / job.fabric.accelerator_count, goodput=bool(goodput))
    with stages(f"{path}: busiest link"):
        busiest = busiest_link(job.fabric, result, routing=job.inputs.routing,
                               seed=job.inputs.seed, time_model=job.assumptions.time)
    return ComparedDesign(job.fabric.design.name or path, path, result, job.assumptions,
                          goodput, bom, power, dataclasses.asdict(bisection(job.fabric)),
                          cost=cost, nic_port_Bps=job.fabric.structure.scaleout.port_rate_Bps,
                          busiest=busiest)
