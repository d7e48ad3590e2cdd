"""Array helpers the hot paths share.

:func:`distinct` exists because numpy 2.3+'s ``np.unique`` without ``return_*``
flags takes a hash path for integer arrays that measured 35-70x slower than sorting on
this project's machine (1 M int64 values: 2.4-2.6 s against 0.03-0.07 s, numpy 2.4.6);
sorting once and keeping the first of each run gives the same sorted result.

:func:`sorted_distinct` adds where each key falls among the distinct ones
(``np.unique(keys, return_inverse=True)``) without its full sort where the keys allow
it: the router around failures dedupes (entry, exit) node pairs of every flow on every
plane, and (spine, destination pod) keys, a million and more keys per call at 100k
accelerators. Where the keys are few enough to mark in a table, one pass marks them;
otherwise a stable sort, which is fast on the nearly sorted keys flows in rank order
give, finds them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of a 1-D array (``np.unique(values)``, by sorting).

    Examples
    --------
    >>> distinct(np.array([3, 1, 3, 2, 1])).tolist()
    [1, 2, 3]
    >>> distinct(np.array([], dtype=np.int64)).tolist()
    []
    """
    ordered = np.sort(np.asarray(values).ravel())
    if not len(ordered):
        return ordered
    keep = np.empty(len(ordered), bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def lexsort_ints(keys: Sequence[np.ndarray]) -> np.ndarray:
    """``np.lexsort(keys)`` for integer keys of one length (the last the primary): one
    stable argsort of the keys packed into one int64, in the same order, where their
    ranges allow it (4x faster than ``np.lexsort`` on three keys of 98k values on this
    project's machine: 3.3 ms against 13.2 ms), else ``np.lexsort``. Both sorts are
    stable and the packing keeps the keys' order, so the permutations are the same.

    Examples
    --------
    >>> keys = (np.array([3, 1, 2, 1]), np.array([-1, 0, -1, 0]))
    >>> lexsort_ints(keys).tolist(), np.lexsort(keys).tolist()
    ([2, 0, 1, 3], [2, 0, 1, 3])
    """
    if not len(keys) or not len(keys[0]):
        return np.lexsort(keys)
    packed = np.zeros(len(keys[0]), np.int64)
    scale = 1
    for key in keys:  # the least significant first
        low, high = int(key.min()), int(key.max())
        if scale * (high - low + 1) >= 2**62:
            return np.lexsort(keys)
        packed += (key.astype(np.int64) - low) * scale
        scale *= high - low + 1
    return np.argsort(packed, kind="stable")


def rows_sorted(values: np.ndarray) -> np.ndarray:
    """Each row of the 2-D ``values`` in ascending order (``np.sort(values, axis=1)``):
    ``values`` itself where every row already is, as a grid's communicators of ranks in
    rank order give (one comparison pass, some 20x cheaper than sorting 98k ranks' rows
    on this project's machine: 0.04 ms against 0.8-1.2 ms).

    Examples
    --------
    >>> rows_sorted(np.array([[1, 2, 2], [0, 5, 9]])).tolist()
    [[1, 2, 2], [0, 5, 9]]
    >>> rows_sorted(np.array([[2, 1, 2], [0, 5, 9]])).tolist()
    [[1, 2, 2], [0, 5, 9]]
    """
    if bool((values[:, 1:] >= values[:, :-1]).all()):
        return values
    return np.sort(values, axis=1)


def search_sorted(keys: np.ndarray, wanted: np.ndarray, side: str = "left") -> np.ndarray:
    """``np.searchsorted(keys, wanted, side)``, with ``wanted`` sorted first when it is
    large: binary searches in key order stay in cache, 4x faster for 2 M look-ups into
    1.4 M keys on this project's machine (1.10 s against 0.26 s).

    Examples
    --------
    >>> search_sorted(np.array([1, 3, 5]), np.array([5, 0, 3])).tolist()
    [2, 0, 1]
    """
    wanted = np.asarray(wanted)
    if len(wanted) < 4096:
        return np.searchsorted(keys, wanted, side)  # type: ignore[call-overload]
    order = np.argsort(wanted, kind="stable")
    out = np.empty(len(wanted), np.int64)
    out[order] = np.searchsorted(keys, wanted[order], side)  # type: ignore[call-overload]
    return out


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


def expand_matches(keys: np.ndarray, sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each entry of ``keys``, every index into ``sorted_keys`` equal to it: (which
    entry of ``keys``, index into ``sorted_keys``) pairs.

    Examples
    --------
    >>> [x.tolist() for x in expand_matches(np.array([2, 5, 7]), np.array([2, 2, 7]))]
    [[0, 0, 2], [0, 1, 2]]
    """
    lo = np.searchsorted(sorted_keys, keys, "left")
    count = np.searchsorted(sorted_keys, keys, "right") - lo
    which = np.repeat(np.arange(len(keys)), count)
    within = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
    return which, np.repeat(lo, count) + within


def category_codes(column: Any, values: Sequence[str]) -> np.ndarray:
    """Each row's index in ``values`` (-1 where absent), int8: ``column`` is a
    categorical column (codes into categories: the fabric's
    :class:`~topomodel.fabric.columns.Category` or a pandas one) or strings.

    Examples
    --------
    >>> category_codes(["nic", "switch", "gpu"], ("accelerator", "nic", "switch")).tolist()
    [1, 2, -1]
    """
    categories: Sequence[Any]
    if hasattr(column, "cat"):  # a pandas categorical column
        codes, categories = column.cat.codes.to_numpy(), list(column.cat.categories)
    elif hasattr(column, "categories"):
        codes, categories = column.codes, list(column.categories)
    else:
        present, codes = np.unique(np.asarray(column, dtype=str), return_inverse=True)
        categories = present.tolist()
    lookup = np.array([values.index(c) if c in values else -1  # int8: cheap to gather
                       for c in map(str, categories)] + [-1], dtype=np.int8)
    out: np.ndarray = lookup[np.asarray(codes).ravel()]
    return out
