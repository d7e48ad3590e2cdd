"""``topomodel schema design | catalog | sweep``: what keys may an input file hold, of
what type, with which default and meaning (the JSON Schema)."""

from __future__ import annotations

import argparse

from topomodel.report.output import Report


def run(args: argparse.Namespace) -> Report:
    from topomodel.report.schema import schema_report

    return schema_report(args.what)
