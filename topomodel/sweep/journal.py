"""The journal and the results file of a sweep: where finished points are kept safe.

Every finished point is appended to ``RESULTS.journal`` (JSON lines, locked against a
second sweep, a torn last line dropped) as soon as it arrives; the results file
(Parquet or CSV, one row per point, with its schema and the sweep in its metadata) is
written atomically from the stored rows at the end. Both are read back to resume.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from topomodel.errors import UsageError
from topomodel.files import plain_json, refuse_symlink
from topomodel.sweep.file import Sweep
from topomodel.sweep.params import METRIC_BY_NAME, canonical

JOURNAL_SUFFIX = ".journal"
JOURNAL_VERSION = 1
RESULTS_FORMATS = ("parquet", "csv")
OUTCOME_COLUMNS = ("feasible", "violations", "error", "elapsed_s")


def results_format_for(path: str | Path, requested: str | None = None) -> str:
    """``parquet`` or ``csv``: as requested, else by the file's suffix, else Parquet.

    Examples
    --------
    >>> [results_format_for(name) for name in ("out/results.csv", "r.parquet", "r")]
    ['csv', 'parquet', 'parquet']
    """
    suffix = Path(path).suffix.lower()
    by_suffix = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}.get(suffix)
    if requested is not None and requested not in RESULTS_FORMATS:
        raise UsageError(f"results format is one of {', '.join(RESULTS_FORMATS)}")
    if requested and by_suffix and requested != by_suffix:
        raise UsageError(f"{path}: a {suffix} file cannot hold {requested} results")
    return requested or by_suffix or "parquet"


def journal_path(results: str | Path) -> Path:
    """Where finished points are journaled until the results file is written."""
    path = Path(results)
    return path.with_name(path.name + JOURNAL_SUFFIX)


class Journal:
    """Append-only JSON lines, one finished point each, written as they arrive; the
    first line names the sweep.

    Opened without following a symbolic link (one in its place is refused: it would
    be trimmed, truncated or appended to wherever it points) and locked; the lock is
    taken on the file that is still at ``path`` (a sweep finishing removes its journal
    while holding the lock, so a sweep that opened it just before retries on a new
    file instead of writing to a deleted one)."""

    def __init__(self, path: Path, sweep: Sweep, *, truncate: bool = False) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.fd = self._open_locked(path)
        self.appended = 0  # rows this run wrote
        if truncate:  # starting over: emptied under the lock, never under another sweep
            os.ftruncate(self.fd, 0)
        size = os.fstat(self.fd).st_size
        if size:  # a process killed mid-write leaves a torn last line: drop it
            keep = os.pread(self.fd, size, 0).rfind(b"\n") + 1
            if keep < size:
                os.ftruncate(self.fd, keep)
            size = keep
        self.fresh = not size  # nothing of an earlier run in it
        if not size:
            self._write([{"topomodel_sweep_journal": JOURNAL_VERSION, "sweep": sweep.file,
                          "digest": sweep.digest, "metrics": list(sweep.metrics)}])

    @staticmethod
    def _open_locked(path: Path) -> int:
        flags = (os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0))
        while True:
            try:
                fd = os.open(path, flags, 0o644)
            except OSError as exc:
                if exc.errno == errno.ELOOP or path.is_symlink():
                    raise UsageError(f"{path}: is a symbolic link; refusing to write the"
                                     " journal through it (remove the link)") from None
                raise
            opened = os.fstat(fd)
            if not stat.S_ISREG(opened.st_mode):
                os.close(fd)
                raise UsageError(f"{path}: is not a regular file; cannot journal there")
            try:
                import fcntl

                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except ImportError:  # no advisory locks on this platform
                return fd
            except OSError:
                os.close(fd)
                raise UsageError(f"{path}: another sweep is writing these results"
                                 ) from None
            try:
                now = os.lstat(path)
            except FileNotFoundError:
                now = None
            if now is not None and (now.st_dev, now.st_ino) == (opened.st_dev,
                                                                 opened.st_ino):
                return fd
            os.close(fd)  # removed or replaced before the lock was ours: open it again

    def rows(self) -> list[dict[str, Any]]:
        """The points in the journal, as this open file holds them (not re-read by
        name, which could be another file by now)."""
        size = os.fstat(self.fd).st_size
        return _journal_rows(os.pread(self.fd, size, 0).decode("utf-8", "replace"))

    def append(self, rows: Sequence[dict[str, Any]]) -> None:
        """Write ``rows``, one line each, with no buffering."""
        self._write(rows)
        self.appended += len(rows)

    def _write(self, rows: Sequence[dict[str, Any]]) -> None:
        data = "".join(json.dumps(plain_json(r), allow_nan=False) + "\n" for r in rows)
        view = memoryview(data.encode())
        while view:
            view = view[os.write(self.fd, view):]

    def remove(self) -> None:
        """Delete the journal file (the lock is still held until :meth:`close`)."""
        self.path.unlink(missing_ok=True)

    def close(self) -> None:
        """Release the journal (its lock goes with it)."""
        os.close(self.fd)


def _journal_rows(text: str) -> list[dict[str, Any]]:
    """The points of a journal's text (its first line names the sweep)."""
    rows: list[dict[str, Any]] = []
    for line in text.splitlines()[1:]:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn line of a killed process
        if isinstance(row, dict) and "key" in row:
            rows.append(row)
    return rows


def read_results(path: Path, fmt: str) -> list[dict[str, Any]]:
    """Rows of a previous results file (for resume); none if there is no file."""
    if not path.exists():
        return []
    refuse_symlink(path)
    try:
        if fmt == "csv":
            from pyarrow import csv

            table = csv.read_csv(path, convert_options=csv.ConvertOptions(
                strings_can_be_null=True, column_types={"key": "string"}))
        else:
            import pyarrow.parquet as pq

            table = pq.read_table(path)
    except Exception as exc:
        raise UsageError(f"{path}: cannot read the previous results to resume: {exc}"
                         ) from None
    return [r for r in table.to_pylist() if r.get("key")]


def _arrow_schema(sweep: Sweep) -> Any:
    import pyarrow as pa

    from topomodel import __version__

    types = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "str": pa.string(),
             "json": pa.string()}
    fields = [pa.field("point", pa.int64()), pa.field("key", pa.string())]
    fields += [pa.field(c, types[sweep.column_types[c]]) for c in sweep.columns]
    fields += [pa.field(m, types[METRIC_BY_NAME[m].dtype]) for m in sweep.metrics]
    fields += [pa.field("feasible", pa.bool_()), pa.field("violations", pa.string()),
               pa.field("error", pa.string()), pa.field("elapsed_s", pa.float64())]
    meta = {"sweep": sweep.file, "name": sweep.name, "design": sweep.design_file,
            "digest": sweep.digest, "topomodel": __version__}
    return pa.schema(fields, metadata={"topomodel.sweep": json.dumps(meta)})


def _full_row(sweep: Sweep, index: int, stored: Mapping[str, Any]) -> dict[str, Any]:
    """A results row: the point's index, key and parameters, and what it recorded."""
    point = sweep.points[index]
    row: dict[str, Any] = {"point": index, "key": sweep.keys[index]}
    for column in sweep.columns:
        value = sweep.value(point, column)
        kind = sweep.column_types[column]
        row[column] = (None if value is None else canonical(value)) if kind == "json" else (
            float(value) if kind == "float" and value is not None else value)
    row.update((name, plain_json(stored.get(name)))
               for name in (*sweep.metrics, *OUTCOME_COLUMNS))
    return row


def write_results(sweep: Sweep, path: Path, fmt: str, stored: Mapping[int, Mapping[str, Any]]
                  ) -> Any:
    """Write the results of the points in ``stored`` (by point index) as ``fmt``,
    atomically (a temporary file, then a rename); return the table (pyarrow)."""
    import pyarrow as pa
    from pyarrow import csv, parquet

    from topomodel.files import atomic_write

    rows = [_full_row(sweep, i, stored[i]) for i in sorted(stored)]
    table = pa.Table.from_pylist(rows, schema=_arrow_schema(sweep))
    atomic_write(path, lambda stream: (csv.write_csv if fmt == "csv" else parquet.write_table)(
        table, stream))
    return table
