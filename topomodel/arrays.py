"""Array helpers the hot paths share.

:func:`distinct` exists because numpy 2.3+'s ``np.unique`` without ``return_*``
flags takes a hash path for integer arrays that measured 35-70x slower than sorting on
this project's machine (1 M int64 values: 2.4-2.6 s against 0.03-0.07 s, numpy 2.4.6);
sorting once and keeping the first of each run gives the same sorted result.
"""

from __future__ import annotations

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
