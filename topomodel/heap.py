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
"""

from __future__ import annotations

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
