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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topomodel.errors import ParameterError, UsageError
from topomodel.files import plain_json, refuse_symlink
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
    Journal,
    journal_path,
    read_results,
    results_format_for,
    write_results,
)
from topomodel.sweep.pool import (
    check_outcomes,
    check_scheduler_address,
    connect_dask,
    pending_tasks,
    run_dask,
    run_pool,
)


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


# PLR0913: keyword-only options of an entry point, as networkx's; a record would hide them
def run_sweep(sweep: Sweep, results: str | Path, *, workers: int | None = None,  # noqa: PLR0913
              scheduler: Any = None, resume: bool = False, overwrite: bool = False,
              results_format: str | None = None, retry_failed: bool = False,
              progress: bool | None = None, evaluate: Evaluate = evaluate_point,
              use_file_scheduler: bool = False,
              started: Callable[[], object] | None = None) -> SweepOutcome:
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
        A Dask scheduler address (``tcp://``, ``tls://``, ...) or ``distributed.Client``:
        run there instead. The cluster must be trusted: Dask unpickles what it sends back.
    use_file_scheduler
        Run on the sweep file's ``dask`` scheduler when ``scheduler`` is not given;
        without it a sweep file naming one is refused (a file alone never picks a
        cluster).
    resume
        Skip points already in the journal or in an existing results file.
    overwrite
        Start over even if results or a journal exist (otherwise that is an error).
    retry_failed
        With ``resume``, run again the points that recorded an error.
    progress
        Show a progress bar on stderr (default: when stderr is a terminal).
    started
        Called once every check has passed and the run starts (the command line says
        there how many points run: not before an error that stops it).
    evaluate
        The function computing a point's metrics (tests replace it); it must pickle
        (a module-level function) to run in other processes. As with any process pool,
        a script calling this with several workers needs the ``if __name__ ==
        "__main__":`` guard.

    Raises
    ------
    UsageError
        Results that exist without ``resume``/``overwrite``, both of them, an
        unreachable scheduler or an unconfirmed one from the sweep file, a journal
        another sweep holds, a symbolic link where the results or the journal go.
    MalformedResult
        When a worker hands back something that is not its points' outcomes.
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
    refuse_symlink(path)
    scheduler = _scheduler(sweep, scheduler, use_file_scheduler)
    count = workers if workers is not None else _cores()
    if count < 1:
        raise ParameterError("workers", f"at least 1, got {count}")
    client: Any = None
    own_client = False
    if scheduler is not None:
        client, own_client = connect_dask(scheduler)
    try:  # connected (or local) before the journal exists: a failed start leaves none
        log = Journal(journal, sweep, truncate=overwrite)  # locked before anything is read
    except BaseException:
        if own_client:
            client.close()
        raise
    if started is not None:
        started()
    start = time.perf_counter()
    try:
        frame, ran, resumed = _run_locked(sweep, log, path, fmt, client, count, evaluate,
                                          resume=resume, retry_failed=retry_failed,
                                          progress=progress)
    except BaseException:
        if log.fresh and not log.appended:
            log.remove()  # nothing finished: no journal to resume from
        raise
    finally:
        log.close()
        if own_client:
            client.close()
    warnings = (f"{sweep.duplicates} duplicate point(s) were run once",) if (
        sweep.duplicates) else ()
    where = scheduler if scheduler is None or isinstance(scheduler, str) else str(
        getattr(getattr(scheduler, "scheduler", None), "address", "a Dask client"))
    return SweepOutcome(sweep, path, fmt, frame, ran, resumed,
                        time.perf_counter() - start, count, where, warnings)


def _scheduler(sweep: Sweep, given: Any, use_file_scheduler: bool) -> Any:
    """The scheduler to run on: the one given, else the sweep file's if confirmed.

    A Dask cluster runs this process's tasks and sends back pickles this process loads,
    so a sweep file (which may come from anyone) cannot pick one by itself."""
    if given is not None:
        return check_scheduler_address(given) if isinstance(given, str) else given
    if sweep.scheduler is None:
        return None
    if not use_file_scheduler:
        raise UsageError(
            f"{sweep.file}: names the Dask scheduler {sweep.scheduler!r}, which a sweep"
            " file cannot choose alone (a Dask cluster must be trusted: it sends back"
            f" pickles this process loads); confirm it with --scheduler {sweep.scheduler}"
            " or --use-file-scheduler")
    return check_scheduler_address(sweep.scheduler)


# PLR0913: one computation's arrays and options passed on as they are
def _run_locked(sweep: Sweep, log: Journal, path: Path, fmt: str, client: Any, count: int,  # noqa: PLR0913
                evaluate: Evaluate, *, resume: bool, retry_failed: bool,
                progress: bool | None) -> tuple[Any, int, int]:
    """Run the points still to do and write the results, all while ``log`` holds the
    journal's lock; the journal is removed before the lock is released, so a second
    sweep never sees a finished one's journal or has its results replaced by it.
    Returns (results frame, points computed, points resumed)."""
    index_of = {key: i for i, key in enumerate(sweep.keys)}
    needed = (*sweep.metrics, *OUTCOME_COLUMNS)
    stored: dict[int, dict[str, Any]] = {}
    if resume:
        for row in [*read_results(path, fmt), *log.rows()]:
            index = index_of.get(str(row.get("key")))
            if index is not None and all(n in row for n in needed) and not (
                    retry_failed and row.get("error")):
                stored[index] = row
    resumed = len(stored)
    todo = [i for i in range(len(sweep.points)) if i not in stored]
    context = SweepContext(sweep.digest, sweep.design_file, sweep.design_data, sweep.catalog,
                           sweep.constraints, sweep.job)
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
        if todo and client is not None:
            run_dask(context, pending_tasks(sweep, todo, count), client, evaluate, done)
        elif todo and count == 1:
            for index in todo:
                points = [(index, sweep.points[index])]
                done(check_outcomes(run_points(context, points, evaluate), points))
        elif todo:
            run_pool(context, pending_tasks(sweep, todo, count), count, evaluate, done)
    finally:
        if bar is not None:
            bar.close()
    frame = write_results(sweep, path, fmt, stored).to_pandas()
    log.remove()
    return frame, len(todo), resumed


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
