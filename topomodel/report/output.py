"""One output helper for every command: table, JSON, CSV or Markdown.

A command builds a :class:`Report`: ``data`` (plain types, units in the key names) is
what ``--format json`` prints; ``tables`` are what the other formats print.
"""

from __future__ import annotations

import csv
import io
import json
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


