"""``topomodel catalog list | show ID``: which hardware entries does the catalog hold,
and every figure of one with its source."""

from __future__ import annotations

import argparse

from topomodel.report.output import Report


def run(args: argparse.Namespace) -> Report:
    from topomodel.inputs.catalog import load_catalog
    from topomodel.report.catalog import catalog_list, catalog_show

    catalog = load_catalog(args.catalog)
    if args.catalog_verb == "list":
        return catalog_list(catalog, args.kind)
    return catalog_show(catalog, args.id)
