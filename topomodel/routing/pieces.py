"""The bytes the structured router (and each section of its router around failures)
puts on link rows, in pieces, and their sum per link row (:func:`link_bytes`, with the
span of rows they lie in: :func:`link_bytes_and_span`), bit for bit what one bincount
over every piece gives.

A piece is one kind of arc (tier and direction: host links, NIC - leaf, up- and
downlinks, core arcs, accelerator - chip): either plain (link rows and bytes of the same
shape) or :class:`Rows`, the rows of a table of the fabric's wiring picked by an index
(a flow's NIC arcs, a leaf pair's uplinks). A table's entries are distinct link rows,
so a :class:`Rows` piece with more entries than its table is summed over the table's
entries (a small array, where many flows share a NIC or a leaf) and only the rows it
loads are written; the other pieces are concatenated into one bincount over the link
rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class Rows:
    """Bytes on the link rows ``table[index]`` (``table[index, column]`` with ``column``).

    ``table`` is 1-D or 2-D, its entries distinct link rows (or -1 where ``index``
    never points: a node table's entries for nodes of other kinds); ``weights`` are
    bytes, (len(index), table width) on each row of ``table[index]``, or (len(index),)
    the same bytes on every column of ``table[index]`` (or on ``table[index, column]``).
    Summed over the table (:meth:`sums`) where it has no more entries than the piece,
    else as a plain piece (:meth:`plain`): the sums over a table cost its size."""

    table: np.ndarray
    index: np.ndarray
    weights: np.ndarray
    column: np.ndarray | None = None

    @property
    def per_row(self) -> bool:
        """Whether one weight stands for every column of a 2-D table's row."""
        return self.table.ndim == 2 and self.column is None and self.weights.ndim == 1

    @property
    def summed_over_table(self) -> bool:
        """Whether :meth:`sums` (over the table) is the cheaper way: the table has no
        more entries to sum into than the piece has to add."""
        if self.per_row:
            return len(self.index) >= len(self.table)
        return self.weights.size >= self.table.size

    def plain(self) -> tuple[np.ndarray, np.ndarray]:
        """(link rows, bytes) of the same shape."""
        if self.column is not None:
            return self.table[self.index, self.column], self.weights
        rows = self.table[self.index]
        if self.per_row:
            return rows, np.broadcast_to(self.weights[:, None], rows.shape)
        return rows, self.weights

    def sums(self) -> tuple[np.ndarray, np.ndarray]:
        """(link rows, bytes) of the rows loaded: each row's bytes added in the piece's
        order (index-major), as a bincount over its link rows adds them."""
        table = self.table
        if table.ndim == 1 or self.per_row:
            per = np.bincount(self.index, self.weights, len(table))
            hit = np.flatnonzero(per)
            if table.ndim == 1:
                return table[hit], per[hit]
            return table[hit].ravel(), np.repeat(per[hit], table.shape[1])
        width = table.shape[1]
        sums: np.ndarray
        if self.column is not None:
            key = self.index * width + self.column
            sums = np.bincount(key, self.weights.ravel(), table.size)
        else:  # column by column: each entry's bytes added in the same (index) order,
            # without a (len(index), width) array of keys
            columns = np.empty(table.shape)
            for k in range(width):
                columns[:, k] = np.bincount(self.index, self.weights[:, k], len(table))
            sums = columns.ravel()
        hit = np.flatnonzero(sums)
        return table.ravel()[hit], sums[hit]


Piece = tuple[np.ndarray, np.ndarray] | Rows
"""(link rows, bytes) of the same shape, or :class:`Rows`: one kind of arc a section of
the router loads."""


def link_bytes(n_links: int, pieces: list[Piece]) -> np.ndarray:
    """Bytes per link row of ``pieces`` whose kinds of arc are different link rows.

    Each row's bytes then come from one piece, in that piece's order, so the sums are
    bit for bit those of one bincount per piece added up, and those of one bincount over
    all of them (the zero-weight entries a piece may hold add 0, which leaves any sum as
    it is): the plain pieces share one bincount, and each :class:`Rows` piece summed
    over its table writes its sums on its own rows (0 there before, as adding them to 0
    gives)."""
    return link_bytes_and_span(n_links, pieces)[0]


def link_bytes_and_span(n_links: int, pieces: list[Piece]
                        ) -> tuple[np.ndarray, tuple[int, int]]:
    """:func:`link_bytes` and the span of rows ``(lo, hi)`` the pieces write (outside
    it every row is +0.0; ``(0, 0)`` for none)."""
    summed = [p for p in pieces if isinstance(p, Rows) and p.summed_over_table]
    arcs, weights = plain_entries([p for p in pieces
                                   if not (isinstance(p, Rows) and p.summed_over_table)])
    spans = []
    if len(arcs):
        out: np.ndarray = np.bincount(arcs, weights, n_links)
        spans.append((int(arcs.min()), int(arcs.max()) + 1))
    else:
        out = np.zeros(n_links)  # numpy counts an empty input in integers
    del arcs, weights
    for piece in summed:
        rows, sums = piece.sums()
        out[rows] = sums
        if len(rows):
            spans.append((int(rows.min()), int(rows.max()) + 1))
    return out, union_span(spans)


def plain_entries(pieces: list[Piece]) -> tuple[np.ndarray, np.ndarray]:
    """(link rows, bytes) of ``pieces`` (each as :meth:`Rows.plain` gives it) one after
    another: the arrays ``np.concatenate`` makes of them, the same types and values,
    with each piece's plain arrays made while it is copied in and dropped after (not
    every piece's at once beside the concatenation: the peak of a whole supernode
    section's sum at 98k).

    Examples
    --------
    >>> table = np.array([[10, 11], [12, 13]])
    >>> rows, weights = plain_entries([(np.array([1, 2]), np.array([0.5, 1.0])),
    ...                                Rows(table, np.array([1, 0]), np.array([2.0, 3.0]))])
    >>> rows.tolist(), weights.tolist()
    ([1, 2, 12, 13, 10, 11], [0.5, 1.0, 2.0, 2.0, 3.0, 3.0])
    """
    if not pieces:
        return np.zeros(0, np.int64), np.zeros(0)
    sizes, row_types, weight_types = [], [], []
    for piece in pieces:
        if isinstance(piece, Rows):
            # the shape of ``table[index, column]`` or ``table[index]``
            shape = (np.broadcast_shapes(piece.index.shape, piece.column.shape)
                     if piece.column is not None else piece.index.shape + piece.table.shape[1:])
            sizes.append(int(np.prod(shape)))
            row_types.append(piece.table.dtype)
            weight_types.append(piece.weights.dtype)
        else:
            sizes.append(piece[0].size)
            row_types.append(piece[0].dtype)
            weight_types.append(piece[1].dtype)
    rows = np.empty(sum(sizes), np.result_type(*row_types))
    weights = np.empty(sum(sizes), np.result_type(*weight_types))
    at = 0
    for piece, size in zip(pieces, sizes, strict=True):
        some_rows, some_weights = piece.plain() if isinstance(piece, Rows) else piece
        if some_rows.size != size or some_weights.size != size:
            raise ValueError(f"a piece's rows and bytes differ in size ({some_rows.size},"
                             f" {some_weights.size}; {size} expected)")
        # written in place (a broadcast's values too, without a copy of them first)
        np.copyto(rows[at:at + size].reshape(some_rows.shape), some_rows)
        np.copyto(weights[at:at + size].reshape(some_weights.shape), some_weights)
        at += size
    return rows, weights


def union_span(spans: list[tuple[int, int]]) -> tuple[int, int]:
    """The smallest span of rows ``(lo, hi)`` holding every one of ``spans`` (empty
    ones, ``lo == hi``, hold nothing); ``(0, 0)`` for none.

    Examples
    --------
    >>> union_span([(5, 9), (0, 0), (2, 4)])
    (2, 9)
    """
    held = [s for s in spans if s[1] > s[0]]
    if not held:
        return 0, 0
    return min(lo for lo, _ in held), max(hi for _, hi in held)
