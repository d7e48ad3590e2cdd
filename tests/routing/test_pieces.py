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
