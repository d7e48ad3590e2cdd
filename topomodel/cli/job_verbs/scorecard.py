"""``topomodel scorecard DESIGN --model M``: the figures a cluster design should publish
(throughput, scaling, the step's split, the four collectives with their tail, each
network level, MFU per parallel strategy, expert imbalance, failures), each with its
origin; ``--compare B`` puts a second design beside it with their ratio."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from topomodel.cli.options import given_values, inputs_from_args
from topomodel.cli.shared import fabric_with_whatifs, usage, writable
from topomodel.report.output import Report

LAYOUT_KEYS = ("tp", "pp", "dp", "cp", "ep")
"""The flags that pin the layout: with none of them, each size runs at its best."""

OUTPUT_FORMATS = {".json": "json", ".csv": "csv", ".md": "md", ".html": "html"}


def run(args: argparse.Namespace) -> Report:
    from topomodel.analysis.training.studies import fill_dp
    from topomodel.inputs.parts import Model
    from topomodel.report.review.scorecard import PARTS, ScorecardJob, scorecard
    from topomodel.report.review.scorecard_tables import scorecard_report

    suffix = Path(args.output).suffix.lower() if args.output else ""
    if args.output and suffix not in OUTPUT_FORMATS:
        raise usage(f"-o {args.output}: the file's extension picks the format; use one of"
                    f" {', '.join(OUTPUT_FORMATS)}")
    if args.output:
        writable(args.output)
    inputs = inputs_from_args(args)
    pinned = bool(given_values(args, LAYOUT_KEYS))
    from topomodel.report.review.claims import parse_claim

    claims = [parse_claim(text) for text in args.claim or ()]
    for claim in claims:
        if claim.ratio and not args.compare:
            raise usage(f"--claim {claim.text}: a ratio compares two designs; give"
                        " --compare DESIGN_B")
    cards, fabrics, jobs = [], [], []
    for path in [args.design, *([args.compare] if args.compare else [])]:
        fabric = fabric_with_whatifs(path, args.catalog, inputs,
                                     catalog_dirs=args.catalog_dir)
        layout = fill_dp(fabric.accelerator_count, inputs.layout) if (
            pinned and inputs.fill_dp) else inputs.layout
        job = ScorecardJob(fabric.catalog.get(str(inputs.model), Model),
                           inputs.assumptions, layout if pinned else None,
                           base=inputs.layout, routing=inputs.routing, seed=inputs.seed,
                           goodput=inputs.goodput,
                           parts=("step", *args.only) if args.only else PARTS)
        say = None if args.no_progress or not sys.stderr.isatty() else (
            lambda what, p=path: print(f"scorecard {p}: {what}", file=sys.stderr))
        cards.append(scorecard(fabric, job, progress=say))
        fabrics.append(fabric)
        jobs.append(job)
    report = scorecard_report(cards)
    if claims:
        report = _with_claims(report, fabrics, jobs, cards, claims)
    if args.output:
        _write(report, args.output, OUTPUT_FORMATS[suffix])
    return report


def _with_claims(report: Report, fabrics: list[Any], jobs: list[Any], cards: list[Any],
                 claims: list[Any]) -> Report:
    """``report`` with a table of each claim checked (and its JSON under ``claims``)."""
    from dataclasses import replace

    from topomodel.report.output import Table
    from topomodel.report.review.claims import check_claim, claim_rows

    rows = [row for claim in claims
            for row in claim_rows(check_claim(fabrics, jobs, cards, claim))]
    return replace(report, data={**report.data, "claims": rows},
                   tables=[*report.tables, Table("Claim check", rows, name="claims")])


def _write(report: Report, path: str, fmt: str) -> None:
    from topomodel.files import atomic_write
    from topomodel.report.output import render
    from topomodel.report.review.scorecard_tables import scorecard_html

    text = scorecard_html(report) if fmt == "html" else render(report, fmt)
    atomic_write(path, lambda stream: stream.write(text.encode()))
