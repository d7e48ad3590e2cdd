"""One output helper for every command: table, JSON, CSV or Markdown.

A command builds a :class:`Report`: ``data`` (plain types, units in the key names) is
what ``--format json`` prints; ``tables`` are what the other formats print.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from topomodel.files import plain_json

FORMATS = ("table", "json", "csv", "md")
JSON_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Table:
    """A titled table: rows are mappings from column name to a plain value."""

    title: str
    rows: Sequence[dict[str, Any]]


@dataclass(frozen=True)
class Report:
    """What a command prints: structured data for JSON, tables for the rest."""

    kind: str
    data: dict[str, Any]
    tables: Sequence[Table] = ()
    warnings: Sequence[str] = field(default=())
    text: str | None = None  # a short result said in words, for table and md


def nonfinite_result(report: Report) -> str | None:
    """Where ``report`` holds a NaN or an infinity (``data.step_time_s``, ``Tiers[2].util``),
    or ``None`` when every number in it is finite.

    A result is checked before it is printed: a non-finite one means the inputs are
    outside what the model computes, and printing ``nan`` as a figure would hide that.

    Examples
    --------
    >>> nonfinite_result(Report("x", {"a": [1.0, {"b_s": float("inf")}]}))
    'data.a[1].b_s'
    >>> nonfinite_result(Report("x", {"a": 1.0}, [Table("t", [{"c": 2}])])) is None
    True
    """
    stack: list[tuple[str, Any]] = [(f"{t.title}[{i}]", row) for t in report.tables
                                    for i, row in enumerate(t.rows)][::-1]
    stack.append(("data", report.data))
    while stack:  # depth first, in order: the last pushed is the next looked at
        where, value = stack.pop()
        if isinstance(value, dict):
            stack += [(f"{where}.{k}", v) for k, v in value.items()][::-1]
        elif isinstance(value, list | tuple):
            stack += [(f"{where}[{i}]", v) for i, v in enumerate(value)][::-1]
        elif isinstance(value, float) and not math.isfinite(value):
            return where
        elif hasattr(value, "dtype") and getattr(value, "ndim", 1) == 0 and (
                value.dtype.kind == "f" and not math.isfinite(float(value))):
            return where  # a numpy scalar
    return None


def render(report: Report, fmt: str) -> str:
    """Render ``report`` as ``fmt`` (one of :data:`FORMATS`).

    Examples
    --------
    >>> r = Report("demo", {"x_s": 1.5}, [Table("t", [{"a": 1, "b": "x"}])])
    >>> print(render(r, "md"))
    ## t
    <BLANKLINE>
    |   a | b   |
    |----:|:----|
    |   1 | x   |
    >>> print(render(r, "json"))
    {
      "schema": "topomodel.demo",
      "version": 1,
      "x_s": 1.5
    }
    """
    if fmt == "json":
        payload = {"schema": f"topomodel.{report.kind}", "version": JSON_SCHEMA_VERSION,
                   **report.data}
        if report.warnings:
            payload["warnings"] = list(report.warnings)
        return json.dumps(plain_json(payload), indent=2, allow_nan=False)
    parts = []
    tables = report.tables or [Table(report.kind, [_flat(report.data)])]
    if report.text is not None and fmt != "csv":
        parts.append(report.text)
        tables = []
    for table in tables:
        if fmt == "csv":
            parts.append(f"# {table.title}\n{_csv(table)}")
        else:
            parts.append(_text_table(table, fmt))
    if fmt != "csv":
        parts.extend(f"warning: {w}" for w in report.warnings)
    return "\n\n".join(parts).rstrip("\n")


def _text_table(table: Table, fmt: str) -> str:
    from tabulate import tabulate

    if not table.rows:
        return f"{table.title}: (none)"
    columns = _columns(table.rows)
    body = tabulate([[row.get(c, "") for c in columns] for row in table.rows],
                    headers=columns, tablefmt="pipe" if fmt == "md" else "simple",
                    disable_numparse=False, floatfmt=".4g")
    heading = f"## {table.title}\n" if fmt == "md" else f"{table.title}\n"
    return heading + "\n" + body if fmt == "md" else heading + body


def _csv(table: Table) -> str:
    buffer = io.StringIO()
    columns = _columns(table.rows)
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(table.rows)
    return buffer.getvalue().rstrip("\n")


def _flat(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if not isinstance(v, dict | list | tuple)}


def _columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    return list(columns)


