"""Row sums through distinct blocks (:mod:`topomodel.analysis.opsums`) against numpy's own
``values[symbols].sum(axis=1)``, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from topomodel.analysis.opsums import PAIRWISE_BLOCK, row_sums
from topomodel.analysis.training.pipeline import schedule


@pytest.mark.parametrize("n", [1, 7, 8, 9, 64, 127, 128, 129, 136, 255, 256, 257, 1000,
                               4099, 70_001])
def test_row_sums_are_numpys_at_every_length(n):
    """Random symbols and values of several magnitudes, lengths around numpy's block
    and split sizes: every row's sum is numpy's, bit for bit."""
    rng = np.random.default_rng(n)
    symbols = rng.integers(0, 6, size=(3, n))
    symbols[1] = symbols[1] % 2  # fewer distinct blocks
    symbols[2, : n // 2] = 4  # a long run
    values = rng.random((2, 6)) * np.array([1e-6, 1.0, 3e3, 0.5, 7.0, 1e9])
    got = row_sums(symbols).of(values)
    for c in range(2):
        assert np.array_equal(got[c], values[c][symbols].sum(axis=1))
        assert np.array_equal(got[c], np.take(values[c], symbols).sum(axis=1))


@pytest.mark.parametrize(("name", "p", "m", "v"), [
    ("1f1b", 8, 1536, 1), ("1f1b", 16, 96, 3), ("zb-h1", 4, 12_288, 1), ("1f1b", 2, 3, 1)])
def test_a_schedules_rows_share_their_blocks(name, p, m, v):
    """A pipeline schedule's rows (kind and chunk per operation) sum as numpy sums
    them, with far fewer distinct blocks than operations on a long schedule."""
    sched = schedule(name, p, m, v)
    symbols = (np.arange(p)[:, None] * v + sched.chunk) * 3 + sched.kind
    values = np.random.default_rng(p).random((1, 3 * p * v))
    sums = row_sums(symbols)
    assert np.array_equal(sums.of(values)[0], values[0][symbols].sum(axis=1))
    if symbols.size > 100 * PAIRWISE_BLOCK:
        assert sums.blocks * 20 < symbols.size
