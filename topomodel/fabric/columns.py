"""The node and link tables as plain numpy columns (:class:`Columns`, with
:class:`Category` for a categorical column), and categorical columns read as numpy
arrays, fast on millions of rows (a look-up per code, never a string comparison per
row). Imports no pandas: a table becomes a pandas DataFrame only where a verb needs one
(:meth:`Columns.frame`), and the readers here take a :class:`Category` or a pandas
categorical column alike."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


class Category:
    """A categorical column without pandas: integer ``codes`` (one per row) into
    ``categories`` (labels; -1 for a missing value).

    Examples
    --------
    >>> tier = Category(np.array([1, 0, 1], np.int8), ("leaf", "spine"))
    >>> len(tier), tier.tolist(), tier.take(np.array([0])).tolist()
    (3, ['spine', 'leaf', 'spine'], ['spine'])
    >>> tier.isin(["leaf", "core"]).tolist()
    [False, True, False]
    """

    __slots__ = ("categories", "codes")

    def __init__(self, codes: np.ndarray, categories: Sequence[str]) -> None:
        self.codes: np.ndarray = read_only(codes)
        self.categories: tuple[str, ...] = tuple(str(c) for c in categories)

    def __len__(self) -> int:
        return len(self.codes)

    def labels(self) -> np.ndarray:
        """The rows' labels, a numpy object array (one look-up per code)."""
        return np.asarray((*self.categories, None), dtype=object)[self.codes]

    def tolist(self) -> list[Any]:
        """The rows' labels as a list."""
        out: list[Any] = self.labels().tolist()
        return out

    def take(self, rows: Any) -> Category:
        """The column of ``rows`` (indices or a mask)."""
        return Category(self.codes[rows], self.categories)

    __getitem__ = take

    def __eq__(self, label: object) -> np.ndarray:  # type: ignore[override]
        """Per row: whether it holds ``label`` (elementwise, as a pandas column)."""
        codes = [c for c, text in enumerate(self.categories) if text == label]
        mask: np.ndarray = self.codes == (codes[0] if codes else -2)
        return mask

    __hash__ = None  # type: ignore[assignment]

    def isin(self, values: Collection[str]) -> np.ndarray:
        """Per row: whether its label is one of ``values`` (one look-up per code)."""
        inside = np.array([c in values for c in self.categories] + [False])
        mask: np.ndarray = inside[self.codes]
        return mask


Column = Any  # a numpy array or a Category: what Columns holds per name


class Columns:
    """A table as equal-length numpy columns (numpy arrays and :class:`Category`
    columns), in order: the fabric's node and link tables
    (:attr:`~topomodel.fabric.tables.Fabric.node_arrays`, ``link_arrays``). The arrays
    are held as given, not copied; a table is read, never changed in place
    (:meth:`replaced` makes a new one sharing the other columns).

    Examples
    --------
    >>> table = Columns({"src": np.array([0, 1]),
    ...                  "tier": Category(np.array([1, 0], np.int8), ("host", "leaf"))})
    >>> len(table), table.names, table["src"].tolist(), table["tier"].tolist()
    (2, ('src', 'tier'), [0, 1], ['leaf', 'host'])
    >>> table.replaced(src=np.array([5, 6]))["src"].tolist(), table["src"].tolist()
    ([5, 6], [0, 1])
    >>> table.take(np.array([False, True]))["tier"].tolist()
    ['host']
    >>> table.frame().dtypes.astype(str).tolist()
    ['int64', 'category']
    """

    __slots__ = ("_columns", "_rows")

    def __init__(self, columns: dict[str, Column]) -> None:
        lengths = {len(column) for column in columns.values()}
        if len(lengths) > 1:
            raise ValueError(f"Columns: columns of different lengths {sorted(lengths)}")
        self._columns = {name: column if isinstance(column, Category) else read_only(column)
                         for name, column in columns.items()}
        self._rows = lengths.pop() if lengths else 0

    def __getitem__(self, name: str) -> Column:
        return self._columns[name]

    def __contains__(self, name: object) -> bool:
        return name in self._columns

    def __len__(self) -> int:
        return self._rows

    @property
    def names(self) -> tuple[str, ...]:
        """The column names, in order."""
        return tuple(self._columns)

    def take(self, rows: Any) -> Columns:
        """The table of ``rows`` (indices or a mask), every column taken."""
        return Columns({name: column[rows] for name, column in self._columns.items()})

    def replaced(self, **columns: Column) -> Columns:
        """A table with ``columns`` in place of (or after) its own, sharing the rest."""
        return Columns({**self._columns, **columns})

    def frame(self) -> pd.DataFrame:
        """This table as a pandas DataFrame (categorical columns as pandas categoricals;
        the arrays shared, not copied): the one conversion, for a verb that needs pandas
        (CSV and table exports, the report's tables)."""
        import pandas as pd

        return pd.DataFrame({
            name: pd.Categorical.from_codes(column.codes, dtype=pd.CategoricalDtype(
                list(column.categories))) if isinstance(column, Category) else column
            for name, column in self._columns.items()}, copy=False)

    @classmethod
    def of_frame(cls, frame: pd.DataFrame) -> Columns:
        """The columns of a pandas DataFrame (a fabric's tables changed with pandas)."""
        return cls({str(name): Category(frame[name].cat.codes.to_numpy(),
                                        [str(c) for c in frame[name].cat.categories])
                    if frame[name].dtype.name == "category" else frame[name].to_numpy()
                    for name in frame.columns})


def read_only(values: Any) -> np.ndarray:
    """A read-only view of ``values`` (an array): a table's columns are shared by the
    fabric's copies and views, so writing into one raises instead of changing them all
    (as pandas' copy-on-write columns did)."""
    view = np.asarray(values).view()
    view.flags.writeable = False
    return view


def codes_of(column: Any) -> np.ndarray:
    """A categorical column's integer codes (a :class:`Category` or a pandas one)."""
    if isinstance(column, Category):
        return column.codes
    codes: np.ndarray = column.cat.codes.to_numpy()
    return codes


def categories_of(column: Any) -> list[str]:
    """A categorical column's categories, as strings."""
    if isinstance(column, Category):
        return list(column.categories)
    return [str(c) for c in column.cat.categories]


def labels(column: Category | pd.Series) -> np.ndarray:
    """A categorical column's values as a numpy object array, one lookup per code (much
    faster than converting the strings row by row).

    Examples
    --------
    >>> import pandas as pd
    >>> from topomodel.fabric.tables import categorical
    >>> labels(pd.Series(categorical(np.array([1, 0, 1]), ["leaf", "spine"]))).tolist()
    ['spine', 'leaf', 'spine']
    """
    return np.asarray(categories_of(column), dtype=object)[codes_of(column)]


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

    def __init__(self, column: Category | pd.Series) -> None:
        self.codes: np.ndarray = codes_of(column)
        self._code = {label: code for code, label in enumerate(categories_of(column))}

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

    def __init__(self, column: Category | pd.Series) -> None:
        self.codes: np.ndarray = codes_of(column)
        self.labels = categories_of(column)

    def label(self, code: int) -> str:
        """The label of ``code``."""
        return self.labels[code]

    def by_label(self, codes: np.ndarray) -> list[int]:
        """``codes`` in the order of their labels."""
        return sorted((int(c) for c in codes), key=self.labels.__getitem__)


def present_labels(column: Category | pd.Series) -> list[str]:
    """The values a categorical column holds, from its codes (fast on millions of rows).

    Examples
    --------
    >>> import pandas as pd
    >>> present_labels(pd.Series(["b", "a", "b"], dtype=pd.CategoricalDtype(["a", "b", "c"])))
    ['a', 'b']
    """
    categories = categories_of(column)
    seen = np.zeros(len(categories) + 1, bool)  # a mark per category; a missing value's
    seen[codes_of(column)] = True  # code (-1) marks the spare last one
    return [str(categories[c]) for c in np.flatnonzero(seen[:-1])]


def group_totals(keys: Sequence[Any], values: np.ndarray, rows: np.ndarray | None
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
        if isinstance(key, Category) or key.dtype.name == "category":
            codes.append(codes_of(key)[taken])
            names.append(categories_of(key))
        elif isinstance(key.dtype, np.dtype):  # a hash table of the rows', not a sort
            value_codes, values_present = _factorized(np.asarray(key)[taken])
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
