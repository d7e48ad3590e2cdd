"""Pareto fronts: the points no other point beats on every objective at once.

A point *dominates* another when it is at least as good on every objective and
strictly better on one. The front is the set of points nothing dominates; points with
equal values on every objective do not dominate each other, so duplicates on the front
are all kept. Objectives are minimised or maximised, each by its own choice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from topomodel.errors import UsageError

DIRECTIONS = ("min", "max")


AXIS_UNITS = (("_Bps", "B/s"), ("_bytes", "B"), ("_W", "W"), ("_s", "s"))
"""Column-name suffixes and the unit their plot axis is labelled in (SI prefixes)."""


@dataclass(frozen=True)
class Objective:
    """One axis of a front: a column name and whether smaller or larger is better."""

    name: str
    better: str  # "min" or "max"

    def __post_init__(self) -> None:
        if self.better not in DIRECTIONS:
            raise UsageError(f"{self.name}: the direction is 'min' or 'max', not"
                             f" {self.better!r}")

    def __str__(self) -> str:
        return f"{self.name} ({'lower' if self.better == 'min' else 'higher'} is better)"


def parse_objective(text: str, known: dict[str, str | None]) -> Objective:
    """``name``, ``name:min``, ``name:max`` or ``+name`` (larger is better) as an
    :class:`Objective`; ``known`` maps each allowed name to its natural direction
    (``None`` where there is none, so one must be given).

    Examples
    --------
    >>> parse_objective("mfu", {"mfu": "max"})
    Objective(name='mfu', better='max')
    >>> parse_objective("power_W:max", {"power_W": "min"}).better
    'max'
    >>> parse_objective("+tp", {"tp": None})
    Objective(name='tp', better='max')
    """
    name, better = text, None
    if text.startswith(("+", "-")):
        name, better = text[1:], "max" if text[0] == "+" else "min"
    elif ":" in text:
        name, _, better = text.rpartition(":")
    if name not in known:
        from topomodel.inputs.records import did_you_mean

        raise UsageError(f"{name!r} is not a recorded metric or numeric parameter of this"
                         " sweep" + did_you_mean(name, known))
    better = better or known[name]
    if better is None:
        raise UsageError(f"{name} has no natural direction: write {name}:min or {name}:max")
    return Objective(name, better)


def pareto_mask(values: np.ndarray, maximize: Sequence[bool]) -> np.ndarray:
    """Which rows of ``values`` (points x objectives) are on the Pareto front.

    Rows with a NaN are never on it. Two objectives take O(n log n) (sort and a running
    minimum); more take a pass per surviving candidate.

    Examples
    --------
    >>> v = np.array([[1.0, 5.0], [2.0, 3.0], [3.0, 4.0], [2.0, 3.0], [4.0, 1.0]])
    >>> pareto_mask(v, [False, False]).tolist()
    [True, True, False, True, True]
    """
    points = np.asarray(values, dtype=float)
    if points.ndim != 2 or points.shape[1] != len(maximize):
        raise ValueError("values must be points x objectives, one direction per objective")
    signs = np.where(np.asarray(maximize, dtype=bool), -1.0, 1.0)
    cost = points * signs  # every objective minimised from here on
    valid = ~np.isnan(cost).any(axis=1)
    mask = np.zeros(len(cost), dtype=bool)
    rows = np.flatnonzero(valid)
    if not len(rows):
        return mask
    if cost.shape[1] == 2:
        mask[rows[_front_2d(cost[rows])]] = True
    else:
        mask[rows[_front_nd(cost[rows])]] = True
    return mask


def _front_2d(cost: np.ndarray) -> np.ndarray:
    """Indices of the non-dominated rows of an (n, 2) array, both minimised."""
    order = np.lexsort((cost[:, 1], cost[:, 0]))  # by x, then y
    x, y = cost[order, 0], cost[order, 1]
    starts = np.flatnonzero(np.r_[True, x[1:] != x[:-1]])  # groups of equal x
    group = np.cumsum(np.r_[True, x[1:] != x[:-1]]) - 1
    group_min = y[starts]  # sorted by y inside a group: its first y is its least
    # the best y among every strictly smaller x: a running minimum, shifted by one group
    before = np.r_[np.inf, np.minimum.accumulate(group_min)[:-1]]
    keep = (y == group_min[group]) & (group_min[group] < before[group])
    return np.sort(order[keep])


def _front_nd(cost: np.ndarray) -> np.ndarray:
    """Indices of the non-dominated rows of an (n, d) array, every column minimised."""
    candidates = np.arange(len(cost))
    front: list[int] = []
    while len(candidates):
        # the lexicographically least candidate is never dominated by another candidate
        first = candidates[np.lexsort(cost[candidates].T[::-1])[0]]
        row = cost[first]
        dominated = (np.all(row <= cost[candidates], axis=1)
                     & np.any(row < cost[candidates], axis=1))
        same = np.all(cost[candidates] == row, axis=1)
        front.extend(int(i) for i in candidates[same])
        candidates = candidates[~dominated & ~same]
    return np.sort(np.array(front, dtype=np.int64))
