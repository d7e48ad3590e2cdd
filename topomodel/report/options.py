"""The step options as a table (``topomodel options``): key, flag, default and meaning,
read from :data:`topomodel.analysis.options.OPTIONS`, the one declaration that the CLI
flags, the sweep parameters and the review's assumptions share."""

from __future__ import annotations

from typing import Any

from topomodel.analysis.options import OPTIONS, StepOption
from topomodel.report.output import Report, Table


def _default_text(opt: StepOption) -> str:
    value: Any = opt.default
    if opt.arg == "bool":
        return "true" if value else "false"
    if opt.key == "bucket":
        return f"{value / 1e6:g} MB"
    if opt.key == "overhead":
        return f"{value * 1e6:g} us"
    if value in (None, (), {}):
        return ""
    if isinstance(value, dict):
        return ", ".join(f"{k}={v:g}" for k, v in value.items())
    return str(value)


def options_report() -> Report:
    """Every step option: its sweep key, command-line flag, default and meaning."""
    rows = [{"key": o.key, "flag": o.flag + (f" {o.metavar}" if o.metavar else ""),
             "default": _default_text(o), "meaning": o.doc} for o in OPTIONS.values()]
    data = {"options": [{"key": o.key, "flag": o.flag, "target": o.target,
                         "default": o.default, "doc": o.doc} for o in OPTIONS.values()]}
    return Report("options", data, [Table("Step options", rows)])
