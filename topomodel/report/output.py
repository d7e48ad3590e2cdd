"""One output helper for every command: table, JSON, CSV, Markdown or Parquet.

A command builds a :class:`Report`: ``data`` (plain types, units in the key names) is
what ``--format json`` prints; ``tables`` are what the other formats print. A table has
``rows`` for people (formatted text: ``"1.6 Tb/s"``, ``"37%"``) and ``records`` for
machines (plain numbers in the canonical unit, the unit in the column name:
``capacity_Bps``, ``time_s``, ``utilization`` 0-1); ``--format csv`` and ``parquet``
write the records.

CSV is one tidy table: every table's records one under the other, the first column
``table`` naming the table each row belongs to, the columns the union of the tables'
(a cell a table does not have is empty); with a directory (:func:`write_tables`) it is
one file per table, ``DIR/<table>.csv``. Parquet always goes to a directory,
``DIR/<table>.parquet``.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from topomodel.errors import TopomodelError, UsageError
from topomodel.files import plain_json

FORMATS = ("table", "json", "csv", "md", "parquet")
FILE_FORMATS = ("csv", "parquet")
"""Formats that :func:`write_tables` writes as one file per table."""
JSON_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Table:
    """A titled table: ``rows`` for people (column name to formatted value) and, where a
    row's values are formatted, ``records`` for machines (plain numbers, units in the
    column names); ``name`` is its machine name (default: the title, lower case, words
    joined by ``_``)."""

    title: str
    rows: Sequence[dict[str, Any]]
    records: Sequence[dict[str, Any]] | None = None
    name: str = ""

    @property
    def key(self) -> str:
        """The table's machine name: the ``table`` column of CSV, the file name.

        Examples
        --------
        >>> Table("Bill of materials", []).key, Table("x", [], name="bom").key
        ('bill_of_materials', 'bom')
        """
        return self.name or re.sub(r"[^a-z0-9]+", "_", self.title.lower()).strip("_")

    @property
    def machine_rows(self) -> Sequence[dict[str, Any]]:
        """The rows CSV and Parquet write: ``records``, else ``rows`` (already plain)."""
        return self.records if self.records is not None else self.rows


@dataclass(frozen=True)
class Report:
    """What a command prints: structured data for JSON, tables for the rest."""

    kind: str
    data: dict[str, Any]
    tables: Sequence[Table] = ()
    warnings: Sequence[str] = field(default=())
    text: str | None = None  # a short result said in words, for table and md
    bare_json: bool = False  # JSON is ``data`` alone, without schema and version keys


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
    for t in report.tables:
        for i, row in enumerate(t.rows):
            where = nonfinite_in(row, f"{t.title}[{i}]")
            if where is not None:
                return where
    return nonfinite_in(report.data, "data")


def nonfinite_in(value: Any, where: str) -> str | None:
    """Where ``value`` (named ``where``) holds a NaN or an infinity, looking into dicts,
    lists, tuples and dataclass results (their fields by name), or ``None``.

    Examples
    --------
    >>> from topomodel.traffic.layout import Layout
    >>> nonfinite_in({"layout": Layout(tp=2), "t_s": (1.0, float("nan"))}, "step")
    'step.t_s[1]'
    """
    stack: list[tuple[str, Any]] = [(where, value)]
    while stack:  # depth first, in order: the last pushed is the next looked at
        where, value = stack.pop()
        if isinstance(value, dict):
            stack += [(f"{where}.{k}", v) for k, v in value.items()][::-1]
        elif isinstance(value, list | tuple):
            stack += [(f"{where}[{i}]", v) for i, v in enumerate(value)][::-1]
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            stack += [(f"{where}.{f.name}", getattr(value, f.name))
                      for f in dataclasses.fields(value)][::-1]
        elif isinstance(value, float) and not math.isfinite(value):
            return where
        elif hasattr(value, "dtype") and getattr(value, "ndim", 1) == 0 and (
                value.dtype.kind == "f" and not math.isfinite(float(value))):
            return where  # a numpy scalar
    return None


def refuse_nonfinite(value: Any, where: str = "data") -> None:
    """Raise :class:`~topomodel.errors.TopomodelError` where ``value`` (a
    :class:`Report`, or a result named ``where``) holds a NaN or an infinity: checked
    before it is printed, written or drawn (a figure's axes cannot span one).

    Examples
    --------
    >>> refuse_nonfinite({"step_time_s": float("inf")}, "step")
    Traceback (most recent call last):
    ...
    topomodel.errors.TopomodelError: a result is not a finite number (step.step_time_s): \
the inputs are outside the range the model computes
    """
    found = (nonfinite_result(value) if isinstance(value, Report)
             else nonfinite_in(value, where))
    if found is not None:
        raise TopomodelError(f"a result is not a finite number ({found}): the inputs are"
                             " outside the range the model computes")


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
    >>> print(render(Report("demo", {}, [Table("t", [{"a": "1,000 W"}],
    ...                                        [{"a_W": 1000.0}])]), "csv"))
    table,a_W
    t,1000.0
    """
    if fmt == "parquet":
        raise UsageError("--format parquet writes files: give the directory with -o DIR")
    if fmt == "csv":
        return _csv(_tables(report, warnings=True)).rstrip("\n")
    if fmt == "json" and report.bare_json:
        return json.dumps(plain_json(report.data), indent=2, allow_nan=False)
    if fmt == "json":
        payload = {"schema": f"topomodel.{report.kind}", "version": JSON_SCHEMA_VERSION,
                   **report.data}
        if report.warnings:
            payload["warnings"] = list(report.warnings)
        return json.dumps(plain_json(payload), indent=2, allow_nan=False)
    parts = []
    tables = list(report.tables) if fmt == "md" else _tables(report)
    if report.text is not None:
        parts.append(report.text if fmt != "md" else _md_text(report.text))
        tables = tables if fmt == "md" else []  # Markdown keeps the tables too
    parts.extend(_text_table(table, fmt) for table in tables)
    parts.extend(f"warning: {w}" if fmt != "md" else f"> **warning:** {_md_text(w)}"
                 for w in report.warnings)
    return "\n\n".join(parts).rstrip("\n")


def _tables(report: Report, *, warnings: bool = False) -> list[Table]:
    """The report's tables (a report without any: one row of its plain data), and with
    ``warnings`` a ``warnings`` table of them."""
    tables = list(report.tables) or [Table(report.kind, [_flat(report.data)])]
    if warnings and report.warnings:
        tables.append(Table("warnings", [{"warning": w} for w in report.warnings]))
    return tables


def _md_text(text: str) -> str:
    """Plain text as Markdown: each line a paragraph line, code-like text kept."""
    return "\n".join(line.replace("|", "\\|").replace("*", "\\*") + "  "
                     for line in text.splitlines()).rstrip()


def write_tables(report: Report, fmt: str, directory: str | Path) -> list[Path]:
    """Write every table of ``report`` as its own file ``DIR/<table>.csv`` or
    ``.parquet`` (``fmt``); return the files written, all or none
    (:func:`~topomodel.files.atomic_files`).

    Raises
    ------
    UsageError
        If ``directory`` is a file, a symbolic link or a system folder.
    OSError
        If the directory cannot be written.
    """
    from topomodel.files import atomic_files, refuse_output_folder

    target = Path(directory)
    refuse_output_folder(target)
    if target.exists() and not target.is_dir():
        raise UsageError(f"{target}: is a file; -o takes a directory for --format {fmt}")

    def writer(table: Table) -> Callable[[IO[bytes]], object]:
        if fmt == "csv":
            return lambda stream: stream.write(_csv([table], long_form=False).encode())
        return lambda stream: stream.write(_parquet(table))

    return atomic_files(target, [(f"{table.key}.{fmt}", writer(table))
                                 for table in _tables(report, warnings=True)])


def machine_value(value: Any) -> Any:
    """A cell as CSV and Parquet hold it: numbers plain (NaN and infinity empty), lists
    joined by ``;``, nested mappings as JSON.

    Examples
    --------
    >>> machine_value(1234567.0), machine_value(float("nan")), machine_value(("a", "b"))
    (1234567.0, None, 'a;b')
    """
    value = plain_json(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return ";".join(str(machine_value(v)) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return value


def frame(table: Table) -> Any:
    """The machine rows of ``table`` as a pandas DataFrame (columns in order of first
    appearance)."""
    import pandas as pd

    rows = table.machine_rows
    columns = table_columns(rows)
    return pd.DataFrame([[machine_value(r.get(c)) for c in columns] for r in rows],
                        columns=columns)


def _parquet(table: Table) -> bytes:
    buffer = io.BytesIO()
    data = frame(table)
    for column in data.columns:  # one type per column: mixed text and numbers as text
        kinds = {type(v) for v in data[column] if v is not None}
        if len(kinds) > 1 and str in kinds:
            data[column] = data[column].map(lambda v: None if v is None else str(v))
    data.to_parquet(buffer, index=False)
    return buffer.getvalue()


def _text_table(table: Table, fmt: str) -> str:
    from tabulate import tabulate

    if not table.rows:
        return f"{table.title}: (none)"
    columns = table_columns(table.rows)
    body = tabulate([[row.get(c, "") for c in columns] for row in table.rows],
                    headers=columns, tablefmt="pipe" if fmt == "md" else "simple",
                    disable_numparse=False, floatfmt=".4g")
    heading = f"## {table.title}\n" if fmt == "md" else f"{table.title}\n"
    return heading + "\n" + body if fmt == "md" else heading + body


def _csv(tables: Sequence[Table], *, long_form: bool = True) -> str:
    """Tables as one CSV: with ``long_form`` a first column ``table`` and the union of
    the columns."""
    buffer = io.StringIO()
    columns = table_columns([r for t in tables for r in t.machine_rows])
    if long_form:
        columns = ["table", *[c for c in columns if c != "table"]]
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for table in tables:
        for row in table.machine_rows:
            cells = {**row, "table": table.key} if long_form else row
            writer.writerow(["" if (v := machine_value(cells.get(c))) is None else v
                             for c in columns])
    return buffer.getvalue()


def _flat(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if not isinstance(v, dict | list | tuple)}


def table_columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    return list(columns)


