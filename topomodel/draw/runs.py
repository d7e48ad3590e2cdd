"""The link table as runs of rows, and sums over them (no matplotlib, no pandas import).

A builder writes a bundle's two directions as blocks of rows, so consecutive rows mostly
join the same pair of drawn boxes: the 6.5 M link rows of the 98k 4K-supernode example
are 768 runs with one (source box, destination box, tier, medium). The topology layout
sums its bundles over these runs instead of over every row: a value per run
(``np.add.reduceat``, ``np.minimum.reduceat``), then a few thousand additions into the
bundles. Float sums are added one row at a time in row order, as ``np.bincount`` adds
its weights, so every bundle's figures are the same to the last bit as a per-row
``np.bincount`` gives.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RUNS_MAX = 8192
"""Most runs walked one by one as slices (a few microseconds each in Python); with more,
the rows of the wanted runs are picked out as one index array."""


RUN_ROWS_MIN = 64
"""Float sums are added run by run (about 2 us each in Python) where the runs average at
least this many rows; shorter runs (a torus whose media alternate every few rows) are
summed by one ``np.bincount`` over a key per row (about 10 ns a row), with the same
result."""


def run_starts(columns: tuple[np.ndarray, ...]) -> np.ndarray:
    """The first row of every run of rows equal in all ``columns`` (same length each),
    then the row count: ``R + 1`` int64 bounds of ``R`` runs.

    Examples
    --------
    >>> run_starts((np.array([1, 1, 2, 2, 2]), np.array([0, 0, 0, 1, 1]))).tolist()
    [0, 2, 3, 5]
    >>> run_starts((np.array([], dtype=np.int8),)).tolist()
    [0]
    """
    count = len(columns[0])
    if not count:
        return np.zeros(1, np.int64)
    change = np.zeros(count - 1, bool)
    for column in columns:
        change |= column[1:] != column[:-1]
    return np.concatenate(([0], np.flatnonzero(change) + 1, [count])).astype(np.int64)


def segments(bounds: np.ndarray, selected: np.ndarray) -> list[slice] | list[np.ndarray]:
    """The rows of the runs ``selected`` (a bool per run) in row order: one slice per
    run when there are at most :data:`RUNS_MAX` runs, else one index array.

    Examples
    --------
    >>> segments(np.array([0, 2, 3, 5]), np.array([True, False, True]))
    [slice(0, 2, None), slice(3, 5, None)]
    """
    starts, stops = bounds[:-1][selected], bounds[1:][selected]
    if len(bounds) - 1 <= RUNS_MAX:
        return [slice(a, b) for a, b in zip(starts.tolist(), stops.tolist(), strict=True)]
    return [run_rows(starts, stops)]


def run_rows(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """The rows ``starts[i]`` to ``stops[i] - 1`` of every run, concatenated (int64).

    Examples
    --------
    >>> run_rows(np.array([0, 5]), np.array([2, 8])).tolist()
    [0, 1, 5, 6, 7]
    """
    lengths = stops - starts
    offsets = np.cumsum(lengths) - lengths  # where each run begins in the output
    return np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(starts - offsets,
                                                                     lengths)


def sequential_sums(values: np.ndarray, key: np.ndarray, bounds: np.ndarray,
                    size: int) -> np.ndarray:
    """Per key ``0..size-1``: the float sum of ``values`` over the rows of its runs,
    added one row at a time in row order, bit for bit what ``np.bincount`` gives with
    a key per row; ``key`` holds one key per run, and runs keyed ``size`` are left out.

    Examples
    --------
    >>> values = np.array([0.1, 0.2, 0.3, 1e16, 1.0, 1.0])
    >>> bounds, key = np.array([0, 3, 4, 6]), np.array([0, 2, 0])
    >>> sums = sequential_sums(values, key, bounds, 2)
    >>> per_row = np.repeat(key, np.diff(bounds))
    >>> bool((sums == np.bincount(per_row, weights=values, minlength=3)[:2]).all())
    True
    """
    if len(key) > RUNS_MAX or len(key) * RUN_ROWS_MIN > bounds[-1]:
        per_row = np.repeat(key, np.diff(bounds))
        return np.bincount(per_row, weights=values, minlength=size + 1)[:size]
    sums = np.zeros(size + 1)
    limits = bounds.tolist()
    with np.errstate(over="ignore"):  # as np.bincount: a sum past the largest float is inf
        for k, start, stop in zip(key.tolist(), limits[:-1], limits[1:], strict=True):
            if k == size:
                continue
            part = np.array(values[start:stop], dtype=float)
            part[0] += sums[k]  # the bin's total so far, then the run's rows one by one
            sums[k] = np.add.accumulate(part, out=part)[-1]
    return sums[:size]


def add_into(size: int, key: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per key ``0..size-1``, the sum of the integer ``values`` (int64, exact).

    Examples
    --------
    >>> add_into(3, np.array([2, 0, 2]), np.array([5, 1, 7])).tolist()
    [1, 0, 12]
    """
    out = np.zeros(size, np.int64)
    np.add.at(out, key, values)
    return out


@dataclass(frozen=True, eq=False)
class LinkRuns:
    """The link table's rows as runs of one bundle, one medium and one direction.

    ``bounds`` are the runs' first rows and then the row count; per run, ``key`` is its
    bundle, ``(lower box * boxes + upper box) * tiers + tier``, ``once`` whether its
    rows count their pair of directions once (the lower box's row, or ``src < dst``
    inside one box) and ``medium`` its medium code.
    """

    bounds: np.ndarray
    key: np.ndarray
    once: np.ndarray
    medium: np.ndarray
    boxes: int
    tiers: int

    @property
    def size(self) -> int:
        """How many bundle keys there can be."""
        return self.boxes * self.boxes * self.tiers

    @property
    def lengths(self) -> np.ndarray:
        """Rows per run."""
        return np.diff(self.bounds)

    def run_of(self, rows: np.ndarray) -> np.ndarray:
        """The run of each of ``rows`` (row numbers)."""
        return np.searchsorted(self.bounds, rows, "right") - 1


def link_runs(node_box: np.ndarray, n_boxes: int, src: np.ndarray, dst: np.ndarray,
              tier: np.ndarray, n_tiers: int, medium: np.ndarray) -> LinkRuns:
    """The runs of the link rows ``src -> dst`` (node numbers) between the boxes
    ``node_box`` (one per node), with each row's ``tier`` and ``medium`` codes.

    Examples
    --------
    >>> runs = link_runs(np.array([0, 0, 1]), 2, np.array([0, 1, 2, 2]),
    ...                  np.array([2, 2, 0, 1]), np.zeros(4, np.int8), 1,
    ...                  np.zeros(4, np.int8))
    >>> runs.bounds.tolist(), runs.key.tolist(), runs.once.tolist()
    ([0, 2, 4], [1, 1], [True, False])
    """
    box = node_box.astype(np.int16 if n_boxes < 2**15 else np.int64)
    box_src, box_dst = box[src], box[dst]
    bounds = run_starts((box_src, box_dst, tier, medium))
    first = bounds[:-1]
    inside = box_src[first] == box_dst[first]
    if inside.any():  # links inside one box: a run also ends where src < dst flips
        rows = run_rows(first[inside], bounds[1:][inside])
        rising = src[rows] < dst[rows]
        bounds = np.union1d(bounds, rows[1:][rising[1:] != rising[:-1]])
        first = bounds[:-1]
    low = np.minimum(box_src[first], box_dst[first]).astype(np.int64)
    high = np.maximum(box_src[first], box_dst[first]).astype(np.int64)
    once = (box_src[first] < box_dst[first]) | (
        (box_src[first] == box_dst[first]) & (src[first] < dst[first]))
    key = (low * n_boxes + high) * n_tiers + tier[first].astype(np.int64)
    return LinkRuns(bounds, key, once, medium[first].astype(np.int64), n_boxes, n_tiers)
