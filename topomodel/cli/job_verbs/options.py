"""``topomodel options``: which options does a job take (layout, assumptions, what-ifs,
goodput), with the sweep key, flag, default and meaning of each?"""

from __future__ import annotations

import argparse

from topomodel.report.output import Report


def run(args: argparse.Namespace) -> Report:
    from topomodel.report.options import options_report

    return options_report()
