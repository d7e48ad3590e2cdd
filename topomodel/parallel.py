"""Independent pieces of one verb's work on every core: :func:`parallel_map`.

The sensitivity's steps, compare's designs and goodput's degraded steps are independent
of one another and each costs about a second at 100k accelerators. They run in worker
processes forked from the caller, so a worker starts with everything the caller holds
(the fabric and the views and collective times kept on it, shared copy-on-write, never
pickled); only each piece's result comes back. Results are in the order of the items
and are what the serial loop gives: every piece is deterministic, and a worker starts
from the caller's state just as the loop's next piece would (what one piece adds to a
fabric's caches is only ever what computing it again gives).

:func:`parallel_map_then` keeps one pool for work in two stages: pieces whose items are
planned from the results of the first ones (the review's featured collective and its
what-ifs, planned from its collective table) run in the same warm workers as the rest,
instead of in a second pool whose workers would start again from the caller's state.

Work runs serially, in the calling process, with ``workers=1``, with one item, inside a
worker (no pools within pools, unless the outer call is ``nested``: pieces of unequal
length, such as compare's designs, whose own pieces then fill the cores the shorter
ones leave), and where processes cannot be forked (Windows, macOS, where forking a
process that has loaded system frameworks is unsafe).
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, TypeVar, cast

from topomodel.errors import UsageError

T = TypeVar("T")
R = TypeVar("R")
S = TypeVar("S")
U = TypeVar("U")

_PENDING: list[tuple[Callable[[Any], Any], Sequence[Any], Callable[[Any], Any] | None]] = []
"""The work of the :func:`parallel_map` calls under way, outermost first (one, or one
per level of ``nested`` calls), read by the forked workers of the innermost by index.
Held only for the call: it is the hand-over to the workers, not a cache."""

_IN_WORKER = False
"""True in a worker process of :func:`parallel_map` whose pieces may not open pools
(a call that is not ``nested``)."""

def default_workers() -> int:
    """Worker processes when none are asked for: every core this process may use (its
    CPU affinity where the platform has one, else ``os.cpu_count()``), as a sweep."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def check_workers(workers: int | None, flag: str = "--workers") -> int:
    """``workers``, or :func:`default_workers` for None.

    Raises
    ------
    UsageError
        For fewer than 1.

    Examples
    --------
    >>> check_workers(2)
    2
    >>> check_workers(0)
    Traceback (most recent call last):
    ...
    topomodel.errors.UsageError: --workers must be at least 1, got 0
    """
    if workers is None:
        return default_workers()
    if workers < 1:
        raise UsageError(f"{flag} must be at least 1, got {workers}")
    return workers


@contextmanager
def beside(work: Callable[[], Any]) -> Iterator[None]:
    """Run ``work()`` in a thread while the body of the ``with`` runs, and wait for it
    on leaving (raising its error, if any, when the body raised none). Worth it where
    both spend their time in numpy, which lets go of the GIL in its loops and sorts
    and while the kernel backs fresh arrays: the views a pool's workers share are then
    built on both cores before it forks. The body must not read what ``work`` builds
    (it would build it again, the same).

    Examples
    --------
    >>> made = []
    >>> with beside(lambda: made.append("view")):
    ...     pass
    >>> made
    ['view']
    """
    import threading

    failed: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # raised in the caller's thread, on leaving
            failed.append(exc)

    thread = threading.Thread(target=run, name="beside", daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join()
    if failed:
        raise failed[0]


def can_fork() -> bool:
    """Whether this platform runs :func:`parallel_map` in forked workers."""
    import multiprocessing

    return ("fork" in multiprocessing.get_all_start_methods()
            and not sys.platform.startswith(("win", "darwin")))


def parallel_map(work: Callable[[T], R], items: Sequence[T], *,
                 workers: int | None = None, nested: bool = False,
                 warm_first: bool = False) -> list[R]:
    """``[work(item) for item in items]``, on up to ``workers`` forked processes
    (default: every core), in the order of ``items``.

    ``work`` may be any callable, a closure included (the workers inherit it; it is not
    pickled); its results must pickle. An exception raised by ``work`` is raised here,
    the first in item order, as the serial loop would raise it. With ``nested``, each
    piece may run a :func:`parallel_map` of its own (up to its ``workers`` processes
    more, which share the cores with the other pieces); otherwise pieces run theirs
    serially. With ``warm_first``, the first item runs here before the workers fork:
    they start from what it built (views, kept routes and router sections) instead of
    each building it again (in a piece of a ``nested`` pool the other pieces keep the
    cores busy meanwhile; at the top one core waits for it, which on a goodput's
    degraded steps at 98k saves 2-4 CPU s and no wall time, ``benchmarks/README.md``).
    The results are the same.

    Raises
    ------
    UsageError
        For ``workers`` below 1.

    Examples
    --------
    >>> parallel_map(lambda x: x * x, [3, 1, 2], workers=2)
    [9, 1, 4]
    """
    count = min(check_workers(workers), len(items))
    if count <= 1 or _IN_WORKER or not can_fork():
        return [work(item) for item in items]
    if warm_first:
        first = work(items[0])
        return [first, *parallel_map(work, items[1:], workers=workers, nested=nested)]
    _PENDING.append((work, items, None))
    pool = _forked_pool(count, nested)
    try:
        results = list(pool.imap(_run_piece, range(len(items))))  # in item order
        pool.close()
    except BaseException:  # an error, Ctrl-C or SIGTERM: the pieces still running end
        _terminate(pool)
        raise
    finally:
        pool.join()
        _PENDING.pop()
    return results


def parallel_map_then(work: Callable[[T], R], items: Sequence[T],
                      then: Callable[[S], U], plan: Callable[[list[R]], Sequence[S]], *,
                      ready: int, workers: int | None = None) -> tuple[list[R], list[U]]:
    """``[work(item) for item in items]`` and ``[then(more) for more in plan(first)]``,
    ``first`` being the results of the first ``ready`` items, on one pool of up to
    ``workers`` forked processes (default: every core).

    ``plan`` runs here as soon as those first results are in, while the workers go on
    with the other items; the items it gives run next, before the items not started
    yet, in the same workers (whatever they have built since they were forked is still
    there). They are sent to workers forked before they existed, so they must pickle;
    ``then``, like ``work``, is inherited and may be a closure. The serial loop runs in
    that order too: the first ``ready`` items, ``plan``, its items, the other items; an
    exception is raised as that loop would raise it (the first in its order), and ends
    the pieces still running that come after it. Pieces do not open pools of their own.

    Returns
    -------
    tuple of list
        The results of ``items`` and of the planned items, each in order.

    Raises
    ------
    UsageError
        For ``workers`` below 1.

    Examples
    --------
    >>> parallel_map_then(lambda x: x * 10, [1, 2, 3], lambda y: -y,
    ...                   lambda first: [sum(first), 0], ready=2, workers=2)
    ([10, 20, 30], [-30, 0])
    """
    count = check_workers(workers)  # the planned items may be more than the first ones
    if count <= 1 or _IN_WORKER or not can_fork():
        first = [work(item) for item in items[:ready]]
        planned = [then(more) for more in plan(first)]
        return first + [work(item) for item in items[ready:]], planned
    import queue

    _PENDING.append((work, items, then))
    # A piece's place in the serial loop's order: (0, i) the first ready items, (1, j)
    # the planned ones, (2, i) the others; pieces start in that order (the planned ones
    # placed ahead of the others not started when they are known).
    Key = tuple[int, int]
    waiting: deque[Key] = deque([(0, i) for i in range(ready)]
                                + [(2, i) for i in range(ready, len(items))])
    done: queue.SimpleQueue[tuple[Key, bool, Any]] = queue.SimpleQueue()
    results: dict[Key, Any] = {}
    errors: dict[Key, BaseException] = {}
    running: set[Key] = set()
    planned_items: Sequence[S] = ()
    pool = _forked_pool(count, False)

    def plan_now() -> None:
        nonlocal planned_items
        planned_items = plan([results[0, i] for i in range(ready)])
        waiting.extendleft(reversed([(1, j) for j in range(len(planned_items))]))

    def start(key: Key) -> None:
        stage, index = key
        piece, argument = ((_run_planned, planned_items[index]) if stage == 1
                           else (_run_piece, index))
        pool.apply_async(piece, (argument,),
                         callback=lambda value: done.put((key, True, value)),
                         error_callback=lambda error: done.put((key, False, error)))
        running.add(key)

    try:
        if ready == 0:
            plan_now()
        while True:
            first_error = min(errors, default=None)
            while (len(running) < count and waiting
                   and (first_error is None or waiting[0] < first_error)):
                start(waiting.popleft())
            if not running or (first_error is not None and min(running) > first_error):
                break  # nothing left that could come before the first error
            key, ok, value = done.get()
            running.discard(key)
            (results if ok else errors)[key] = value
            if key[0] == 0 and ok and all((0, i) in results for i in range(ready)):
                plan_now()
        if errors:
            raise errors[min(errors)]
        pool.close()
    except BaseException:  # an error, Ctrl-C or SIGTERM: the pieces still running end
        _terminate(pool)
        raise
    finally:
        pool.join()
        _PENDING.pop()
    return ([results[0, i] for i in range(ready)]
            + [results[2, i] for i in range(ready, len(items))],
            [results[1, j] for j in range(len(planned_items))])


def _forked_pool(count: int, nested: bool) -> Any:
    """A pool of ``count`` workers forked from this process now (before the pool starts
    its threads), sharing as few pages as they would write: the memory this process
    freed and kept is given back first (:func:`~topomodel.heap.release_freed_memory`),
    and the objects alive are frozen for the fork (``gc.freeze``, as the :mod:`gc`
    documentation advises before a fork), so that a worker's collector never writes to
    the pages holding them (each write would copy a page shared with this process)."""
    import gc
    import multiprocessing

    from topomodel.heap import release_freed_memory

    for stream in (sys.stdout, sys.stderr):  # a forked copy must not write them again
        if stream is not None:
            stream.flush()
    release_freed_memory()
    freeze = gc.get_freeze_count() == 0  # else frozen already (heap.quiet_collector)
    if freeze:
        gc.freeze()
    try:
        return multiprocessing.get_context("fork").Pool(count, initializer=_start_worker,
                                                        initargs=(nested, os.getpid()))
    finally:
        if freeze:  # this process collects them as before; the workers never do
            gc.unfreeze()


TERMINATE_GRACE_S = 10.0
"""Seconds a worker has to end after the pool's SIGTERM before it is killed: enough for
a nested piece to end its own pool (:func:`_exit_on_terminate`)."""

LEAKED_LOCK_S = 0.5
"""Seconds the pool's result lock may stay taken once every worker has ended before it
is taken for leaked (a send by a live thread of this process takes microseconds)."""


def _terminate(pool: Any) -> None:
    """``pool.terminate()``, sure to end.

    Two ways it could hang, each undone by a watchdog thread while it runs. A worker
    sent SIGTERM in the moments after its fork, before Python in it resets its signal
    state (which drops a signal pending then), would wait for a task forever, and the
    pool's join with it: every worker still there after :data:`TERMINATE_GRACE_S` is
    killed. And a worker killed while sending its result holds the lock of the result
    queue for good (a process-shared semaphore, not released by its death), while
    ``terminate()`` (its end-of-results sentinel) and the pool's task thread still take
    that lock: the thread blocks on it forever, and ``terminate()`` joining it. So once
    every worker has ended, a lock no one can take for :data:`LEAKED_LOCK_S` is
    released.
    """
    import threading
    from multiprocessing.connection import wait

    workers = list(getattr(pool, "_pool", ()))
    outqueue = getattr(pool, "_outqueue", None)
    lock = getattr(outqueue, "_wlock", None)
    finished = threading.Event()

    def watch() -> None:
        sentinels = [worker.sentinel for worker in workers]
        deadline = time.monotonic() + TERMINATE_GRACE_S
        while sentinels and not finished.is_set():
            ended = wait(sentinels, timeout=min(0.1, max(0.0, deadline - time.monotonic())))
            sentinels = [s for s in sentinels if s not in ended]
            if sentinels and time.monotonic() >= deadline:
                for worker in workers:
                    worker.kill()  # a no-op for one that has ended
                deadline = math.inf
        if finished.is_set() or lock is None:
            return
        while not finished.is_set():  # every worker has ended: no one else sends
            lock.acquire(timeout=LEAKED_LOCK_S)  # taken now, by this thread or a dead one
            with suppress(ValueError):  # its holder let go meanwhile: nothing to release
                lock.release()
            finished.wait(0.1)

    watchdog = threading.Thread(target=watch, name="topomodel-pool-terminate", daemon=True)
    watchdog.start()
    try:
        pool.terminate()
    finally:
        finished.set()
        watchdog.join()


_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def process_alive(pid: int) -> bool:
    """Whether the process ``pid`` is running (another user's counts; a number no
    process can have does not).

    Examples
    --------
    >>> process_alive(os.getpid()), process_alive(2**80)
    (True, False)
    """
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    return True


def die_with_parent(parent_pid: int | None = None) -> None:
    """End this forked process as soon as the process that forked it ends, however it
    ends (``kill -9`` included): on Linux the kernel sends it SIGKILL then
    (``prctl(PR_SET_PDEATHSIG)``), which it cannot catch, so it ends without a word. A
    parent ``parent_pid`` that ended before this call (this process then has another
    parent) ends it here. Elsewhere nothing is done.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)


def _start_worker(nested: bool, parent_pid: int) -> None:
    import multiprocessing
    import signal

    global _IN_WORKER
    _IN_WORKER = not nested
    die_with_parent(parent_pid)  # a worker never outlives its caller, nor says it died
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the caller's to handle
    if not nested:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the caller's terminate() ends it
        return
    # A pool's workers are daemons, and a daemon may not start processes: this one
    # starts its own pool's, and ends them when the caller's terminate() ends it (the
    # exit unwinds through its parallel_map, which terminates its pool).
    multiprocessing.current_process()._config["daemon"] = False  # type: ignore[attr-defined]
    signal.signal(signal.SIGTERM, _exit_on_terminate)


def _exit_on_terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _run_piece(index: int) -> Any:
    work, items, _ = _PENDING[-1]  # this pool's: forked after its caller added it
    return work(items[index])


def _run_planned(item: Any) -> Any:
    then = cast("Callable[[Any], Any]", _PENDING[-1][2])  # parallel_map_then's pool
    return then(item)
