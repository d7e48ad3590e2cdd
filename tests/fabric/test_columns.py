"""Categorical columns read as codes: ``group_totals`` against a pandas group-by."""

import numpy as np
import pandas as pd
import pytest

from topomodel.fabric.columns import group_totals
from topomodel.fabric.tables import categorical


def _table(seed: int, rows: int = 5000) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "tier": categorical(rng.integers(0, 3, rows), ["spine", "leaf", "core", "unused"]),
        "length_m": rng.choice([50.0, 2.0, 0.0, 30.0, 2.5], rows),
        "lanes": rng.choice([4, 1, 8], rows),
        "cables": rng.integers(0, 5, rows),
    })


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("every_row", [True, False])
def test_group_totals_is_the_sorted_group_by(seed, every_row):
    """Totals, keys and their order (category codes, then ascending values) are the
    group-by's, over a mask of rows or over every row; a group of zero total is kept."""
    table = _table(seed)
    mask = None if every_row else (np.arange(len(table)) % 3 != 0)
    keys = ["tier", "length_m", "lanes"]
    chosen = table if mask is None else table[mask]
    expected = chosen.groupby(keys, observed=True, sort=True)["cables"].sum()
    totals = group_totals([table[k] for k in keys], table["cables"].to_numpy(), mask)
    assert list(totals.items()) == [(key, int(n)) for key, n in expected.items()]
    assert any(n == 0 for n in group_totals([table["tier"], table["length_m"]],
                                            np.zeros(len(table), np.int64), mask).values())


def test_group_totals_refuses_a_missing_key():
    table = _table(3, rows=10)
    lengths = table["length_m"].copy()
    lengths.iloc[4] = np.nan
    with pytest.raises(ValueError, match="missing values"):
        group_totals([table["tier"], lengths], table["cables"].to_numpy(), None)
    tiers = table["tier"].copy()
    tiers.iloc[2] = np.nan
    with pytest.raises(ValueError, match="missing values"):
        group_totals([tiers], table["cables"].to_numpy(), None)
