"""Executing sweep points in parallel: on a local process pool or a Dask cluster.

Points are grouped by the design they build and sent in chunks
(:data:`MAX_POINTS_PER_TASK`), so each worker's fabric cache is hit; every finished
chunk is handed to a ``done`` callback as soon as it arrives. The local pool survives
dead workers (it is rebuilt and the points that were in flight rerun one at a time, so
only the culprit fails); on Dask, a task the cluster gives up on records its error in
its points.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from topomodel.errors import UsageError
from topomodel.sweep.evaluate import (
    Evaluate,
    Outcome,
    SweepContext,
    _error_text,
    _failed,
    run_points,
)
from topomodel.sweep.file import Sweep
from topomodel.sweep.params import canonical, design_overrides

MAX_POINTS_PER_TASK = 8
"""Points sent to a worker at once. Several amortise the hand-over on small designs;
few keep the progress bar moving and the work spread on large ones (a 16k-accelerator
point takes about half a second)."""

DASK_CONNECT_TIMEOUT = "10s"
"""How long to try reaching a Dask scheduler before giving up."""


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
        mp.set_forkserver_preload(["topomodel.sweep.pool", "topomodel.sweep.evaluate",
                                   "topomodel.analysis.step", "topomodel.fabric.build"])

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
