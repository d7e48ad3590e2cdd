"""JSON Schema (draft 2020-12) for sweep files, from the tables the sweep loader reads.

The step options (:data:`topomodel.sweep.params.OPTIONS`, their readers described by
:func:`topomodel.inputs.schema.reader_schema` where it knows them), the metrics
(:data:`~topomodel.sweep.params.METRICS`) and the range keys
(:data:`~topomodel.sweep.ranges.RANGE_KEYS`) are read, not copied, so a new option or
metric shows up here without editing this module. The loader stays the authority:
constraints' expressions, a range's arithmetic and design overrides (checked against the
base design) are beyond what the schema says.
"""

from __future__ import annotations

from typing import Any

from topomodel.inputs.schema import DIALECT, reader_schema
from topomodel.sweep.file import TOP_KEYS
from topomodel.sweep.params import (
    DESIGN_PREFIX,
    JOBS,
    METRIC_BY_NAME,
    OPTIONS,
    SERVE_OPTIONS_BY_KEY,
)
from topomodel.sweep.ranges import RANGE_KEYS

_OTHER_KEYS = r"^(design\.[A-Za-z_].*|efficiency\.[A-Za-z_][A-Za-z0-9_]*)$"
"""Parameters beyond the named options: ``design.KEY.PATH`` overrides of the base
design and ``efficiency.TIER``."""


def _value(read: Any) -> dict[str, Any]:
    """The schema of one option's value, where :mod:`topomodel.inputs.schema` knows its reader
    (else any value: the loader checks it)."""
    try:
        schema = reader_schema(read, {})
    except TypeError:
        return {}
    schema.pop("_hint", None)
    return schema


def sweep_schema() -> dict[str, Any]:
    """The JSON Schema of a sweep file, as plain JSON-ready types.

    Examples
    --------
    >>> schema = sweep_schema()
    >>> schema["required"], schema["additionalProperties"]
    (['design'], False)
    >>> "tp" in schema["$defs"]["Settings"]["properties"]
    True
    >>> sorted(schema["$defs"]["Range"]["properties"])
    ['factor', 'format', 'num', 'start', 'step', 'stop']
    """
    every = {**OPTIONS, **SERVE_OPTIONS_BY_KEY}  # a serve sweep's too (job: serve)
    options = {key: {"description": opt.doc, **_value(opt.read)}
               for key, opt in every.items()}
    varied = {key: {"description": opt.doc, "$ref": "#/$defs/Values"}
              for key, opt in every.items()}
    any_value = {"description": f"{DESIGN_PREFIX}KEY.PATH (a design field, items as [N])"
                                " or efficiency.TIER"}
    metric_names = list(METRIC_BY_NAME)
    objective = {"type": "string",
                 "pattern": "^[+]?(" + "|".join(metric_names) + ")(:(min|max))?$"}
    block = {"type": "object", "minProperties": 1,
             "description": "A block of parameters: the product of their values (lists or"
                            " ranges), with zip groups walking together.",
             "properties": {**varied, "zip": {
                 "description": "parameters whose lists walk together (equal lengths)",
                 "oneOf": [{"$ref": "#/$defs/Zip"},
                           {"type": "array", "items": {"$ref": "#/$defs/Zip"}}]}},
             "patternProperties": {_OTHER_KEYS: {**any_value, "$ref": "#/$defs/Values"}},
             "additionalProperties": False}
    defs = {
        "Settings": {"type": "object", "description": "Settings every point shares.",
                     "properties": options,
                     "patternProperties": {_OTHER_KEYS: any_value},
                     "additionalProperties": False},
        "Block": block,
        "Zip": {"type": "object", "minProperties": 2,
                "additionalProperties": {"type": "array", "minItems": 1}},
        "Values": {"oneOf": [{"type": "array", "minItems": 1}, {"$ref": "#/$defs/Range"}],
                   "description": "A list of values, or a range."},
        "Range": {"type": "object", "required": ["start", "stop"],
                  "description": "{start, stop} with exactly one of step (stop included"
                                 " on the grid), num (evenly spaced) or factor (geometric);"
                                 " format turns each value into text ('{}:1').",
                  "properties": {k: {"type": "string", "pattern": r"\{\}"} if k == "format"
                                 else {"type": "number"} for k in RANGE_KEYS},
                  "oneOf": [{"required": [k]} for k in ("step", "num", "factor")],
                  "additionalProperties": False},
    }
    properties = {
        "name": {"type": "string", "description": "display name of the sweep"},
        "description": {"type": "string", "description": "free text about the sweep"},
        "job": {"enum": list(JOBS), "description": "what each point runs: step (the"
                " training step and its goodput, the default) or serve (a serving job;"
                " docs/serve.md)"},
        "design": {"type": "string", "pattern": r"\S",
                   "description": "the base design file, relative to this file"},
        "catalogs": {"type": "array", "items": {"type": "string"},
                     "description": "catalog files added for every point, relative to"
                                    " this file"},
        "fixed": {"$ref": "#/$defs/Settings"},
        "parameters": {"description": "one block, or a list of blocks whose points are"
                                      " run one after the other",
                       "oneOf": [{"$ref": "#/$defs/Block"},
                                 {"type": "array", "minItems": 1,
                                  "items": {"$ref": "#/$defs/Block"}}]},
        "metrics": {"type": "array", "minItems": 1,
                    "items": {"type": "string", "enum": metric_names},
                    "description": "the metrics recorded (default: all)"},
        "constraints": {"type": "array", "items": {"type": "string", "pattern": r"\S"},
                        "description": "expressions a feasible point meets, e.g."
                                       " 'comm_share <= 0.2'"},
        "pareto": {"type": "array", "items": objective, "minItems": 2, "maxItems": 2,
                   "description": "two metrics, e.g. [power_W, step_time_s]; +X or X:max"
                                  " for larger is better"},
        "dask": {"description": "a Dask scheduler address, or {scheduler: ADDRESS}",
                 "oneOf": [{"type": "string", "pattern": r"\S"},
                           {"type": "object", "required": ["scheduler"],
                            "properties": {"scheduler": {"type": "string"}},
                            "additionalProperties": False}]},
    }
    missing = set(TOP_KEYS) - set(properties)
    if missing:  # the loader reads a key this schema does not describe
        raise TypeError(f"sweep keys without a schema: {sorted(missing)}")
    return {
        "$schema": DIALECT,
        "title": "topomodel sweep file",
        "description": "A topomodel design-space sweep: a base design, fixed settings,"
                       " blocks of varied parameters, metrics, constraints (see"
                       " docs/sweeps.md).",
        "type": "object",
        "properties": properties,
        "required": ["design"],
        "additionalProperties": False,
        "$defs": defs,
    }
