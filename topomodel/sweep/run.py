"""Running a sweep: every point through the step model, on a local process pool or a Dask
cluster, with its results kept safe.

Speed: points are grouped by the design they build; each worker keeps the last few built
fabrics (:data:`~topomodel.sweep.evaluate.FABRIC_CACHE_SIZE`), so a design is built once
per worker, not once per point. Safety: every finished point is appended to
``RESULTS.journal`` (JSON lines, locked against a second sweep) as soon as its worker
hands it back, so a Ctrl-C, a killed worker or a killed process loses no finished point;
``resume=True`` skips the points already in the journal or in a previous results file,
and the results file (Parquet or CSV, one row per point) is written atomically from them
at the end. A point that fails records its error in its row and the sweep goes on.

The parts live in :mod:`topomodel.sweep.evaluate` (one point, in the workers),
:mod:`topomodel.sweep.pool` (the local pool and Dask) and :mod:`topomodel.sweep.journal`
(the journal and the results file); this module runs the whole sweep.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topomodel.errors import UsageError
from topomodel.files import plain_json
from topomodel.sweep.evaluate import (
    Evaluate,
    Outcome,
    SweepContext,
    evaluate_point,
    run_points,
)
from topomodel.sweep.file import Sweep
from topomodel.sweep.journal import (
    OUTCOME_COLUMNS,
    _Journal,
    _read_journal,
    _read_results,
    _write_results,
    journal_path,
    results_format_for,
)
from topomodel.sweep.pool import _run_dask, _run_pool, _tasks


@dataclass(frozen=True)
class SweepOutcome:
    """A finished sweep: where its results are, the table, and what ran."""

    sweep: Sweep
    path: Path
    results_format: str
    frame: Any  # pandas DataFrame of the results file
    ran: int  # points computed by this run
    resumed: int  # points taken from a previous run
    elapsed_s: float
    workers: int
    scheduler: str | None = None
    warnings: tuple[str, ...] = field(default=())


def run_sweep(sweep: Sweep, results: str | Path, *, workers: int | None = None,
              scheduler: Any = None, resume: bool = False, overwrite: bool = False,
              results_format: str | None = None, retry_failed: bool = False,
              progress: bool | None = None, evaluate: Evaluate = evaluate_point
              ) -> SweepOutcome:
    """Evaluate every point of ``sweep``; write one row per point to ``results``.

    Parameters
    ----------
    results
        The results file: Parquet, or CSV by a ``.csv`` suffix or ``results_format``.
        Finished points go to ``RESULTS.journal`` as they arrive; the results file is
        written from it (atomically) when every point is done, and the journal removed.
    workers
        Local processes (default: every core); 1 runs in this process.
    scheduler
        A Dask scheduler address or ``distributed.Client``: run there instead (default:
        the sweep file's ``dask`` setting, if any).
    resume
        Skip points already in the journal or in an existing results file.
    overwrite
        Start over even if results or a journal exist (otherwise that is an error).
    retry_failed
        With ``resume``, run again the points that recorded an error.
    progress
        Show a progress bar on stderr (default: when stderr is a terminal).
    evaluate
        The function computing a point's metrics (tests replace it); it must pickle
        (a module-level function) to run in other processes. As with any process pool,
        a script calling this with several workers needs the ``if __name__ ==
        "__main__":`` guard.

    Raises
    ------
    UsageError
        Results that exist without ``resume``/``overwrite``, both of them, an
        unreachable scheduler, a journal another sweep holds.
    KeyboardInterrupt
        Passed on after the finished points are safe in the journal.
    """
    path = Path(results)
    fmt = results_format_for(path, results_format)
    journal = journal_path(path)
    if resume and overwrite:
        raise UsageError("--resume continues a sweep and --overwrite starts it over: pick"
                         " one")
    if not resume and not overwrite and (path.exists() or journal.exists()):
        there = journal if journal.exists() else path
        raise UsageError(f"{there} exists: add --resume to continue that sweep or"
                         " --overwrite to start over")
    scheduler = scheduler if scheduler is not None else sweep.scheduler
    count = workers if workers is not None else _cores()
    if count < 1:
        raise UsageError("--workers must be at least 1")
    log = _Journal(journal, sweep, truncate=overwrite)  # locked before anything is read
    index_of = {key: i for i, key in enumerate(sweep.keys)}
    needed = (*sweep.metrics, *OUTCOME_COLUMNS)
    stored: dict[int, dict[str, Any]] = {}
    if resume:
        for row in [*_read_results(path, fmt), *_read_journal(journal)]:
            index = index_of.get(str(row.get("key")))
            if index is not None and all(n in row for n in needed) and not (
                    retry_failed and row.get("error")):
                stored[index] = row
    resumed = len(stored)
    todo = [i for i in range(len(sweep.points)) if i not in stored]
    context = SweepContext(sweep.digest, sweep.design_file, sweep.design_data, sweep.catalog,
                           sweep.constraints)
    start = time.perf_counter()
    bar = _progress(len(todo), sweep.name, progress)
    failed = 0

    def done(outcomes: list[Outcome]) -> None:
        nonlocal failed
        rows = [{"key": sweep.keys[o.index], **{m: o.metrics.get(m) for m in sweep.metrics},
                 "feasible": o.feasible, "violations": o.violations, "error": o.error,
                 "elapsed_s": o.elapsed_s} for o in outcomes]
        log.append(rows)
        for o, row in zip(outcomes, rows, strict=True):
            stored[o.index] = plain_json(row)
            failed += o.error is not None
        if bar is not None:
            bar.update(len(outcomes))
            if failed:
                bar.set_postfix(failed=failed, refresh=False)

    try:
        if todo and scheduler is not None:
            _run_dask(context, _tasks(sweep, todo, count), scheduler, evaluate, done)
        elif todo and count == 1:
            for index in todo:
                done(run_points(context, [(index, sweep.points[index])], evaluate))
        elif todo:
            _run_pool(context, _tasks(sweep, todo, count), count, evaluate, done)
    finally:
        if bar is not None:
            bar.close()
        log.close()
    frame = _write_results(sweep, path, fmt, stored).to_pandas()
    journal.unlink(missing_ok=True)
    warnings = (f"{sweep.duplicates} duplicate point(s) were run once",) if (
        sweep.duplicates) else ()
    where = scheduler if scheduler is None or isinstance(scheduler, str) else str(
        getattr(getattr(scheduler, "scheduler", None), "address", "a Dask client"))
    return SweepOutcome(sweep, path, fmt, frame, len(todo), resumed,
                        time.perf_counter() - start, count, where, warnings)


def _cores() -> int:
    """Cores this process may use."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _progress(total: int, name: str, show: bool | None) -> Any:
    if show is False or not total:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=name, unit="pt", file=sys.stderr, smoothing=0.05,
                disable=None if show is None else False, dynamic_ncols=True)
