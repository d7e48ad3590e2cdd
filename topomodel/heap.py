"""Freed memory kept for reuse: the program's large arrays served from the C heap.

At 100k accelerators a step routes millions of flows, and every large temporary numpy
array (a flow's hashes, hops, plane picks: tens to hundreds of MB each) is, by glibc's
default, a fresh ``mmap`` unmapped again when it is freed. The kernel must then zero
every page of the next one. On the machines measured that zeroing was most of the
process's CPU time: ``goodput`` on the 98k NPU servers with the worked example's job
(one worker) allocated 41 GB of fresh pages for a 5 GB peak, 38 s of system time
beside 14 s of user time, ``perf`` putting 52 % of all samples in the kernel's
``clear_page`` under numpy's indexing, casts and hashing (``benchmarks/README.md``).

:func:`keep_freed_memory` tells glibc's allocator to serve every block from its heap
and never give freed memory back, so a temporary reuses the pages the last one left:
the same run allocated 5 GB of fresh pages and spent 19 s in the kernel. The cost is
that a process keeps its peak until it exits, which is what a command-line run does
anyway. It is set for the program only (``topomodel`` or ``python -m topomodel``), not
when the package is imported as a library, where the host process owns its allocator;
forked workers inherit it. Where the C library has no ``mallopt`` (macOS, Windows) it
does nothing.

:func:`quiet_collector` keeps Python's cycle collector from scanning, again and again,
the objects a long search keeps (its caches of layer works, bounds and frames): it
freezes what exists when the search starts (never collected while frozen) and lets
more objects be made between its youngest passes, restoring both after.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

M_TRIM_THRESHOLD = -1
"""glibc ``mallopt`` parameter (malloc.h): free memory at the heap's top kept up to
this many bytes before it is returned to the system."""

M_MMAP_MAX = -4
"""glibc ``mallopt`` parameter (malloc.h): most blocks served by their own ``mmap``;
0 serves every block from the heap."""

KEPT_FREE_BYTES = (1 << 31) - 1
"""Largest trim threshold ``mallopt`` takes (an ``int``): about 2 GiB of freed memory
kept at the heap's top, more than any one temporary of a 100k-accelerator run."""


def keep_freed_memory() -> bool:
    """Serve every allocation from the heap and keep freed memory (see the module);
    return whether the C library took both settings."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):  # no mallopt: not glibc
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, KEPT_FREE_BYTES))


def release_freed_memory() -> bool:
    """Give the pages of every freed block back to the system (glibc ``malloc_trim``;
    the blocks stay the allocator's, backed afresh when used again); return whether the
    C library has it. Called before forking workers (:mod:`topomodel.parallel`): the
    memory this process kept (:func:`keep_freed_memory`) would be shared with them, and
    each worker's first write to every 4 KiB of it that it reuses would copy the page
    (a fault per 4 KiB), where a page given back is backed afresh, a huge page at a
    time. At 98k accelerators ``compare``'s workers copied that way 14 % of all the
    CPU samples (``benchmarks/README.md``)."""
    import ctypes

    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):  # not glibc
        return False
    malloc_trim.argtypes = (ctypes.c_size_t,)
    malloc_trim(0)
    return True


YOUNG_OBJECTS = 50_000
"""Objects made (less those freed) between two passes of the cycle collector over the
youngest ones during a search, against CPython's 700. Each pass over young objects
that survive moves them older, and every so many of those passes a full pass scans
every object alive: a plan's caches hold millions, and 15 full passes took 3.0 of the
3.7 CPU s the collector took on the 16k cut of the 98k example (22 CPU s in all;
``benchmarks/README.md``). At 50,000 the same plan made 1 full pass and 194 young
ones, 0.7 CPU s in all, at the same peak memory: what the search frees is mostly
freed by reference counting, not by the collector, so only cyclic garbage waits
longer (at most what 50,000 young objects hold, a few MB)."""


@contextmanager
def quiet_collector(young_objects: int = YOUNG_OBJECTS) -> Iterator[None]:
    """Within the block, the objects alive before it frozen (``gc.freeze``: the
    collector skips them) and the youngest generation's threshold at least
    ``young_objects``; both restored after (frozen here only when nothing else froze
    objects, so an outer freeze stays as it was). Also a decorator."""
    old = gc.get_threshold()
    freeze = gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    gc.set_threshold(max(old[0], young_objects), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
        if freeze:
            gc.unfreeze()
