"""A table-summed piece adds each row's bytes as one bincount over every entry does."""

import numpy as np
import pytest

from topomodel.routing.pieces import Rows, link_bytes


@pytest.mark.parametrize("column", [False, True])
def test_rows_summed_column_by_column_are_the_bincount_over_every_entry(column):
    rng = np.random.default_rng(4)
    table = rng.permutation(600).reshape(200, 3)  # distinct link rows
    index = rng.integers(0, 150, 5000)  # rows 150-199 of the table never loaded
    weights = rng.uniform(0, 1e6, (5000,) if column else (5000, 3))
    weights[rng.random(weights.shape) < 0.2] = 0.0
    pick = rng.integers(0, 3, 5000) if column else None
    piece = Rows(table, index, weights, pick)
    assert piece.summed_over_table
    if column:
        want = np.bincount(table[index, pick], weights, 600)
    else:
        want = np.bincount(table[index].ravel(), weights.ravel(), 600)
    got = link_bytes(600, [piece])
    assert np.array_equal(got.view(np.uint64), want.view(np.uint64))
    rows, sums = piece.sums()
    assert np.array_equal(np.sort(rows), np.flatnonzero(want))
    assert np.array_equal(sums, want[rows])


def test_plain_entries_are_the_concatenation_of_every_plain_piece():
    """Each piece copied in, one at a time, gives np.concatenate's arrays (types too),
    and the load link_bytes sums from them is the one bincount over them, bit for bit."""
    from topomodel.routing.pieces import plain_entries

    rng = np.random.default_rng(9)
    table2 = rng.permutation(40).reshape(10, 4) + 600  # 2-D table, rows 600-639
    table1 = np.arange(700, 720, dtype=np.int32)  # a 1-D table of int32 rows
    pieces = [
        (rng.integers(0, 600, 50), rng.uniform(0, 1e3, 50)),  # plain
        Rows(table2, rng.integers(0, 10, 3), rng.uniform(0, 1e3, 3)),  # per row
        Rows(table2, rng.integers(0, 10, 2), rng.uniform(0, 1e3, (2, 4))),  # 2-D bytes
        Rows(table2, rng.integers(0, 10, 5).astype(np.int32), rng.uniform(0, 1e3, 5),
             rng.integers(0, 4, 5).astype(np.int8)),  # a column each, narrow indices
        Rows(table1, rng.integers(0, 20, 4), rng.uniform(0, 1e3, 4)),  # 1-D table
    ]
    assert not any(isinstance(p, Rows) and p.summed_over_table for p in pieces)
    plain = [p.plain() if isinstance(p, Rows) else p for p in pieces]
    rows = np.concatenate([a.ravel() for a, _ in plain])
    weights = np.concatenate([w.ravel() for _, w in plain])
    got_rows, got_weights = plain_entries(pieces)
    assert got_rows.dtype == rows.dtype and got_weights.dtype == weights.dtype
    assert np.array_equal(got_rows, rows)
    assert np.array_equal(got_weights.view(np.uint64), weights.view(np.uint64))
    want = np.bincount(rows, weights, 800)
    assert np.array_equal(link_bytes(800, pieces).view(np.uint64), want.view(np.uint64))
    empty_rows, empty_weights = plain_entries([])
    assert empty_rows.dtype == np.int64 and len(empty_rows) == len(empty_weights) == 0
