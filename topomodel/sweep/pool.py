"""Executing sweep points in parallel: on a local process pool or a Dask cluster.

Points are grouped by the design they build and sent in chunks
(:data:`MAX_POINTS_PER_TASK`), so each worker's fabric cache is hit; every finished
chunk is handed to a ``done`` callback as soon as it arrives. The local pool survives
dead workers (it is rebuilt and the points that were in flight rerun one at a time, so
only the culprit fails); on Dask, a task the cluster gives up on records its error in
its points.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from topomodel.errors import TopomodelError, UsageError
from topomodel.files import plain_json
from topomodel.parallel import die_with_parent, process_alive
from topomodel.sweep.evaluate import (
    Evaluate,
    Outcome,
    SweepContext,
    error_text,
    failed_point,
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
class Task:
    points: list[tuple[int, dict[str, Any]]]
    isolated: bool = False  # rerun alone after its worker died


def pending_tasks(sweep: Sweep, todo: Sequence[int], workers: int) -> list[Task]:
    """Points to run, grouped by the design they build, in chunks."""
    groups: dict[str, list[int]] = {}
    for index in todo:
        groups.setdefault(canonical(design_overrides(sweep.points[index])), []).append(index)
    tasks = []
    for members in groups.values():
        size = max(1, min(MAX_POINTS_PER_TASK, math.ceil(len(members) / (2 * workers))))
        for start in range(0, len(members), size):
            tasks.append(Task([(i, sweep.points[i]) for i in members[start:start + size]]))
    return tasks


_WORKER: dict[str, Any] = {}

PARENT_POLL_S = 0.5
"""How often a worker checks that the sweep process is alive, seconds, where the
platform cannot wake it when that process ends (no ``pidfd_open``)."""


def _worker_init(context: SweepContext, evaluate: Evaluate, sweep_pid: int) -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    _die_with(sweep_pid)
    _WORKER["context"], _WORKER["evaluate"] = context, evaluate


def _die_with(sweep_pid: int) -> None:
    """End this worker process as soon as the sweep process ``sweep_pid`` ends, however
    it ends (``kill -9`` included), so no worker outlives its sweep.

    Two guards: on Linux the kernel kills the worker when its parent process dies
    (``prctl(PR_SET_PDEATHSIG)``; with the forkserver start method that parent is the
    fork server); and a watchdog thread waits on the sweep process itself (a pidfd, or
    a poll every :data:`PARENT_POLL_S`) and exits when it is gone.
    """
    import os
    import threading

    die_with_parent()  # the fork server's death; the watchdog below watches the sweep
    try:
        watched: int | None = os.pidfd_open(sweep_pid) if hasattr(os, "pidfd_open") else None
    except ProcessLookupError:
        os._exit(1)  # the sweep ended before this worker started
    except OSError:
        watched = None
    if not process_alive(sweep_pid):
        os._exit(1)

    def watch() -> None:
        if watched is not None:
            import select

            poller = select.poll()
            poller.register(watched, select.POLLIN)
            while not poller.poll():  # readable once the process has ended
                pass
        else:
            import time

            while process_alive(sweep_pid):
                time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="topomodel-sweep-watchdog", daemon=True).start()


def _worker_run(points: list[tuple[int, dict[str, Any]]]) -> list[Outcome]:
    return run_points(_WORKER["context"], points, _WORKER["evaluate"])


def run_pool(context: SweepContext, tasks: list[Task], workers: int, evaluate: Evaluate,
              done: Callable[[list[Outcome]], None], *,
              metrics_ok: Callable[[Any], bool] | None = None) -> None:
    """Run tasks on a local process pool, at most ``workers`` in flight. When a worker
    dies, the pool is rebuilt and the tasks that were in flight rerun one point at a
    time; a point that kills its worker alone is recorded as failed. ``metrics_ok``
    checks what an outcome's metrics hold (default: plain JSON values)."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    methods = multiprocessing.get_all_start_methods()
    mp = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if "forkserver" in methods:
        mp.set_forkserver_preload(["topomodel.sweep.pool", "topomodel.sweep.evaluate",
                                   "topomodel.analysis.training.step", "topomodel.fabric.build"])

    import os

    def pool() -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=workers, mp_context=mp,
                                   initializer=_worker_init,
                                   initargs=(context, evaluate, os.getpid()))

    queue, suspects = deque(tasks), deque[Task]()
    inflight: dict[Future[list[Outcome]], Task] = {}
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
                    outcomes = failed_point(task.points, error_text(exc))
                done(check_outcomes(outcomes, task.points, metrics_ok))
            if broken:
                for future, task in inflight.items():
                    if future.done() and future.exception() is None:
                        # finished just before the others broke
                        done(check_outcomes(future.result(), task.points, metrics_ok))
                    elif task.isolated:
                        done(failed_point(task.points, "the worker process died while"
                                     " computing this point (killed, or out of memory)"))
                    else:
                        suspects.extend(Task([p], isolated=True) for p in task.points)
                inflight.clear()
                executor.shutdown(wait=True, cancel_futures=True)
                executor = pool()
    except BaseException:
        for process in list((getattr(executor, "_processes", None) or {}).values()):
            process.terminate()
        executor.shutdown(wait=True, cancel_futures=True)
        raise
    executor.shutdown(wait=True)


def check_scheduler_address(address: str) -> str:
    """A Dask scheduler address, checked: ``tcp://``, ``tls://``, ``ucx://``, ``ws://``,
    ``wss://`` or ``inproc://`` and a host, or ``host:port`` (TCP).

    Examples
    --------
    >>> check_scheduler_address("tls://sched.example:8786")
    'tls://sched.example:8786'
    """
    text = address.strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "tcp", text
    if scheme not in DASK_SCHEMES or not rest or any(c.isspace() for c in rest):
        raise UsageError(f"not a Dask scheduler address: {address!r} (expected"
                         f" {'|'.join(DASK_SCHEMES)}://HOST:PORT, e.g. tls://host:8786)")
    return text


DASK_SCHEMES = ("tcp", "tls", "ucx", "ws", "wss", "inproc")
"""Transports a scheduler address may name. ``tls://`` (and ``wss://``) take their
certificates from Dask's configuration (``distributed.comm.tls.*``, e.g. the
``DASK_DISTRIBUTED__COMM__TLS__CA_FILE`` environment variable)."""


def connect_dask(scheduler: Any) -> tuple[Any, bool]:
    """A ``distributed.Client`` for ``scheduler`` (an address, connected here, or a
    Client, used as it is) and whether it is ours to close.

    Raises
    ------
    UsageError
        Without dask.distributed, for a bad address, or a scheduler that cannot be
        reached within :data:`DASK_CONNECT_TIMEOUT`.
    """
    try:
        from distributed import Client
    except ImportError:
        raise UsageError("a Dask scheduler needs dask.distributed: pip install"
                         " 'topomodel[dask]'") from None
    if not isinstance(scheduler, str):
        return scheduler, False
    address = check_scheduler_address(scheduler)
    try:
        return Client(address, timeout=DASK_CONNECT_TIMEOUT), True  # type: ignore[no-untyped-call]
    except TypeError:  # Dask's way of saying a tls:// address came without certificates
        raise UsageError(f"cannot reach the Dask scheduler at {address}: TLS needs Dask's"
                         " TLS configuration (DASK_DISTRIBUTED__COMM__TLS__CA_FILE,"
                         " ..._CLIENT__CERT and ..._CLIENT__KEY)") from None
    except (OSError, TimeoutError, ValueError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UsageError(f"cannot reach the Dask scheduler at {address}: {reason}"
                         ) from None


def run_dask(context: SweepContext, tasks: list[Task], client: Any, evaluate: Evaluate,
              done: Callable[[list[Outcome]], None], *,
              metrics_ok: Callable[[Any], bool] | None = None) -> None:
    """Run tasks on a Dask distributed cluster through ``client`` (see
    :func:`connect_dask`). The cluster must be trusted: Dask's protocol unpickles what
    workers send back, so a hostile worker can run code in this process."""
    from distributed import as_completed

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
                outcomes = failed_point(by_future[future].points,
                                   f"on the cluster: {error_text(exc)}")
            done(check_outcomes(outcomes, by_future[future].points, metrics_ok))
    except BaseException:
        client.cancel(futures)
        raise


class MalformedResult(TopomodelError, ValueError):
    """A worker handed back something that is not the outcomes of the points it was
    given (a broken or hostile Dask cluster)."""


def check_outcomes(outcomes: Any, points: Sequence[tuple[int, dict[str, Any]]],
                   metrics_ok: Callable[[Any], bool] | None = None) -> list[Outcome]:
    """``outcomes`` if they are one :class:`Outcome` per point given, with plain fields
    (metrics of plain JSON values, or what ``metrics_ok`` accepts).

    Raises
    ------
    MalformedResult
        Naming what was wrong, never echoing what came back.
    """
    wanted = sorted(index for index, _ in points)

    def bad(what: str) -> MalformedResult:
        return MalformedResult(f"a worker returned a malformed result for points"
                               f" {wanted[0]}..{wanted[-1]}: {what} (points finished"
                               " before it are kept in the journal: --resume goes on)")

    if not isinstance(outcomes, list):
        raise bad(f"expected a list of outcomes, got a {type(outcomes).__name__}")
    strays = [type(o).__name__ for o in outcomes if not isinstance(o, Outcome)]
    if strays:
        raise bad(f"expected a list of outcomes, got one holding a {strays[0]}")
    if sorted(o.index for o in outcomes if isinstance(o.index, int)) != wanted:
        raise bad("its outcomes are not those of the points sent")
    for o in outcomes:
        if not (isinstance(o.metrics, dict) and isinstance(o.feasible, bool | type(None))
                and isinstance(o.error, str | type(None))
                and isinstance(o.violations, str | type(None))
                and isinstance(o.elapsed_s, int | float)):
            raise bad(f"the outcome of point {o.index} has fields of the wrong type")
        if metrics_ok is not None:
            if not metrics_ok(o.metrics):
                raise bad(f"the metrics of point {o.index} are not what was asked for")
            continue
        try:
            json.dumps(plain_json(o.metrics))
        except (TypeError, ValueError, AttributeError, RecursionError):
            raise bad(f"the metrics of point {o.index} are not plain values") from None
    return list(outcomes)
