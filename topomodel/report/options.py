"""The step options as a table (``topomodel options``): key, flag, default and meaning,
read from :data:`topomodel.analysis.options.OPTIONS`, the one declaration that the CLI
flags, the sweep parameters and the review's assumptions share."""

from __future__ import annotations

from topomodel.analysis.options import OPTIONS
from topomodel.report.output import Report, Table


def options_report() -> Report:
    """Every step option: its sweep key, command-line flag, default and meaning."""
    rows = [{"key": o.key, "flag": o.flag + (f" {o.metavar}" if o.metavar else ""),
             "default": o.default_text(), "meaning": o.doc} for o in OPTIONS.values()]
    data = {"options": [{"key": o.key, "flag": o.flag, "target": o.target,
                         "default": o.default, "doc": o.doc} for o in OPTIONS.values()]}
    from topomodel.inputs.units import KINDS

    records = [{"key": o.key, "flag": o.flag, "target": o.target,
                "default": o.default if not isinstance(o.default, dict | list | tuple)
                else o.default_text(),
                "default_unit": KINDS[o.quantity_kind].canonical if o.quantity_kind else "",
                "meaning": o.doc} for o in OPTIONS.values()]
    return Report("options", data, [Table("Step options", rows, records, name="options")])
