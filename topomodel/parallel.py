"""Independent pieces of one verb's work on every core: :func:`parallel_map`.

The sensitivity's steps, compare's designs and goodput's degraded steps are independent
of one another and each costs about a second at 100k accelerators. They run in worker
processes forked from the caller, so a worker starts with everything the caller holds
(the fabric and the views and collective times kept on it, shared copy-on-write, never
pickled); only each piece's result comes back. Results are in the order of the items
and are what the serial loop gives: every piece is deterministic, and a worker starts
from the caller's state just as the loop's next piece would (what one piece adds to a
fabric's caches is only ever what computing it again gives).

Work runs serially, in the calling process, with ``workers=1``, with one item, inside a
worker (no pools within pools, unless the outer call is ``nested``: pieces of unequal
length, such as compare's designs, whose own pieces then fill the cores the shorter
ones leave), and where processes cannot be forked (Windows, macOS, where forking a
process that has loaded system frameworks is unsafe).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from topomodel.errors import UsageError

T = TypeVar("T")
R = TypeVar("R")

_PENDING: list[tuple[Callable[[Any], Any], Sequence[Any]]] = []
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


def can_fork() -> bool:
    """Whether this platform runs :func:`parallel_map` in forked workers."""
    import multiprocessing

    return ("fork" in multiprocessing.get_all_start_methods()
            and not sys.platform.startswith(("win", "darwin")))


def parallel_map(work: Callable[[T], R], items: Sequence[T], *,
                 workers: int | None = None, nested: bool = False) -> list[R]:
    """``[work(item) for item in items]``, on up to ``workers`` forked processes
    (default: every core), in the order of ``items``.

    ``work`` may be any callable, a closure included (the workers inherit it; it is not
    pickled); its results must pickle. An exception raised by ``work`` is raised here,
    the first in item order, as the serial loop would raise it. With ``nested``, each
    piece may run a :func:`parallel_map` of its own (up to its ``workers`` processes
    more, which share the cores with the other pieces); otherwise pieces run theirs
    serially.

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
    import multiprocessing

    for stream in (sys.stdout, sys.stderr):  # a forked copy must not write them again
        if stream is not None:
            stream.flush()
    _PENDING.append((work, items))
    # the workers are forked here, before the pool starts its threads
    pool = multiprocessing.get_context("fork").Pool(count, initializer=_start_worker,
                                                    initargs=(nested,))
    try:
        results = list(pool.imap(_run_piece, range(len(items))))  # in item order
        pool.close()
    except BaseException:  # an error, Ctrl-C or SIGTERM: the pieces still running end
        pool.terminate()
        raise
    finally:
        pool.join()
        _PENDING.pop()
    return results


def _start_worker(nested: bool) -> None:
    import multiprocessing
    import signal

    global _IN_WORKER
    _IN_WORKER = not nested
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
    work, items = _PENDING[-1]  # this pool's: forked after its caller added it
    return work(items[index])
