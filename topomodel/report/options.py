"""The job's options as a table (``topomodel options``): key, flag, default, meaning and
the model each feeds, read from :data:`topomodel.analysis.options.OPTIONS`, the one
declaration that the CLI flags, the sweep parameters and the review's assumptions
share."""

from __future__ import annotations

from topomodel.analysis.options import OPTIONS, StepOption
from topomodel.report.output import Report, Table


def feeds(option: StepOption) -> str:
    """The model an option feeds: ``decode``, ``goodput``, ``cost`` or (every other)
    ``step``.

    Examples
    --------
    >>> feeds(OPTIONS["tp"]), feeds(OPTIONS["restart_time"]), feeds(OPTIONS["batch"])
    ('step', 'goodput', 'decode')
    >>> feeds(OPTIONS["pue"])
    'cost'
    """
    where = option.target.partition(".")[0]
    return where if where in ("goodput", "decode", "serve", "cost") else "step"


def options_report() -> Report:
    """Every option: its sweep key, command-line flag, default, meaning and the model it
    feeds (the step's also set route's and draw's time model and what-ifs; decode's are
    the decode verb's only, not sweep keys)."""
    rows = [{"key": o.key, "flag": o.flag + (f" {o.metavar}" if o.metavar else ""),
             "default": o.default_text(), "for": feeds(o), "meaning": o.doc}
            for o in OPTIONS.values()]
    data = {"options": [{"key": o.key, "flag": o.flag, "target": o.target,
                         "default": o.default, "doc": o.doc} for o in OPTIONS.values()]}
    from topomodel.inputs.units import KINDS

    records = [{"key": o.key, "flag": o.flag, "target": o.target,
                "default": o.default if not isinstance(o.default, dict | list | tuple)
                else o.default_text(),
                "default_unit": KINDS[o.quantity_kind].canonical if o.quantity_kind else "",
                "for": feeds(o), "meaning": o.doc} for o in OPTIONS.values()]
    return Report("options", data, [Table("Step options", rows, records, name="options")])
