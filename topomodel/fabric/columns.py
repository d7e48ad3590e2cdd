"""Categorical columns of the node and link tables read as numpy arrays, fast on
millions of rows (a look-up per code, never a string comparison per row). Needs no
pandas import of its own: it reads the columns it is given."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


def labels(column: pd.Series) -> np.ndarray:
    """A categorical column's values as a numpy object array, one lookup per code (much
    faster than converting the strings row by row).

    Examples
    --------
    >>> import pandas as pd
    >>> from topomodel.fabric.tables import categorical
    >>> labels(pd.Series(categorical(np.array([1, 0, 1]), ["leaf", "spine"]))).tolist()
    ['spine', 'leaf', 'spine']
    """
    return np.asarray(column.cat.categories, dtype=object)[column.cat.codes.to_numpy()]


class Coded:
    """A categorical column as its integer codes, compared by label without a string
    comparison per row (millions of link rows in milliseconds).

    Examples
    --------
    >>> import pandas as pd
    >>> from topomodel.fabric.tables import categorical
    >>> tier = Coded(pd.Series(categorical(np.array([1, 0, 1]), ["leaf", "spine"])))
    >>> tier.equals("spine").tolist(), tier.equals("spine", at=np.array([1])).tolist()
    ([True, False, True], [False])
    >>> tier.equals("core").any()
    np.False_
    """

    def __init__(self, column: pd.Series) -> None:
        self.codes: np.ndarray = column.cat.codes.to_numpy()
        self._code = {str(label): code for code, label in enumerate(column.cat.categories)}

    def at(self, rows: np.ndarray) -> Coded:
        """The codes of ``rows`` as their own column (a node column at each link's end:
        one gather, then as many comparisons as wanted)."""
        picked = Coded.__new__(Coded)
        picked.codes, picked._code = self.codes[rows], self._code
        return picked

    def equals(self, label: str, at: np.ndarray | None = None) -> np.ndarray:
        """Whether each row (or each row of ``at``) holds ``label``."""
        codes = self.codes if at is None else self.codes[at]
        mask: np.ndarray = codes == self._code.get(label, -2)
        return mask


class CodeLabels:
    """A categorical column's integer codes with their labels, for groups listed in
    label order (as a group-by over the strings would list them) without reading a
    string per row.

    Examples
    --------
    >>> import pandas as pd
    >>> from topomodel.fabric.tables import categorical
    >>> tier = CodeLabels(pd.Series(categorical(np.array([1, 0, 1]), ["spine", "leaf"])))
    >>> tier.codes.tolist(), tier.label(1), tier.by_label(np.array([0, 1]))
    ([1, 0, 1], 'leaf', [1, 0])
    """

    def __init__(self, column: pd.Series) -> None:
        self.codes: np.ndarray = column.cat.codes.to_numpy()
        self.labels = [str(c) for c in column.cat.categories]

    def label(self, code: int) -> str:
        """The label of ``code``."""
        return self.labels[code]

    def by_label(self, codes: np.ndarray) -> list[int]:
        """``codes`` in the order of their labels."""
        return sorted((int(c) for c in codes), key=self.labels.__getitem__)


def present_labels(column: pd.Series) -> list[str]:
    """The values a categorical column holds, from its codes (fast on millions of rows).

    Examples
    --------
    >>> import pandas as pd
    >>> present_labels(pd.Series(["b", "a", "b"], dtype=pd.CategoricalDtype(["a", "b", "c"])))
    ['a', 'b']
    """
    categories = column.cat.categories
    seen = np.zeros(len(categories) + 1, bool)  # a mark per category; a missing value's
    seen[column.cat.codes.to_numpy()] = True  # code (-1) marks the spare last one
    return [str(categories[c]) for c in np.flatnonzero(seen[:-1])]


def group_totals(keys: Sequence[pd.Series], values: np.ndarray, rows: np.ndarray | None
                 ) -> dict[tuple[Any, ...], int]:
    """The sum of the integer ``values`` of ``rows`` (a mask; ``None``: every row) for
    each combination of ``keys`` those rows hold, as a group-by would give it
    (categorical columns by their codes, others by value), keyed by label tuples in code
    order; no string is read per row.

    Examples
    --------
    >>> import pandas as pd
    >>> from topomodel.fabric.tables import categorical
    >>> tier = pd.Series(categorical(np.array([1, 0, 1, 1]), ["leaf", "spine"]))
    >>> length = pd.Series([3.0, 3.0, 5.0, 3.0])
    >>> group_totals([tier, length], np.array([1, 2, 4, 8]), np.array([1, 1, 1, 0], bool))
    {('leaf', 3.0): 2, ('spine', 3.0): 1, ('spine', 5.0): 4}
    """
    codes: list[np.ndarray] = []
    names: list[list[Any]] = []
    taken: Any = slice(None) if rows is None else rows  # every row: views, no copies
    for key in keys:
        if key.dtype.name == "category":
            codes.append(key.cat.codes.to_numpy()[taken])
            names.append([str(c) for c in key.cat.categories])
        elif isinstance(key.dtype, np.dtype):  # a hash table of the rows', not a sort
            value_codes, values_present = _factorized(key.to_numpy()[taken])
            codes.append(value_codes)
            names.append(values_present.tolist())
        else:
            value_codes, values_present = key.factorize(sort=True)
            codes.append(value_codes[taken])
            names.append(values_present.tolist())
    sizes = tuple(max(len(n), 1) for n in names)
    flat = np.zeros(len(values[taken]), np.intp)
    if any(len(code) and code.min() < 0 for code in codes):
        raise ValueError("group_totals: a key column holds missing values")
    for code, size in zip(codes, sizes, strict=True):  # np.ravel_multi_index, in place
        flat *= size
        flat += code
    groups = np.flatnonzero(np.bincount(flat, minlength=math.prod(sizes)))
    totals = np.rint(np.bincount(flat, weights=values[taken])[groups]).astype(np.int64).tolist()
    places = np.unravel_index(groups, sizes)
    return {tuple(n[p[i]] for n, p in zip(names, places, strict=True)): totals[i]
            for i in range(len(groups))}


def _factorized(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes of ``values`` into their distinct values, and those in ascending order: a
    hash table (pandas' factorize, imported where a non-categorical key needs it), its
    few distinct values sorted after, not the rows.

    Raises
    ------
    ValueError
        When a value is missing (NaN): it belongs to no group.
    """
    import pandas as pd

    codes, present = pd.factorize(values)
    if len(codes) and codes.min() < 0:
        raise ValueError("group_totals: a key column holds missing values")
    order = np.argsort(np.asarray(present), kind="stable")
    rank = np.empty(len(order), np.intp)
    rank[order] = np.arange(len(order))
    return rank[codes], np.asarray(present)[order]
