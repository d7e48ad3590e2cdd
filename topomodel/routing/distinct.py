"""Distinct integer keys in sorted order and where each key falls among them: what
``np.unique(keys, return_inverse=True)`` gives, without its full sort where the keys
allow it.

The router around failures dedupes (entry, exit) node pairs of every flow on every
plane, and (spine, destination pod) keys: a million and more keys per call at 100k
accelerators. Where the keys are few enough to mark in a table, one pass marks them;
otherwise a stable sort, which is fast on the nearly sorted keys flows in rank order
give, finds them.
"""

from __future__ import annotations

import numpy as np

DENSE_KEY_SPACE = 2**23
"""Up to this many possible keys, the distinct ones are found by marking a table (a byte
per possible key, and an index of 8 bytes written only where a key is present) instead
of sorting: at most 8 MiB touched for the marks; the 4K supernodes' fat-tree has 1,536
leaves, so 2,359,296 possible leaf pairs."""


def sorted_distinct(keys: np.ndarray, space: int | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of the non-negative integer ``keys`` (1-D), sorted, and the
    position of each key among them (int64): ``np.unique(keys, return_inverse=True)``.
    ``space``: an upper bound on the keys (all below it), if known.

    Examples
    --------
    >>> values, inverse = sorted_distinct(np.array([5, 2, 5, 9]), space=10)
    >>> values.tolist(), inverse.tolist()
    ([2, 5, 9], [1, 0, 1, 2])
    >>> [a.tolist() for a in sorted_distinct(np.array([7, 3, 7]))]
    [[3, 7], [1, 0, 1]]
    """
    keys = np.asarray(keys).ravel()
    if space is not None and space <= DENSE_KEY_SPACE:
        seen = np.zeros(space, bool)
        seen[keys] = True
        values = np.flatnonzero(seen)
        index = np.empty(space, np.int64)  # read only where a key was marked
        index[values] = np.arange(len(values))
        return values.astype(keys.dtype, copy=False), index[keys]
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    first = np.empty(len(keys), bool)
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    inverse = np.empty(len(keys), np.int64)
    inverse[order] = np.cumsum(first) - 1
    return ordered[first], inverse
