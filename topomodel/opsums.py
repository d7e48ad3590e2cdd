"""Row sums of values read through symbols, bit for bit what numpy gives for
``values[symbols].sum(axis=1)``, in time that grows with the rows' distinct blocks
rather than their length.

numpy sums a contiguous row of float64 pairwise (``pairwise_sum`` in its
``loops_utils.h``): a row of more than :data:`PAIRWISE_BLOCK` elements is split at half
its length rounded down to a multiple of :data:`UNROLL`, each half summed the same way
and the two added; a shorter block is summed in running accumulators, in an order
that depends only on its length. Every addition is an IEEE one, so a block's sum, and
a half's, depends only on the values in it, in order: blocks with the same symbols
have the same sum whatever the values are. (The reduction adds the row's sum to its
identity, 0, and numpy each block's: that changes a sum only from -0 to 0, which no
later addition but of another zero tells apart, and the row's sum is 0 + its sum in
both.)

A pipeline schedule's operations (thousands per stage, a few kinds of operation) repeat
the same blocks again and again. :func:`row_sums` finds the distinct blocks and
halves of every row of symbols once (:class:`RowSums`), and :meth:`RowSums.of` sums
each once for the values at hand: the blocks of a length by numpy's own sum, the
halves of a depth by one addition each, as numpy adds them.

Examples
--------
>>> import numpy as np
>>> symbols = np.tile([0, 1, 1, 2], (3, 300))
>>> symbols[1, :5] = 2
>>> values = np.array([[0.1, 0.7, 1.3e-3]])
>>> sums = row_sums(symbols)
>>> bool((sums.of(values)[0] == values[0][symbols].sum(axis=1)).all())
True
>>> sums.blocks < symbols.size // 20  # distinct blocks and halves, not elements
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PAIRWISE_BLOCK = 128
"""The longest block numpy sums without splitting it (``PW_BLOCKSIZE``)."""

UNROLL = 8
"""The multiple numpy rounds a split to (its running accumulators in a block)."""


@dataclass(frozen=True, eq=False)
class RowSums:
    """The distinct blocks and halves of some rows of symbols, numbered: per block
    length, the first number and the blocks' symbols (k, length); per depth above the
    blocks, the first number of its halves and those of their two parts; each row's
    number."""

    leaves: tuple[tuple[int, np.ndarray], ...]
    levels: tuple[tuple[int, np.ndarray, np.ndarray], ...]
    roots: np.ndarray
    blocks: int  # blocks and halves, all rows

    def of(self, values: np.ndarray) -> np.ndarray:
        """Each row's sum (c, rows) of ``values`` (c, symbols) at its symbols: what
        ``values[i][symbols].sum(axis=1)`` gives for each ``i``, bit for bit."""
        sums = np.empty((self.blocks, values.shape[0]))  # a row per block or half
        for first, symbols in self.leaves:
            # numpy's own sum of each block, contiguous as the rows are (numpy sums a
            # contiguous row pairwise, a strided one maybe not)
            blocks = np.take(values, symbols, axis=1)
            sums[first:first + len(symbols)] = blocks.sum(axis=2).T
        for start, left, right in self.levels:
            sums[start:start + len(left)] = sums[left] + sums[right]
        return np.ascontiguousarray(sums[self.roots].T)


def row_sums(symbols: np.ndarray) -> RowSums:
    """The :class:`RowSums` of ``symbols`` (rows, n), integers: its rows split as numpy
    splits them, each distinct block and half numbered once."""
    blocks: dict[bytes, int] = {}
    halves: dict[tuple[int, int], int] = {}
    block_of: list[np.ndarray] = []
    parts: list[tuple[int, int, int]] = []  # (number, left, right), parts first
    height: dict[int, int] = {}

    def number(row: np.ndarray) -> int:
        n = len(row)
        if n <= PAIRWISE_BLOCK:
            key = row.tobytes()
            found = blocks.get(key)
            if found is None:
                found = blocks[key] = len(blocks) + len(halves)
                block_of.append(row)
                height[found] = 0
            return found
        half = n // 2
        half -= half % UNROLL
        left, right = number(row[:half]), number(row[half:])
        found = halves.get((left, right))
        if found is None:
            found = halves[(left, right)] = len(blocks) + len(halves)
            parts.append((found, left, right))
            height[found] = 1 + max(height[left], height[right])
        return found

    rows = np.ascontiguousarray(symbols, dtype=np.intp)
    roots = [number(row) for row in rows]
    # renumber: blocks by length, then halves by depth (each after its parts)
    renumbered = np.empty(len(blocks) + len(halves), dtype=np.intp)
    lengths: dict[int, list[int]] = {}
    for i, row in enumerate(block_of):
        lengths.setdefault(len(row), []).append(i)
    block_numbers = list(blocks.values())  # in the order made: block_of's
    leaves = []
    at = 0
    for length in sorted(lengths):
        members = lengths[length]
        for j, i in enumerate(members):
            renumbered[block_numbers[i]] = at + j
        leaves.append((at, np.array([block_of[i] for i in members], dtype=np.intp)))
        at += len(members)
    by_depth: dict[int, list[tuple[int, int, int]]] = {}
    for made in parts:
        by_depth.setdefault(height[made[0]], []).append(made)
    levels = []
    for depth in sorted(by_depth):
        made_here = by_depth[depth]
        for j, (found, _, _) in enumerate(made_here):
            renumbered[found] = at + j
        levels.append((at, renumbered[[left for _, left, _ in made_here]],
                       renumbered[[right for _, _, right in made_here]]))
        at += len(made_here)
    return RowSums(tuple(leaves), tuple(levels), renumbered[roots], at)
