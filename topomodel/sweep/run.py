"""Running a sweep: every point through the step model, on a local process pool or a Dask
cluster, with its results kept safe.

Speed: points are grouped by the design they build; each worker keeps the last few
built fabrics (:data:`FABRIC_CACHE_SIZE`), so a design is built once per worker, not
once per point. Safety: every finished point is appended to ``RESULTS.journal`` (JSON
lines, locked against a second sweep) as soon as its worker hands it back, so a Ctrl-C,
a killed worker or a killed process loses no finished point; ``resume=True`` skips the
points already in the journal or in a previous results file, and the results file
(Parquet or CSV, one row per point) is written atomically from them at the end. A point
that fails records its error in its row and the sweep goes on.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from topomodel.catalog import Catalog, Model
from topomodel.design import load_design
from topomodel.errors import InputError, TopomodelError, UsageError
from topomodel.report.output import _plain
from topomodel.sweep.constraints import compiled, constraint_holds
from topomodel.sweep.file import Sweep
from topomodel.sweep.params import (
    EFFICIENCY_PREFIX,
    METRIC_BY_NAME,
    OVERLAP_PREFIX,
    STEP_DEFAULTS,
    Settings,
    apply_overrides,
    canonical,
    design_overrides,
)

MAX_POINTS_PER_TASK = 8
"""Points sent to a worker at once. Several amortise the hand-over on small designs;
few keep the progress bar moving and the work spread on large ones (a 16k-accelerator
point takes about half a second)."""

FABRIC_CACHE_SIZE = 4
"""Built fabrics each worker keeps (least recently used dropped). Points are sent grouped
by design, so a handful suffices (a whole process building a 131k-accelerator fabric
peaks at about 300 MiB: benchmarks/README.md)."""

DASK_CONNECT_TIMEOUT = "10s"
"""How long to try reaching a Dask scheduler before giving up."""

JOURNAL_SUFFIX = ".journal"
JOURNAL_VERSION = 1
RESULTS_FORMATS = ("parquet", "csv")
OUTCOME_COLUMNS = ("feasible", "violations", "error", "elapsed_s")


# Evaluating one point (runs in the workers) -------------------------------------------


@dataclass(frozen=True)
class SweepContext:
    """What every worker needs, sent once: the base design, the catalog, constraints."""

    digest: str
    design_file: str
    design_data: Any
    catalog: Catalog
    constraints: tuple[str, ...]


@dataclass(frozen=True)
class Outcome:
    """A point's result as a worker hands it back."""

    index: int
    metrics: dict[str, Any]
    feasible: bool
    violations: str | None
    error: str | None
    elapsed_s: float


Evaluate = Callable[[SweepContext, Mapping[str, Any]], dict[str, Any]]

_CACHE: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_CACHE_LOCK = threading.Lock()


def evaluate_point(context: SweepContext, params: Mapping[str, Any]) -> dict[str, Any]:
    """Every metric of :data:`~topomodel.sweep.params.METRICS` for one point (a training
    step on its design).

    Raises
    ------
    TopomodelError
        When the design cannot be built or the layout does not fit (the caller records
        it as the point's error).
    """
    from topomodel.analysis.goodput import job_goodput
    from topomodel.analysis.step import step_time
    from topomodel.analysis.studies import fill_dp
    from topomodel.analysis.timing import TimeModel
    from topomodel.traffic.layout import Layout
    from topomodel.units import parse

    s = Settings(params, context.design_data)
    fabric, design_metrics = _fabric(context, design_overrides(params),
                                     tuple(s["fail"] or ()), float(s["scaleout_factor"]))
    model = context.catalog.get(s["model"], Model)
    layout = Layout(tp=s["tp"], pp=s["pp"], dp=max(s["dp"], 1), ep=s["ep"], cp=s["cp"],
                    micro_batch=s["micro_batch"], global_batch=s["global_batch"],
                    seq=s["seq"], sequence_parallel=s["sequence_parallel"],
                    dp_mode=s["dp_mode"], interleave=s["interleave"],
                    recompute=s["recompute"], order=s["order"])
    if not s["dp"]:  # fill the fabric; the global batch stays what the point says
        layout = fill_dp(fabric.accelerator_count, layout)
    overlap = {kind: s[OVERLAP_PREFIX + kind] for kind in STEP_DEFAULTS.overlap}
    efficiency = {k.removeprefix(EFFICIENCY_PREFIX): float(v) for k, v in params.items()
                  if k.startswith(EFFICIENCY_PREFIX)}
    time_model = TimeModel(efficiency=efficiency)
    if s["overhead"] is not None:
        time_model = replace(time_model, per_message_overhead_s=parse(s["overhead"], "time"))
    assumptions = replace(
        STEP_DEFAULTS, overlap=overlap, grad_dtype=s["grad_precision"],
        compute_efficiency=s["compute_efficiency"], hot_expert_factor=s["hot_expert"],
        jitter_cv=s["jitter_cv"], straggler_share=s["straggler_share"],
        straggler_slowdown=s["straggler_slowdown"], time=time_model,
        dp_bucket_bytes=(parse(s["bucket"], "size") if s["bucket"] is not None
                         else STEP_DEFAULTS.dp_bucket_bytes))
    r = step_time(fabric, model, layout, assumptions, routing=s["routing"])
    good = job_goodput(fabric, model, layout, assumptions, r, routing=s["routing"],
                       route_degradation=False)
    seq = layout.seq or model.sequence
    power = design_metrics["power_W"]
    return {
        **design_metrics,
        "step_time_s": r.step_time_s, "compute_s": r.compute_s, "bubble_s": r.bubble_s,
        "exposed_comm_s": r.exposed_comm_s, "wait_s": r.wait_s,
        "comm_share": r.comm_share,
        "bandwidth_wall_s": r.walls["bandwidth_s"], "latency_wall_s": r.walls["latency_s"],
        "topology_wall_s": r.walls["topology_s"], "sync_wall_s": r.walls["sync_s"],
        "mfu": r.mfu, "hfu": r.hfu, "tokens_per_s": r.tokens_per_s,
        "interruptions_per_day": good.interruptions_per_day,
        "effective_time_fraction": good.effective_time_fraction,
        "goodput_tokens_per_s": good.goodput_tokens_per_s,
        "tokens_per_J": r.tokens_per_s / power if power else math.nan,
        "memory_bytes": r.memory["total_bytes"], "fits": r.fits,
        "world": r.layout.world, "dp_used": r.layout.dp,
        "global_batch_used": round(r.tokens_per_s * r.step_time_s / seq),
        "warnings": "; ".join(r.warnings) or None,
    }


def _fabric(context: SweepContext, overrides: Mapping[str, Any], fails: tuple[str, ...],
            factor: float) -> tuple[Any, dict[str, Any]]:
    """The built fabric of a point and its design-level metrics, from the worker's cache
    when a recent point used the same design."""
    from topomodel.analysis.studies import scale_scaleout
    from topomodel.fabric.build import build_fabric
    from topomodel.fabric.failures import with_failures

    key = (context.digest, canonical(overrides), fails, factor)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
    if hit is None:
        try:
            if fails or factor != 1.0:
                base, _ = _fabric(context, overrides, (), 1.0)
                fabric = with_failures(base, fails) if fails else base
                fabric = scale_scaleout(fabric, factor) if factor != 1.0 else fabric
            else:
                import yaml

                data = apply_overrides(context.design_data, overrides)
                design, _ = load_design(context.design_file, text=yaml.safe_dump(data),
                                        catalog=context.catalog)
                fabric = build_fabric(design, context.catalog)
            hit = (fabric, _design_metrics(fabric))
        except TopomodelError as exc:
            hit = exc  # a design that cannot be built fails every point alike
        with _CACHE_LOCK:
            _CACHE[key] = hit
            while len(_CACHE) > FABRIC_CACHE_SIZE:
                _CACHE.popitem(last=False)
    if isinstance(hit, TopomodelError):
        raise hit
    fabric, metrics = hit
    return fabric, dict(metrics)


def _design_metrics(fabric: Any) -> dict[str, Any]:
    """Size, bandwidth, parts and power of a built fabric."""
    from topomodel.analysis.bisection import closed_form, injection_Bps
    from topomodel.analysis.bom import bill_of_materials, power_summary

    bom = bill_of_materials(fabric)
    power = power_summary(bom, fabric.accelerator_count)

    def count(category: str) -> int:
        return sum(line.count for line in bom if line.category == category)

    bisection, _ = closed_form(fabric)
    return {
        "accelerators": fabric.accelerator_count,
        "injection_Bps": injection_Bps(fabric),
        "bisection_Bps": math.nan if bisection is None else bisection,
        "power_W": power.total_W, "accelerator_power_W": power.accelerators_W,
        "network_power_W": power.network_W, "optics_power_W": power.optics_W,
        "network_W_per_accelerator": power.network_W_per_accelerator,
        "switches": count("switch"), "scaleup_switches": count("scaleup_switch"),
        "nics": count("nic"), "cables": count("cable"),
        "optical_modules": count("module"), "fibres": count("fibre"),
        "power_unknown": ", ".join(power.unknown) or None,
    }


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, InputError):  # located in a generated design text: drop file:line
        return "; ".join(f"{p.key_path}: {p.message}" if p.key_path else p.message
                         for p in exc.problems)
    if isinstance(exc, TopomodelError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def run_points(context: SweepContext, points: Sequence[tuple[int, Mapping[str, Any]]],
               evaluate: Evaluate = evaluate_point) -> list[Outcome]:
    """Evaluate points in this process; a point that raises records its error."""
    return [_run_one(context, index, params, evaluate) for index, params in points]


def _run_one(context: SweepContext, index: int, params: Mapping[str, Any],
             evaluate: Evaluate) -> Outcome:
    start = time.perf_counter()
    try:
        metrics = evaluate(context, params)
    except Exception as exc:  # the point fails, the sweep goes on
        return Outcome(index, {}, False, None, _error_text(exc), time.perf_counter() - start)
    values = Settings({**params, **metrics}, context.design_data)
    broken = [text for text in context.constraints
              if not constraint_holds(compiled(text), values)]
    return Outcome(index, metrics, not broken, "; ".join(broken) or None, None,
                   time.perf_counter() - start)


def _failed(points: Sequence[tuple[int, Any]], error: str) -> list[Outcome]:
    """Outcomes recording ``error`` for points that returned nothing."""
    return [Outcome(i, {}, False, None, error, 0.0) for i, _ in points]


# Local pool and Dask ---------------------------------------------------------------------


@dataclass
class _Task:
    points: list[tuple[int, dict[str, Any]]]
    isolated: bool = False  # rerun alone after its worker died


def _tasks(sweep: Sweep, todo: Sequence[int], workers: int) -> list[_Task]:
    """Points to run, grouped by the design they build, in chunks."""
    groups: dict[str, list[int]] = {}
    for index in todo:
        groups.setdefault(canonical(design_overrides(sweep.points[index])), []).append(index)
    tasks = []
    for members in groups.values():
        size = max(1, min(MAX_POINTS_PER_TASK, math.ceil(len(members) / (2 * workers))))
        for start in range(0, len(members), size):
            tasks.append(_Task([(i, sweep.points[i]) for i in members[start:start + size]]))
    return tasks


_WORKER: dict[str, Any] = {}


def _worker_init(context: SweepContext, evaluate: Evaluate) -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    _WORKER["context"], _WORKER["evaluate"] = context, evaluate


def _worker_run(points: list[tuple[int, dict[str, Any]]]) -> list[Outcome]:
    return run_points(_WORKER["context"], points, _WORKER["evaluate"])


def _run_pool(context: SweepContext, tasks: list[_Task], workers: int, evaluate: Evaluate,
              done: Callable[[list[Outcome]], None]) -> None:
    """Run tasks on a local process pool, at most ``workers`` in flight. When a worker
    dies, the pool is rebuilt and the tasks that were in flight rerun one point at a
    time; a point that kills its worker alone is recorded as failed."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    methods = multiprocessing.get_all_start_methods()
    mp = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if "forkserver" in methods:
        mp.set_forkserver_preload(["topomodel.sweep.run", "topomodel.analysis.step",
                                   "topomodel.fabric.build"])

    def pool() -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=workers, mp_context=mp,
                                   initializer=_worker_init, initargs=(context, evaluate))

    queue, suspects = deque(tasks), deque[_Task]()
    inflight: dict[Future[list[Outcome]], _Task] = {}
    executor = pool()
    try:
        while queue or suspects or inflight:
            window = 1 if suspects else workers
            while len(inflight) < window and (suspects or queue):
                task = suspects.popleft() if suspects else queue.popleft()
                inflight[executor.submit(_worker_run, task.points)] = task
            finished, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
            broken = False
            for future in finished:
                task = inflight.pop(future)
                try:
                    outcomes = future.result()
                except BrokenProcessPool:
                    broken = True
                    inflight[future] = task  # handled with the rest below
                    continue
                except Exception as exc:  # e.g. a result that cannot be sent back
                    outcomes = _failed(task.points, _error_text(exc))
                done(outcomes)
            if broken:
                for future, task in inflight.items():
                    if future.done() and future.exception() is None:
                        done(future.result())  # finished just before the others broke
                    elif task.isolated:
                        done(_failed(task.points, "the worker process died while"
                                     " computing this point (killed, or out of memory)"))
                    else:
                        suspects.extend(_Task([p], isolated=True) for p in task.points)
                inflight.clear()
                executor.shutdown(wait=True, cancel_futures=True)
                executor = pool()
    except BaseException:
        for process in list((getattr(executor, "_processes", None) or {}).values()):
            process.terminate()
        executor.shutdown(wait=True, cancel_futures=True)
        raise
    executor.shutdown(wait=True)


def _run_dask(context: SweepContext, tasks: list[_Task], scheduler: Any, evaluate: Evaluate,
              done: Callable[[list[Outcome]], None]) -> None:
    """Run tasks on a Dask distributed cluster (``scheduler``: an address or a Client)."""
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise UsageError("a Dask scheduler needs dask.distributed: pip install"
                         " 'topomodel[dask]'") from None
    own = isinstance(scheduler, str)
    try:
        client = (Client(scheduler,  # type: ignore[no-untyped-call]
                         timeout=DASK_CONNECT_TIMEOUT)
                  if own else scheduler)
    except (OSError, TimeoutError) as exc:
        raise UsageError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from None
    futures = []
    try:
        shared = client.scatter(context, broadcast=True, hash=False)
        futures = [client.submit(run_points, shared, t.points, evaluate, pure=False)
                   for t in tasks]
        by_future = dict(zip(futures, tasks, strict=True))
        for future in as_completed(futures):  # type: ignore[no-untyped-call]
            try:
                outcomes = future.result()
            except Exception as exc:  # a worker died too often (KilledWorker), ...
                outcomes = _failed(by_future[future].points,
                                   f"on the cluster: {_error_text(exc)}")
            done(outcomes)
    except BaseException:
        client.cancel(futures)
        raise
    finally:
        if own:
            client.close()


# The journal and the results file ----------------------------------------------------------


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


class _Journal:
    """Append-only JSON lines, one finished point each, written as they arrive; the
    first line names the sweep."""

    def __init__(self, path: Path, sweep: Sweep, *, truncate: bool = False) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            import fcntl

            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # no advisory locks on this platform
            pass
        except OSError:
            os.close(self.fd)
            raise UsageError(f"{path}: another sweep is writing these results") from None
        if truncate:  # starting over: emptied under the lock, never under another sweep
            os.ftruncate(self.fd, 0)
        size = os.fstat(self.fd).st_size
        if size:  # a process killed mid-write leaves a torn last line: drop it
            keep = os.pread(self.fd, size, 0).rfind(b"\n") + 1
            if keep < size:
                os.ftruncate(self.fd, keep)
            size = keep
        if not size:
            self.append([{"topomodel_sweep_journal": JOURNAL_VERSION, "sweep": sweep.file,
                          "digest": sweep.digest, "metrics": list(sweep.metrics)}])

    def append(self, rows: Sequence[dict[str, Any]]) -> None:
        """Write ``rows``, one line each, with no buffering."""
        data = "".join(json.dumps(_plain(r), allow_nan=False) + "\n" for r in rows)
        view = memoryview(data.encode())
        while view:
            view = view[os.write(self.fd, view):]

    def close(self) -> None:
        """Release the journal (its lock goes with it)."""
        os.close(self.fd)


def _read_journal(path: Path) -> list[dict[str, Any]]:
    """The points of a journal (none if there is no journal)."""
    rows: list[dict[str, Any]] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return rows
    for line in lines[1:]:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn line of a killed process
        if isinstance(row, dict) and "key" in row:
            rows.append(row)
    return rows


def _read_results(path: Path, fmt: str) -> list[dict[str, Any]]:
    """Rows of a previous results file (for resume); none if there is no file."""
    if not path.exists():
        return []
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
    row.update((name, _plain(stored.get(name)))
               for name in (*sweep.metrics, *OUTCOME_COLUMNS))
    return row


def _write_results(sweep: Sweep, path: Path, fmt: str, stored: Mapping[int, Mapping[str, Any]]
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


# The whole sweep ---------------------------------------------------------------------------


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
            stored[o.index] = _plain(row)
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
