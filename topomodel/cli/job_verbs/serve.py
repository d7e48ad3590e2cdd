"""``topomodel serve DESIGN --model M ...``: what time to first token, time per output
token and tokens/s does disaggregated serving reach on this design, with the prefill and
decode pools where they sit, the KV cache handed between them over the links, and how
much of a request's time is the network's, on which link class?"""

from __future__ import annotations

import argparse

from topomodel.report.output import Report


def run(args: argparse.Namespace) -> Report:
    from topomodel.cli.shared import serve_job
    from topomodel.report.serving.serve import serve_report

    design, result = serve_job(args, args.design)
    return serve_report(result, design=design)
