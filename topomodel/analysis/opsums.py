"""Where each operation of a pipeline schedule reads its figures, and each stage's sum
of them, bit for bit what numpy gives, in time that grows with a stage's distinct
blocks of operations rather than their number.

A partition of a model into stages and chunks has few distinct chunks (their dense and
MoE layers, whether they hold the first layer's input or the output):
:func:`chunk_map` finds them once per partition (:class:`ChunkMap`). Every operation of
a schedule (the F, B or W pass of one microbatch through one chunk) then reads its
duration and compute among those chunks' figures, laid out 6 a chunk (F, B, W
durations, then computes): :func:`op_index` finds those places once per schedule and
partition, and :func:`stage_sums` sums each stage's row of them.

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

import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from topomodel.kept import Kept

if TYPE_CHECKING:
    from topomodel.analysis.training.pipeline import Schedule

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


def chunks_of(dense_layers: np.ndarray, moe_layers: np.ndarray
              ) -> Iterator[tuple[int, tuple[int, int, bool, bool]]]:
    """Each chunk's stage and what its work reads, stage by stage, chunk by chunk:
    (dense layers, MoE layers, holds the first layer's input, holds the output)."""
    p, v = dense_layers.shape
    dense, moe = dense_layers.tolist(), moe_layers.tolist()
    for st in range(p):
        for c in range(v):
            yield st, (int(dense[st][c]), int(moe[st][c]), st == 0 and c == 0,
                       st == p - 1 and c == v - 1)


@dataclass(frozen=True, eq=False)
class ChunkMap:
    """The distinct chunks of a partition into stages and chunks: what each reads
    (dense layers, MoE layers, holds the first layer's input, holds the output;
    :func:`chunks_of`' keys), in the order they first come stage by stage, chunk by
    chunk; and each chunk's place among them (p x v,), read-only. ``key`` names the
    partition."""

    key: tuple[Any, ...]
    whats: tuple[tuple[int, int, bool, bool], ...]
    inverse: np.ndarray


def chunk_map(dense_layers: np.ndarray, moe_layers: np.ndarray) -> ChunkMap:
    """The :class:`ChunkMap` of a partition (dense and MoE layers per stage and chunk,
    (p, v)), found once per partition (:data:`KEPT_CHUNK_MAPS`): a search asks it of
    every layout on the pipeline."""
    key = (dense_layers.shape, dense_layers.tobytes(), moe_layers.tobytes())
    return _CHUNK_MAPS.get(key, (), lambda: _chunk_map(key, dense_layers, moe_layers))


def _chunk_map(key: tuple[Any, ...], dense_layers: np.ndarray, moe_layers: np.ndarray
               ) -> ChunkMap:
    """:func:`chunk_map`, found."""
    places: dict[tuple[int, int, bool, bool], int] = {}
    inverse = [places.setdefault(what, len(places))
               for _, what in chunks_of(dense_layers, moe_layers)]
    found = np.array(inverse, dtype=np.intp)
    found.setflags(write=False)
    return ChunkMap(key, tuple(places), found)


KEPT_CHUNK_MAPS = 4096
"""Partitions :func:`chunk_map` keeps (all dropped when full): one per pipeline depth,
interleave and model of a search, each a few hundred bytes."""

_CHUNK_MAPS: Kept[ChunkMap] = Kept(KEPT_CHUNK_MAPS)


def op_index(sched: Schedule, chunks: ChunkMap) -> np.ndarray:
    """Per operation of ``sched`` (p, n), where its duration sits in the distinct
    chunks' figures of ``chunks`` laid out row by row (6 per chunk: F, B, W durations,
    then computes; its compute 3 places on), found once per schedule and partition
    (kept while the schedule lives; read-only)."""
    per = _OP_INDEX.get(sched)
    if per is None:
        per = _OP_INDEX[sched] = {}
    index = per.get(chunks.key)
    if index is None:
        stage_chunk = np.arange(sched.p)[:, None] * sched.v + sched.chunk
        index = chunks.inverse[stage_chunk] * 6 + sched.kind
        index.setflags(write=False)
        if len(per) >= KEPT_OP_INDICES:
            per.clear()
        per[chunks.key] = index
    return index


KEPT_OP_INDICES = 8
"""Partitions :func:`op_index` keeps per schedule (all dropped when full): a search
runs a schedule on one or two partitions (one per model)."""

_OP_INDEX: weakref.WeakKeyDictionary[Schedule, dict[tuple[Any, ...], np.ndarray]] = (
    weakref.WeakKeyDictionary())


def stage_sums(sched: Schedule, chunks: ChunkMap, figures: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """Per stage (p,), the sums of the durations and computes, seconds, every operation
    of ``sched`` reads in ``figures`` (those of ``chunks``' distinct chunks, 6 a chunk:
    F, B, W durations, then computes), bit for bit ``figures.take(index).sum(axis=1)``
    at their places ``index`` (:func:`op_index`): on a long schedule through the distinct blocks
    numpy sums a row in (:func:`row_sums`, found once per schedule and partition),
    without the (p, n) operations."""
    index = op_index(sched, chunks)
    sums = _op_row_sums(sched, chunks, index)
    if sums is None:
        return figures.take(index).sum(axis=1), figures[3:].take(index).sum(axis=1)
    values = np.zeros((2, len(figures)))  # a duration's place reads its compute 3 on
    values[0] = figures
    values[1, :-3] = figures[3:]
    found = sums.of(values)
    return found[0], found[1]


ROW_SUMS_FROM = 16_384
"""Operations of a schedule (p x n) from which :func:`stage_sums` sums its rows through
their distinct blocks: below, gathering and summing them costs less."""

ROW_SUMS_GAIN = 4
"""How many times fewer the elements of a schedule's distinct blocks must be than its
operations for :func:`stage_sums` to sum through them."""

_OP_SUMS: weakref.WeakKeyDictionary[Schedule, dict[tuple[Any, ...], RowSums | None]] = (
    weakref.WeakKeyDictionary())


def _op_row_sums(sched: Schedule, chunks: ChunkMap, index: np.ndarray) -> RowSums | None:
    """The :class:`RowSums` of the durations' places ``index`` (kept per schedule and
    partition while the schedule lives); None where the schedule is short or its blocks
    too many to gain."""
    per = _OP_SUMS.get(sched)
    if per is None:
        per = _OP_SUMS[sched] = {}
    if chunks.key in per:
        return per[chunks.key]
    found = None
    if index.size >= ROW_SUMS_FROM:
        found = row_sums(index)
        if ROW_SUMS_GAIN * sum(s.size for _, s in found.leaves) > index.size:
            found = None
    if len(per) >= KEPT_OP_INDICES:
        per.clear()
    per[chunks.key] = found
    return found
