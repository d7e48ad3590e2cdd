"""``topomodel build DESIGN``: what fabric does a design build: tiers, counts,
capacities, bisection, bill of materials, power and the optical link budget? With
``--failure-domains``: what does losing a rack, a power feed, a cooling loop, a plane or
a site stop and remove? With ``--every-domain KIND``: over every domain of the kind,
which one hurts most, and what does the median one do?"""

from __future__ import annotations

import argparse

from topomodel.report.output import Report


def run(args: argparse.Namespace) -> Report:
    from topomodel.analysis.bisection import bisection
    from topomodel.fabric.build import build_fabric
    from topomodel.inputs.design import load_design
    from topomodel.report.build import build_report

    design, catalog = load_design(args.design, extra_catalogs=args.catalog,
                                   catalog_dirs=args.catalog_dir)
    fabric = build_fabric(design, catalog)
    limit = args.max_flow_nodes
    domains = None
    if args.failure_domains or args.every_domain:
        from topomodel.analysis.reliability.blast_radius import blast_radius

        domains = blast_radius(fabric, every=args.every_domain or ())
    return build_report(fabric, bisection_result=bisection(fabric, max_flow_node_limit=limit),
                        failure_domains=domains)
